#!/usr/bin/env python3
"""check_timeline.py FILE.json ROLES BATCHES CKPT_STEPS EVALS [MODE]

Checks a --timeline file (docs/operations.md, "Timeline"):
  ROLES       comma-separated roles by rank: "root,ps 1,worker 0,worker 1",
              or "single" for a single-process run
  BATCHES     the batches trained (tickets 0..BATCHES-1)
  CKPT_STEPS  comma-separated steps of the checkpoints written ('' for none)
  EVALS       the number of evaluations
  MODE        sync (default: five phases per step) or async (no wait_version)
Exits 1 with one line per problem."""
import collections
import json
import re
import sys

EPS = 0.002  # microseconds: ts and dur are written with 3 decimals


def main():
    path, roles, nbatch, ckpts, nevals = sys.argv[1:6]
    mode = sys.argv[6] if len(sys.argv) > 6 else "sync"
    nbatch, nevals = int(nbatch), int(nevals)
    ckpts = sorted(int(s) for s in ckpts.split(",") if s)
    with open(path) as f:
        doc = json.load(f)
    errs = []
    if doc.get("displayTimeUnit") != "ms":
        errs.append("displayTimeUnit %r" % doc.get("displayTimeUnit"))
    evs = doc["traceEvents"]
    names, sort_index = {}, {}
    for e in evs:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "process_sort_index":
            sort_index[e["pid"]] = e["args"]["sort_index"]
    roles = roles.split(",")
    single = roles == ["single"]
    for rank, role in enumerate(roles):
        want = r"single process @.+" if single else r"rank %d %s @.+" % (rank, re.escape(role))
        if not re.fullmatch(want, names.get(rank, "")):
            errs.append("rank %d: process_name %r, expected %s" % (rank, names.get(rank), want))
        if rank not in sort_index:
            errs.append("rank %d: no process_sort_index" % rank)
    if sorted(names) != list(range(len(roles))):
        errs.append("processes %r for %d ranks" % (sorted(names), len(roles)))

    # complete events in file order, per (pid, tid)
    lanes = collections.defaultdict(list)
    for e in evs:
        if e["ph"] != "X":
            continue
        if e["dur"] < 0 or e["ts"] < -EPS:
            errs.append("pid %d: %s at ts %r dur %r" % (e["pid"], e["name"], e["ts"], e["dur"]))
        lanes[(e["pid"], e["tid"])].append(e)
    for (pid, tid), lane in lanes.items():
        for a, b in zip(lane, lane[1:]):
            if b["ts"] < a["ts"]:
                errs.append("pid %d tid %d: ts goes back at %s %r" % (pid, tid, b["name"], b["ts"]))
                break
            # one lane's events do not overlap (step phases, applies, idles, publications)
            if a["ts"] + a["dur"] > b["ts"] + EPS:
                errs.append("pid %d tid %d: %s %r+%r overlaps %s %r" % (pid, tid, a["name"], a["ts"], a["dur"], b["name"], b["ts"]))
                break

    def of(pid, name):
        return [e for lane in (v for k, v in lanes.items() if k[0] == pid) for e in lane
                if e["name"] == name]

    phases = ["wait_data", "pull", "compute", "push"] + (["wait_version"] if mode == "sync" else [])
    if single:  # and one apply (the optimizer step) each
        phases = ["wait_data", "compute"]
        if len(of(0, "apply")) != nbatch:
            errs.append("%d apply events for %d steps" % (len(of(0, "apply")), nbatch))
    workers = [0] if single else [r for r, role in enumerate(roles) if role.startswith("worker")]
    tickets = collections.Counter()
    for w in workers:
        per = collections.defaultdict(list)
        for e in lanes.get((w, 0), []):
            if e["name"] in ("wait_data", "pull", "compute", "push", "wait_version"):
                per[e["args"]["ticket"]].append(e["name"])
        for t, ph in per.items():
            if sorted(ph) != sorted(phases):
                errs.append("rank %d ticket %d: phases %r, expected %r" % (w, t, ph, phases))
                break
        tickets.update(per.keys())
    if sorted(tickets) != list(range(nbatch)) or max(tickets.values(), default=1) != 1:
        errs.append("tickets: %d distinct of %d, expected each of 0..%d once" % (len(tickets), sum(tickets.values()), nbatch - 1))

    if not single:
        for p, role in enumerate(roles):
            if role.startswith("ps") and not of(p, "apply"):
                errs.append("rank %d (%s): no apply events" % (p, role))
        pub = {e["args"]["ticket"]: e for e in of(0, "publish")}
        if sorted(pub) != list(range(nbatch)):
            errs.append("root: %d publish events for %d batches" % (len(pub), nbatch))
        # on one clock a batch is taken after it was published
        late = 0
        for w in workers:
            for e in of(w, "wait_data"):
                p = pub.get(e["args"]["ticket"])
                if p and e["ts"] + e["dur"] < p["ts"] - 1000:
                    late += 1
        if late:
            errs.append("%d batches taken more than 1 ms before they were published" % late)
    got = sorted(e["args"]["step"] for e in of(0, "checkpoint"))
    if got != ckpts:
        errs.append("checkpoint events at steps %r, expected %r" % (got, ckpts))
    if len(of(0, "eval")) != nevals:
        errs.append("%d eval events, expected %d" % (len(of(0, "eval")), nevals))
    for e in errs[:10]:
        print("FAIL: %s" % e)
    sys.exit(1 if errs else 0)


main()
