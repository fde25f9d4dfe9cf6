#!/usr/bin/env python3
"""check_trace.py TRACE WORKERS PAIRS - an --trace file of test_dist train
(one JSON line per batch: worker, epoch, ids) holds every (epoch, id) pair
once, PAIRS of them, taken by workers 0..WORKERS-1. Which worker takes which
batch is up to timing (a starved worker may take none in a short run): only
the worker ids must be valid. Exit 1 with the first defect."""
import json
import sys

trace, nworkers, npairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seen, workers = {}, set()
for line in open(trace):
    r = json.loads(line)
    workers.add(r["worker"])
    for i in r["ids"]:
        k = (r["epoch"], i)
        if k in seen:
            sys.exit("duplicate %r (workers %d and %d)" % (k, seen[k], r["worker"]))
        seen[k] = r["worker"]
if len(seen) != npairs:
    sys.exit("trace has %d (epoch, id) pairs, expected %d" % (len(seen), npairs))
if not workers <= set(range(nworkers)):
    sys.exit("workers in trace: %r, expected ids below %d" % (sorted(workers), nworkers))
print("trace OK: %d pairs, workers %r" % (len(seen), sorted(workers)))
