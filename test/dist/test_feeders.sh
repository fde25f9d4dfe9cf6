#!/usr/bin/env bash
# test_feeders.sh - feeder ranks (pstrain train --feeders F, docs/design.md
# §1, §3): every example exactly once per epoch for F = 1, 2, 3 (the trace
# checker, sync and async), the root -> feeder map, each feeder preparing
# only its own tickets' examples (summary), sync final variables
# bitwise equal for every F, for 1 and 2 PS and across two runs, checkpoints
# written with F = 2 resumed with F = 1, 2, 3 bitwise equal to the
# uninterrupted run, the same after SIGUSR1 stops an F = 2 run mid-run, and
# the refusals (one line on the root, exit 1).
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
# two PS, and a rerun
train f2-ps2 6 --ps 2 --feeders 2
once f2-ps2 2
same f2-ps2 f1
train f2-again 5 --ps 1 --feeders 2
same f2-again f2
# three workers, async: exactly once
train async3 7 --ps 1 --feeders 3 --mode async
once async3 3

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
assert all(0 < f["prepared"] <= 16 * f["batches"] for f in fs), fs
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

# SIGUSR1 mid-run to a sync run with F = 2 (the launcher forwards it): a
# checkpoint and exit 0 before the end; resumed from it with F = 3 and F = 1,
# bitwise equal to the uninterrupted run. A run that had ended before the
# signal reached it proves nothing: it is tried again (3 tries).
LONG=(--epochs 100 --log-every 0.05)
train long 4 --ps 1 "${LONG[@]}"
total=$(sed -n 's/^ *"steps": \([0-9]*\),$/\1/p' "$TMP/long.json")
latest_step() { sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' "$1/latest" 2>/dev/null; }
for try in 1 2 3; do
    rm -rf "$TMP/sig" "$TMP/sig.jsonl"
    # the launcher itself in the background (timeout(1) would not pass USR1
    # on), with a watchdog
    "${MPIEXEC_CMD[@]}" -n 5 "$PSTRAIN" train "${ARGS[@]}" "${LONG[@]}" --ps 1 --feeders 2 \
        --checkpoint-dir "$TMP/sig" --metrics "$TMP/sig.jsonl" >"$TMP/sig.log" 2>&1 &
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
    while ! grep -q '"type":"step"' "$TMP/sig.jsonl" 2>/dev/null && [ $n -lt 1200 ]; do
        sleep 0.05
        n=$((n + 1))
    done
    kill -USR1 $pid 2>/dev/null
    wait $pid
    rc=$?
    stopped=$(latest_step "$TMP/sig")
    echo "SIGUSR1 with F = 2: exit $rc, stopped at step $stopped of $total"
    [ $rc = 0 ] && [ "$stopped" = "$total" ] && [ $try -lt 3 ] || break
done
[ $rc = 0 ] || { tail -5 "$TMP/sig.log"; bad "signal: exit $rc after SIGUSR1"; }
[ -n "$stopped" ] && [ "$stopped" -lt "$total" ] || bad "signal: not stopped early (latest '$stopped')"
for F in 3 1; do
    train "sig-resume$F" $((3 + F)) --ps 1 --feeders $F "${LONG[@]}" --resume "$TMP/sig/ckpt-$stopped.h5"
    same "sig-resume$F" long
done

# refusals
refuse no-worker 4 "--feeders 3 with --ps 1 and 4 MPI ranks leaves no worker" --ps 1 --feeders 3
[ $fail = 0 ] || exit 1
echo "feeders: OK"
