#!/usr/bin/env bash
# test_feeders.sh - feeder ranks (pstrain train --feeders F, docs/design.md
# §1, §3): every example exactly once per epoch for F = 1, 2, 3 (the trace
# checker, sync and async), the root -> feeder map, each feeder preparing
# only its own tickets' examples (summary), sync final variables
# bitwise equal for every F, for 1 and 2 PS and across two runs, checkpoints
# written with F = 2 resumed with F = 1, 2, 3 bitwise equal to the
# uninterrupted run, the same after SIGUSR1 stops an F = 2 run mid-run, and
# the refusals (one line on the root, exit 1). Lockstep sync and async draw
# each worker's batches from one feeder, the one on its node (else in turn):
# on nodes emulated by the test-only PSTRAIN_TEST_NODES (layout.h), the map
# names each worker's feeder, exactly once and (sync) bitwise equal to F = 1
# with uneven groups, a node without a feeder and no worker on the root's
# node, resumed with another F, and the SIGUSR1 stop with no worker on the
# root's node. Async with a slowed group: exactly once, the other workers
# moving on to its feeder's tickets; with --max-staleness 1 the bound holds;
# an async SIGUSR1 stop resumed: exactly once across both runs.
#
# Environment (test_env): PSTRAIN, TEST_DIST (mkdata), PSTRAIN_SRC, MPIEXEC,
# MPI_FLAVOUR.
set -u
. "$(dirname "$0")/mlp_runs.sh"
CHECK_TRACE="$(dirname "$0")/check_trace.py"
once() { # NAME WORKERS
    python3 "$CHECK_TRACE" "$TMP/$1.jsonl" "$2" 1200 >/dev/null || bad "$1: not exactly once"
}
feeders() { # NAME F: the summary's feeder count
    grep -q "\"feeders\": $2," "$TMP/$1.json" || bad "$1: the summary lacks feeders $2"
}

# sync, 1 PS, 2 workers: F = 1 (the default), 2, 3
train f1 4 --ps 1
once f1 2
feeders f1 1
train f2 5 --ps 1 --feeders 2
once f2 2
feeders f2 2
same f2 f1
train f3 6 --ps 1 --feeders 3
once f3 2
feeders f3 3
same f3 f1
# the map names the feeders (ranks after the PS)
grep -q 'rank 0 root, rank 1 ps 1, rank 2 feeder 1, rank 3 feeder 2, rank 4 worker 0' \
    "$TMP/f3.log" || bad "f3: the map lacks the feeders"
# one node: the workers draw from the feeders in turn
grep -q 'rank 4 worker 0 (from feeder 0), rank 5 worker 1 (from feeder 1)' "$TMP/f3.log" ||
    bad "f3: the map lacks the workers' feeders"
# two PS, and a rerun
train f2-ps2 6 --ps 2 --feeders 2
once f2-ps2 2
same f2-ps2 f1
train f2-again 5 --ps 1 --feeders 2
same f2-again f2
# three workers, async: exactly once, each worker drawing from a feeder (one
# node: in turn)
train async3 7 --ps 1 --feeders 3 --mode async
once async3 3
grep -q 'rank 4 worker 0 (from feeder 0), rank 5 worker 1 (from feeder 1), rank 6 worker 2 (from feeder 2)' \
    "$TMP/async3.log" || bad "async3: the map lacks the workers' feeders"

# emulated nodes
train w4 6 --ps 1
# 1 worker on the root's node, 3 on feeder 1's
PSTRAIN_TEST_NODES=0,0,0,1,1,1,1 train local-a 7 --ps 1 --feeders 2
map local-a "host node0: rank 0 root, rank 1 ps 1, rank 2 worker 0 (from feeder 0)" \
    "host node1: rank 3 feeder 1, rank 4 worker 1 (from feeder 1), rank 5 worker 2 (from feeder 1), rank 6 worker 3 (from feeder 1)"
once local-a 4
same local-a w4
# one ticket of every version from the root, three from feeder 1
python3 - "$TMP/local-a.json" <<'PY' || bad "local-a: the feeders' shares"
import json, sys
fs = json.load(open(sys.argv[1]))["data"]["feeders"]
assert [(f["rank"], f["batches"]) for f in fs] == [(0, 19), (3, 57)], fs
PY
# node 2 has no feeder: its workers go to feeders 0 and 1 in turn
PSTRAIN_TEST_NODES=0,0,0,1,1,2,2 train local-b 7 --ps 1 --feeders 2
map local-b "host node0: rank 0 root, rank 1 ps 1, rank 2 worker 0 (from feeder 0)" \
    "host node1: rank 3 feeder 1, rank 4 worker 1 (from feeder 1)" \
    "host node2: rank 5 worker 2 (from feeder 0), rank 6 worker 3 (from feeder 1)"
