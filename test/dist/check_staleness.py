#!/usr/bin/env python3
"""check_staleness.py TRACE SUMMARY S [--expect-violation] - the bound of an
async run with --max-staleness S, from its --trace-examples file (one line
per step: worker, step = the global step its update drew) and summary.

The global steps order the updates: worker i's n-th update drew g_i(n), after
it started step n. The bound says worker i starts step n only once every
unfinished worker completed n-1-S steps, so for every worker j with at least
k = n-1-S >= 1 steps: g_j(k) < g_i(n). (A worker with fewer steps in all has
finished and no longer counts.) The summary must hold a histogram of one
count per update, with "max_staleness" S. With --expect-violation (an
unbounded run with a slowed worker) the check must find a worker running more
than S steps ahead: the test that shows the bound is what holds it. Prints
the largest lead found."""
import json
import sys

trace, summary, bound = sys.argv[1], sys.argv[2], int(sys.argv[3])
expect_violation = "--expect-violation" in sys.argv[4:]
steps = {}
for line in open(trace):
    r = json.loads(line)
    steps.setdefault(r["worker"], []).append(r["step"])
for g in steps.values():
    g.sort()


def lead_at(i, n):
    """How many steps worker i's n-th step (1-based) ran ahead of the
    slowest worker that had not finished: n-1 minus the fewest steps any
    worker j with more steps in all had completed before g_i(n)."""
    gi = steps[i][n - 1]
    lead = 0
    for j, gj in steps.items():
        if j == i:
            continue
        completed = sum(1 for g in gj if g < gi)
        if completed < len(gj):  # j was still running
            lead = max(lead, n - 1 - completed)
    return lead


worst = max((lead_at(i, n), i, n) for i in steps for n in range(1, len(steps[i]) + 1))
s = json.load(open(summary))
st = s.get("staleness")
if st is None:
    sys.exit("summary has no staleness object")
nupdates = sum(len(g) for g in steps.values())
if sum(st["histogram"]) != nupdates or sum(st["histogram"]) != s["steps"]:
    sys.exit("histogram counts %d updates, trace %d, steps %d"
             % (sum(st["histogram"]), nupdates, s["steps"]))
print("largest lead %d (worker %d, step %d); staleness max %d; steps per worker %r"
      % (worst[0], worst[1], worst[2], st["max"],
         {w: len(g) for w, g in sorted(steps.items())}))
if expect_violation:
    if st["max_staleness"] is not None:
        sys.exit("unbounded run reports max_staleness %r" % st["max_staleness"])
    if worst[0] <= bound:
        sys.exit("no worker ran more than %d steps ahead without the bound" % bound)
    sys.exit(0)
if st["max_staleness"] != bound:
    sys.exit("summary max_staleness %r, expected %d" % (st["max_staleness"], bound))
if worst[0] > bound:
    sys.exit("worker %d started step %d %d steps ahead of an unfinished worker (bound %d)"
             % (worst[1], worst[2], worst[0], bound))
nworkers = len(s["timing"]["workers"])
limit = (nworkers - 1) * (2 * bound + 1)
if st["max"] > limit:
    sys.exit("staleness %d above the %d that the bound allows" % (st["max"], limit))
