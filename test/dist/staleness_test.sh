#!/usr/bin/env bash
# staleness_test.sh - async --max-staleness S (docs/design.md §3): root + 1 PS +
# 3 workers, worker 0 slowed by PSTRAIN_TEST_SLOW_WORKER (test-only). With
# S = 1 (momentum: the PS applies) and S = 0 (plain SGD: the workers
# accumulate) no worker starts a step more than S ahead of an unfinished
# worker and every example is seen once; without the flag the fast workers run
# far ahead (so the check can tell). --max-staleness with --mode sync is a
# usage error.
set -eu
: "${PSTRAIN:?}" "${PSTRAIN_SRC:?}" "${TEST_DIST:?}"
. "$PSTRAIN_SRC/jobs/mpiexec.sh"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-stale.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
HERE=$(dirname "$0")
die() { echo "FAIL: $*" >&2; exit 1; }
"$TEST_DIST" mkdata "$TMP/small.h5" 600 100 8 8 1 4 || die "mkdata"

train() { # train NAME ARGS...: 5 ranks, async, worker 0 sleeping 20 ms a step
    name=$1; shift
    PSTRAIN_TEST_SLOW_WORKER=0:20 timeout 60 "${MPIEXEC_CMD[@]}" -n 5 "$PSTRAIN" train --quiet \
        --data "$TMP/small.h5" --model mlp --ps 1 --mode async --batch 8 \
        --summary-json "$TMP/$name.json" --trace-examples "$TMP/$name.jsonl" "$@" \
        >"$TMP/$name.out" || die "$name: pstrain train failed"
    grep -q '^staleness: 75 updates' "$TMP/$name.out" || die "$name: no staleness line"
    python3 "$HERE/check_trace.py" "$TMP/$name.jsonl" 3 600 || die "$name: exactly once"
}

train s1 --max-staleness 1
python3 "$HERE/check_staleness.py" "$TMP/s1.jsonl" "$TMP/s1.json" 1 || die "S = 1"
train s0 --max-staleness 0 --optimizer sgd
python3 "$HERE/check_staleness.py" "$TMP/s0.jsonl" "$TMP/s0.json" 0 || die "S = 0"
train free --max-staleness none
python3 "$HERE/check_staleness.py" "$TMP/free.jsonl" "$TMP/free.json" 1 --expect-violation ||
    die "unbounded"
# without the flag nothing is measured (no per-step read of the global step)
timeout 60 "${MPIEXEC_CMD[@]}" -n 4 "$PSTRAIN" train --quiet --data "$TMP/small.h5" --model mlp \
    --ps 1 --mode async --batch 8 --summary-json "$TMP/plain.json" >"$TMP/plain.out" ||
    die "plain async run failed"
! grep -q staleness "$TMP/plain.json" "$TMP/plain.out" || die "a run without --max-staleness reports staleness"

rc=0
"$PSTRAIN" train --data "$TMP/small.h5" --max-staleness 1 2>"$TMP/err" || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q 'max-staleness.*--mode async' "$TMP/err" ||
    die "--max-staleness with sync: exit $rc, $(cat "$TMP/err")"
echo "staleness OK"