once local-b 4
same local-b w4
# no worker on the root's node: the root serves no ticket
PSTRAIN_TEST_NODES=0,0,1,1,1 train local-c 5 --ps 1 --feeders 2
map local-c "host node0: rank 0 root, rank 1 ps 1" \
    "host node1: rank 2 feeder 1, rank 3 worker 0 (from feeder 1), rank 4 worker 1 (from feeder 1)"
once local-c 2
same local-c f1

# async on the same node shapes: worker 0, alone on the root's node, slowed
# (test-only PSTRAIN_TEST_SLOW_WORKER): the others run out of feeder 1's
# tickets and move on to the root's (positions 0 mod 4), exactly once
moved() { # NAME WORKER MOD: a batch of position 0 mod MOD taken by another worker
    python3 - "$TMP/$1.jsonl" "$2" "$3" <<'PY' || bad "$1: no worker moved on to worker $2's feeder"
import json, sys
w, mod = int(sys.argv[2]), int(sys.argv[3])
rs = [json.loads(l) for l in open(sys.argv[1])]
assert any(r["ticket"] % mod == 0 and r["worker"] != w for r in rs)
PY
}
PSTRAIN_TEST_NODES=0,0,0,1,1,1,1 PSTRAIN_TEST_SLOW_WORKER=0:20 train async-a 7 --ps 1 --feeders 2 \
    --mode async
map async-a "host node0: rank 0 root, rank 1 ps 1, rank 2 worker 0 (from feeder 0)" \
    "host node1: rank 3 feeder 1, rank 4 worker 1 (from feeder 1), rank 5 worker 2 (from feeder 1), rank 6 worker 3 (from feeder 1)"
once async-a 4
moved async-a 0 4
# a node without a feeder; no worker on the root's node
PSTRAIN_TEST_NODES=0,0,0,1,1,2,2 train async-b 7 --ps 1 --feeders 2 --mode async
map async-b "host node0: rank 0 root, rank 1 ps 1, rank 2 worker 0 (from feeder 0)" \
    "host node1: rank 3 feeder 1, rank 4 worker 1 (from feeder 1)" \
    "host node2: rank 5 worker 2 (from feeder 0), rank 6 worker 3 (from feeder 1)"
once async-b 4
PSTRAIN_TEST_NODES=0,0,1,1,1 train async-c 5 --ps 1 --feeders 2 --mode async
once async-c 2
# --max-staleness 1 with the slowed group: the bound holds (check_staleness.py)
PSTRAIN_TEST_NODES=0,0,0,1,1,1,1 PSTRAIN_TEST_SLOW_WORKER=0:20 train stale 7 --ps 1 --feeders 2 \
    --mode async --max-staleness 1
once stale 4
python3 "$(dirname "$0")/check_staleness.py" "$TMP/stale.jsonl" "$TMP/stale.json" 1 >/dev/null ||
    bad "stale: the staleness bound"

# with augmentation each feeder prepares (crops and flips) only the examples
# of its own tickets: together the 2 epochs' 1200, each at most its
# batches' worth, and the same parameters as F = 1
train aug1 4 --ps 1 --augment crop,flip
train aug3 6 --ps 1 --feeders 3 --augment crop,flip
same aug3 aug1
python3 - "$TMP/aug3.json" <<'PY' || bad "aug3: the feeders did not split the input work"
import json, sys
fs = json.load(open(sys.argv[1]))["data"]["feeders"]
assert [f["rank"] for f in fs] == [0, 2, 3], fs
assert sum(f["batches"] for f in fs) == 76 and sum(f["prepared"] for f in fs) == 1200, fs
# (sync: 2 workers draw from the root and feeder 1, feeder 2 from none)
assert all((f["prepared"] > 0) == (f["batches"] > 0) for f in fs), fs
assert all(f["prepared"] <= 16 * f["batches"] for f in fs), fs
PY

# checkpoints of an F = 2 run, resumed with F = 1, 2, 3 (mid-epoch, at an
# odd and an even ticket)
train ck 5 --ps 1 --feeders 2 --checkpoint-dir "$TMP/ck" --checkpoint-every 10 \
    --keep-checkpoints 5
same ck f1
for c in 10 30; do
    for F in 1 2 3; do
        train "resume$F-$c" $((3 + F)) --ps 1 --feeders $F --resume "$TMP/ck/ckpt-$c.h5"
        same "resume$F-$c" f1
    done
