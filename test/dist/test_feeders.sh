#!/usr/bin/env bash
# test_feeders.sh - feeder ranks (pstrain train --feeders F, docs/design.md
# §1, §3): every example exactly once per epoch for F = 1, 2, 3 (the trace
# checker, sync and async), the root -> feeder map, sync final variables
# bitwise equal for every F, for 1 and 2 PS and across two runs, checkpoints
# written with F = 2 resumed with F = 1, 2, 3 bitwise equal to the
# uninterrupted run, and the refusals (one line on the root, exit 1).
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

# refusals
refuse no-worker 4 "--feeders 3 with --ps 1 and 4 MPI ranks leaves no worker" --ps 1 --feeders 3
[ $fail = 0 ] || exit 1
echo "feeders: OK"
