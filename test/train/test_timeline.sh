#!/usr/bin/env bash
# --timeline (docs/operations.md, "Timeline"), in one process ("single",
# suite cli) or under mpirun ("dist", suite mpi; 4th argument):
#   the file parses as JSON, names one process per rank by role and host,
#     every worker step has its phases (sync: wait_data, pull, compute, push,
#     wait_version) on non-overlapping, ordered events, every batch is
#     published by the root before a worker takes it (one clock), the PS
#     apply, checkpoints and evaluations appear as asked (check_timeline.py)
#   async: the four phases of an async step
#   ranks whose clocks read seconds apart (PSTRAIN_TIMELINE_TEST_SKEW): the
#     offsets measured at the start put every event on the root's clock
#   a small buffer cap: dropped events counted in the file and warned about
#   jobs/timeline-summary prints the mean time per phase and role
#   the timeline does not change what is computed (--dump-params)
#   a path that cannot be written: one line, before any training
. "$(dirname "$0")/lib.sh"
MODE=${4:-single}
P=$PSTRAIN
d=$tmp
CHECK=(python3 "$(dirname "$0")/check_timeline.py")
"$MKDATA" "$d/ok.h5" 640 100 8 8 1 4 || { echo "mkdata failed"; exit 1; }

if [ "$MODE" = dist ]; then
    command -v "$MPIEXEC" >/dev/null || { echo "SKIP: no MPI launcher ($MPIEXEC)"; exit 77; }
    RUN=(timeout 120 "${MPIEXEC_CMD[@]}" -n 5 "$P" train --ps 2)
    ROLES="root,ps 1,ps 2,worker 0,worker 1"
    STEPS=40 # 80 batches, 2 workers
else
    RUN=("$P" train)
    ROLES=single
    STEPS=80
fi
T=("${RUN[@]}" --model mlp --batch 16 --log-every 0 --data "$d/ok.h5")

# the steps of the checkpoints in directory $1
ckpt_steps() { ls "$1" | sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' | sort -n | paste -sd, -; }
# the evaluations in metrics log $1
evals() { grep -c '"eval"' "$1" || true; }

say "sync, checkpoints and evaluations ($MODE)"
"${T[@]}" --epochs 2 --eval-every 1 --checkpoint-dir "$d/ck" --checkpoint-every 10 \
    --keep-checkpoints 0 --metrics "$d/m.jsonl" --timeline "$d/tl.json" \
    --dump-params "$d/on.bin" >"$d/out" 2>&1 || { bad "exit $?"; tail -5 "$d/out"; }
[ -n "$(ckpt_steps "$d/ck")" ] || bad "no checkpoints written"
"${CHECK[@]}" "$d/tl.json" "$ROLES" 80 "$(ckpt_steps "$d/ck")" "$(evals "$d/m.jsonl")" ||
    bad "sync timeline"
ls "$d" | grep -q 'tl\.json\.tmp' && bad "a temporary was left beside the timeline"
"$PSTRAIN_SRC/jobs/timeline-summary" "$d/tl.json" >"$d/sum" 2>&1 || bad "timeline-summary: exit $?"
if [ "$MODE" = dist ]; then want="worker compute|worker wait_version|ps apply|root publish"; else
    want="single process compute|single process checkpoint"; fi
IFS='|' read -ra rows <<<"$want"
for r in "${rows[@]}"; do
    grep -Eq "^${r% *} +${r##* } +[0-9]+ +[0-9.]+ " "$d/sum" ||
        bad "timeline-summary: no row '$r': $(cat "$d/sum")"
done

say "the same run without --timeline computes the same ($MODE)"
"${T[@]}" --epochs 2 --eval-every 1 --checkpoint-dir "$d/ck2" --checkpoint-every 10 \
    --dump-params "$d/off.bin" >"$d/out" 2>&1 || bad "without --timeline: exit $?"
cmp -s "$d/on.bin" "$d/off.bin" || bad "--timeline changed the final variables"

if [ "$MODE" = dist ]; then
    say "async"
    "${T[@]}" --mode async --epochs 2 --metrics "$d/ma.jsonl" --timeline "$d/ta.json" \
        >"$d/out" 2>&1 || { bad "async: exit $?"; tail -5 "$d/out"; }
    "${CHECK[@]}" "$d/ta.json" "$ROLES" 80 "" "$(evals "$d/ma.jsonl")" async || bad "async timeline"

    say "clocks set apart: the offsets measured at the start bring them together"
    PSTRAIN_TIMELINE_TEST_SKEW=-7 "${T[@]}" --steps 10 --metrics "$d/ms.jsonl" \
        --timeline "$d/ts.json" >"$d/out" 2>&1 || { bad "skewed: exit $?"; tail -5 "$d/out"; }
    "${CHECK[@]}" "$d/ts.json" "$ROLES" 20 "" "$(evals "$d/ms.jsonl")" || bad "skewed clocks"
fi

say "a small buffer: dropped events counted ($MODE)"
PSTRAIN_TIMELINE_MAX_EVENTS=30 "${T[@]}" --steps 20 --timeline "$d/small.json" >"$d/out" 2>&1 ||
    bad "small buffer: exit $?"
grep -q "events did not fit" "$d/out" || bad "no warning about dropped events: $(tail -2 "$d/out")"
pyok "dropped events in otherData" '
import json, sys
d = json.load(open(sys.argv[1]))
dropped = d["otherData"]["dropped_events"]
x = [e for e in d["traceEvents"] if e["ph"] == "X"]
if sum(dropped.values()) <= 0: sys.exit("dropped_events %r" % dropped)
per = {}
for e in x: per[e["pid"]] = per.get(e["pid"], 0) + 1
if max(per.values()) > 30: sys.exit("a process has %d events, cap 30" % max(per.values()))' \
    "$d/small.json"

say "a path that cannot be written ($MODE)"
if "${T[@]}" --steps 2 --timeline "$d/no/such/dir/t.json" >"$d/out" 2>&1; then
    bad "a bad --timeline path was accepted"
fi
# (the launcher adds its own lines about the exit status)
[ "$(grep -c '^pstrain' "$d/out")" = 1 ] || bad "not one line: $(cat "$d/out")"
grep -q -- "--timeline: $d/no/such/dir/t.json" "$d/out" || bad "message: $(cat "$d/out")"
grep -q "trained\|step " "$d/out" && bad "trained before refusing the path"
finish