done
# resumed on emulated nodes: F = 2 with no worker on the root's node, F = 3
# with one worker on each feeder's node but the root's
PSTRAIN_TEST_NODES=0,0,1,1,1 train resume-local2 5 --ps 1 --feeders 2 --resume "$TMP/ck/ckpt-30.h5"
same resume-local2 f1
PSTRAIN_TEST_NODES=0,0,1,1,2,2 train resume-local3 6 --ps 1 --feeders 3 --resume "$TMP/ck/ckpt-10.h5"
grep -q 'rank 3 worker 0 (from feeder 1)' "$TMP/resume-local3.log" &&
    grep -q 'rank 5 worker 1 (from feeder 2)' "$TMP/resume-local3.log" ||
    bad "resume-local3: the map lacks the workers' feeders"
same resume-local3 f1

# SIGUSR1 mid-run to a sync run with F = 2, both workers drawing from
# feeder 1 (emulated nodes; the launcher forwards the signal): a
# checkpoint and exit 0 before the end; resumed from it with F = 3 and F = 1,
# bitwise equal to the uninterrupted run. A run that had ended before the
# signal reached it proves nothing: it is tried again (3 tries).
LONG=(--epochs 100 --log-every 0.05)
train long 4 --ps 1 "${LONG[@]}"
total=$(sed -n 's/^ *"steps": \([0-9]*\),$/\1/p' "$TMP/long.json")
latest_step() { sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' "$1/latest" 2>/dev/null; }
# sigrun NAME TOTAL ARGS...: 5 ranks on nodes 0,0,1,1,1, --feeders 2, the
# long run signalled once it trains (checkpoints in NAME/, its trace
# NAME.jsonl); sets rc and stopped (the latest checkpoint's step)
sigrun() {
    local name=$1 all=$2 try n pid
    shift 2
    for try in 1 2 3; do
        rm -rf "${TMP:?}/$name" "$TMP/$name.metrics"
        # the launcher itself in the background (timeout(1) would not pass
        # USR1 on), with a watchdog
        PSTRAIN_TEST_NODES=0,0,1,1,1 "${MPIEXEC_CMD[@]}" -n 5 "$PSTRAIN" train "${ARGS[@]}" "${LONG[@]}" \
            --ps 1 --feeders 2 "$@" --checkpoint-dir "$TMP/$name" --metrics "$TMP/$name.metrics" \
            --trace-examples "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 &
        pid=$!
        (
            for ((i = 0; i < 1200; i++)); do
                kill -0 $pid 2>/dev/null || exit 0
                sleep 0.1
            done
            echo "FAIL: the signalled run still runs after 120 s: killed"
            mpiexec_kill $pid
        ) &
        n=0 # signal once training runs (a step line), not during start-up
        while ! grep -q '"type":"step"' "$TMP/$name.metrics" 2>/dev/null && [ $n -lt 1200 ]; do
            sleep 0.05
            n=$((n + 1))
        done
        kill -USR1 $pid 2>/dev/null
        wait $pid
        rc=$?
        stopped=$(latest_step "$TMP/$name")
        echo "SIGUSR1 to $name: exit $rc, stopped at step $stopped of $all"
        [ $rc = 0 ] && [ "$stopped" = "$all" ] && [ $try -lt 3 ] || break
    done
    [ $rc = 0 ] || { tail -5 "$TMP/$name.log"; bad "$name: exit $rc after SIGUSR1"; }
    [ -n "$stopped" ] && [ "$stopped" -lt "$all" ] || bad "$name: not stopped early (latest '$stopped')"
    grep -q 'rank 3 worker 0 (from feeder 1), rank 4 worker 1 (from feeder 1)' "$TMP/$name.log" ||
        bad "$name: the workers do not draw from feeder 1"
}
sigrun sig "$total"
for F in 3 1; do
    train "sig-resume$F" $((3 + F)) --ps 1 --feeders $F "${LONG[@]}" --resume "$TMP/sig/ckpt-$stopped.h5"
    same "sig-resume$F" long
done
# the same stop in async (global steps: one per batch, 100 epochs of 38),
# resumed with F = 2: every example of the 100 epochs once across the two
# runs' traces
sigrun sig-async 3800 --mode async
PSTRAIN_TEST_NODES=0,0,1,1,1 train sig-async-resume 5 --ps 1 --feeders 2 --mode async "${LONG[@]}" \
    --resume "$TMP/sig-async/ckpt-$stopped.h5"
python3 - "$TMP/sig-async.jsonl" "$TMP/sig-async-resume.jsonl" <<'PY' || bad "sig-async: not exactly once across the stop"
import json, sys
seen = set()
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        for i in r["ids"]:
            assert (r["epoch"], i) not in seen, (f, r["epoch"], i)
            seen.add((r["epoch"], i))
assert len(seen) == 100 * 600, len(seen)
PY

# refusals
refuse no-worker 4 "--feeders 3 with --ps 1 and 4 MPI ranks leaves no worker" --ps 1 --feeders 3
[ $fail = 0 ] || exit 1
echo "feeders: OK"
