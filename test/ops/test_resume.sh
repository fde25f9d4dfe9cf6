#!/usr/bin/env bash
# Resume is bitwise: a run interrupted and resumed ends with exactly the
# variables and optimizer slots of an uninterrupted run (sync mode, same
# seed and worker count), whether it was stopped
#   - by its step limit and continued with a larger one (mid-epoch),
#   - by SIGUSR1 (checkpoint at the next step, exit 0),
#   - by kill -9 (of the process, or of one worker rank under MPI): the
#     resume loses at most --checkpoint-every steps and still ends equal.
# Also: SIGINT stops like SIGUSR1, and the kill -9 leaves only whole
# checkpoints behind.
#
#   test_resume.sh single      # one process
#   test_resume.sh dist        # 4 ranks: root, 1 PS, 2 workers
#   test_resume.sh dist-tcp    # the same over TCP (btl self,tcp, pml ob1, osc pt2pt)
# The moment of the kill -9 comes from a seed, printed at the start:
# RESUME_SEED=N replays it.
set -u
mode=${1:-single}
seed=${RESUME_SEED:-$(($(date +%s%N) % 32768))}
case $seed in '' | *[!0-9]*) echo "RESUME_SEED '$seed': expected a non-negative integer" >&2; exit 2 ;; esac
RANDOM=$seed
echo "seed $seed (replay: RESUME_SEED=$seed)"
PSTRAIN=${PSTRAIN:?}
CKPT_CMP=${CKPT_CMP:?CKPT_CMP must name the ckpt_cmp tool}
fm=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -f "$fm/train-images-idx3-ubyte.gz" ] || { echo "SKIP: Fashion-MNIST not found in $fm"; exit 77; }
"$PSTRAIN" train --help 2>&1 | grep -q -- --resume || { echo "SKIP: pstrain train has no --resume yet"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-resume.XXXXXX")
fail=0
bg_pids=()
cleanup() {
    local p
    for p in "${bg_pids[@]}"; do kill -9 "$p" 2>/dev/null; done # runs left behind by a failure
    [ $fail = 0 ] && rm -rf "$tmp" || echo "(files kept in $tmp; replay with RESUME_SEED=$seed)"
}
trap cleanup EXIT
bad() { echo "FAIL: $*"; fail=1; }

# a small data set (small_fm.sh): the first 2048 train / 512 test images
. "$(dirname "${BASH_SOURCE[0]}")/small_fm.sh"
small_fm_h5 "$fm" "$tmp" || { fail=1; exit 1; }

export BLIS_NUM_THREADS=1
. "${PSTRAIN_SRC:?}/jobs/mpiexec.sh"
if [ "$mode" = dist ]; then
    launch=("${MPIEXEC_CMD[@]}" -n 4 "$PSTRAIN")
    extra=(--ps 1)
elif [ "$mode" = dist-tcp ]; then # TCP only, as between nodes
    [ -z "$MPIEXEC_TCP_SKIP" ] || { echo "SKIP: TCP only: $MPIEXEC_TCP_SKIP"; exit 77; }
    launch=("${MPIEXEC_CMD[@]}" "${MPIEXEC_TCP[@]}" -n 4 "$PSTRAIN")
    extra=(--ps 1)
else
    launch=("$PSTRAIN")
    extra=()
fi
# 64 batches of 32 per epoch: 300 steps cross epoch boundaries (single: 4.7
# epochs; dist with 2 workers: 2 batches per step)
total=300
common=(train --data "$tmp/d.h5" --model lenet5 --batch 32 --optimizer momentum --lr 0.02
    --seed 77 --log-every 1000 "${extra[@]}")
# every run is bounded: a hang fails the test in 2 minutes, not at meson's timeout
run() { timeout -k 5 120 "${launch[@]}" "${common[@]}" "$@"; }
# in the background, as the launcher itself (not a subshell) so that the
# signals below reach it; BG_PID is its pid
run_bg() {
    (exec "${launch[@]}" "${common[@]}" "$@") &
    local p=$!
    BG_PID=$p
    bg_pids+=("$p")
    # a watchdog instead of timeout(1), which would not pass USR1 on; it
    # ends by itself soon after the run does
    (
        for ((i = 0; i < 1200; i++)); do
            kill -0 $p 2>/dev/null || exit 0
            sleep 0.1
        done
        kill -0 $p 2>/dev/null && echo "FAIL: pid $p still running after 120 s: killed"
        mpiexec_kill $p
    ) &
}
latest_step() { sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' "$1/latest" 2>/dev/null; }
wait_latest() { # dir seconds
    local t0=$SECONDS
    until [ -s "$1/latest" ] || [ $((SECONDS - t0)) -ge "$2" ]; do sleep 0.01; done
    [ -s "$1/latest" ]
}

# A: uninterrupted
run --steps $total --checkpoint-dir "$tmp/A" >"$tmp/A.log" 2>&1 || { cat "$tmp/A.log"; bad "run A"; exit 1; }
[ -f "$tmp/A/ckpt-$total.h5" ] || {
    if [ "$mode" != single ]; then
        echo "SKIP: distributed training wrote no checkpoint (not implemented yet?)"
        fail=0
        exit 77
    fi
    bad "run A wrote no final checkpoint"
    exit 1
}

# B: stop at 130 by the step limit (mid-epoch), resume to the end
run --steps 130 --checkpoint-dir "$tmp/B" >"$tmp/B1.log" 2>&1 || { cat "$tmp/B1.log"; bad "run B part 1"; }
run --steps $total --checkpoint-dir "$tmp/B" --resume >"$tmp/B2.log" 2>&1 || { cat "$tmp/B2.log"; bad "run B part 2"; }
grep -q "resumed from $tmp/B/ckpt-130.h5 at step 130" "$tmp/B2.log" || { cat "$tmp/B2.log"; bad "B did not resume at 130"; }
"$CKPT_CMP" "$tmp/A/ckpt-$total.h5" "$tmp/B/ckpt-$total.h5" || bad "resumed run B differs from A"

# C: SIGUSR1 once the first checkpoint exists -> checkpoint, exit 0; resume.
# The whole run takes about a second here: a test shell descheduled that long
# after the first checkpoint signals a run that has already ended. That try
# proves nothing either way, so it is made again (3 tries); a run that ignores
# the signal ends every try at $total and fails.
for try in 1 2 3; do
    rm -rf "$tmp/C"
    run_bg --steps $total --checkpoint-dir "$tmp/C" --checkpoint-every 7 >"$tmp/C1.log" 2>&1
    pid=$BG_PID
    wait_latest "$tmp/C" 60 || bad "C: no checkpoint within 60 s"
    kill -USR1 $pid
    wait $pid
    rc=$?
    stopped=$(latest_step "$tmp/C")
    echo "C: SIGUSR1 after a checkpoint: exit $rc, stopped at step $stopped"
    [ $rc = 0 ] && [ "$stopped" = $total ] && [ $try -lt 3 ] || break
    echo "C: try $try: the run had ended before the signal reached it; again"
done
[ $rc = 0 ] || { cat "$tmp/C1.log"; bad "C: exit status $rc after SIGUSR1"; }
[ -n "$stopped" ] && [ "$stopped" -lt $total ] || bad "C: the run was not stopped early (latest $stopped)"
grep -q "signal 10" "$tmp/C1.log" || { cat "$tmp/C1.log"; bad "C: pstrain did not report the signal"; }
run --steps $total --checkpoint-dir "$tmp/C" --resume >"$tmp/C2.log" 2>&1 || { cat "$tmp/C2.log"; bad "run C part 2"; }
"$CKPT_CMP" "$tmp/A/ckpt-$total.h5" "$tmp/C/ckpt-$total.h5" || bad "signalled and resumed run C differs from A"

# D: kill -9 (single: the process; dist: one worker rank) mid-run; resume
# (as in C, a try whose run ended before the kill is made again: 3 tries)
for try in 1 2 3; do
    rm -rf "$tmp/D"
    run_bg --steps $total --checkpoint-dir "$tmp/D" --checkpoint-every 5 >"$tmp/D1.log" 2>&1
    pid=$BG_PID
    victim=$pid
    if [ "$mode" != single ]; then # before the first checkpoint: pgrep is slow on a loaded machine
        for ((i = 0; i < 1200; i++)); do # rank 3 of 4 is a worker
            victim=$(mpiexec_rank_pids $pid 3)
            [ -n "$victim" ] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.05
        done
    fi
    wait_latest "$tmp/D" 60 || bad "D: no checkpoint within 60 s"
    sleep 0.0$((RANDOM % 10))
    kill -9 "$victim"
    wait $pid
    rc=$?
    [ $rc = 0 ] && [ -f "$tmp/D/ckpt-$total.h5" ] && [ $try -lt 3 ] || break
    echo "D: try $try: the run had ended before the kill; again"
done
# the newest whole checkpoint: a kill between the rename and the update of
# `latest` leaves one newer than the pointer, and resume takes it
lost_at=$(ls "$tmp/D" | sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' | sort -n | tail -1)
echo "D: kill -9 of pid $victim: launcher exit $rc, latest checkpoint $lost_at"
[ $rc != 0 ] || bad "D: a killed run exited 0"
for f in "$tmp/D"/ckpt-*.h5; do
    "$CKPT_CMP" "$f" "$f" >/dev/null || bad "D: $f is not a whole checkpoint after kill -9"
done
run --steps $total --checkpoint-dir "$tmp/D" --resume >"$tmp/D2.log" 2>&1 || { cat "$tmp/D2.log"; bad "run D part 2"; }
grep -q "resumed from $tmp/D/ckpt-$lost_at.h5" "$tmp/D2.log" || { cat "$tmp/D2.log"; bad "D did not resume from ckpt-$lost_at.h5"; }
"$CKPT_CMP" "$tmp/A/ckpt-$total.h5" "$tmp/D/ckpt-$total.h5" || bad "killed and resumed run D differs from A"

# E (single): Ctrl-C (one SIGINT) stops like SIGUSR1: checkpoint, exit 0.
# (A second SIGINT exits 130 at once: test_ckpt checks that handler; two
# kills in a row here would merge into one pending signal.)
if [ "$mode" = single ]; then
    run_bg --steps 3000 --checkpoint-dir "$tmp/E" --checkpoint-every 100000 \
        --metrics "$tmp/E.jsonl" --log-every 0.05 >"$tmp/E.log" 2>&1
    pid=$BG_PID
    # signal only once training runs (its handler is installed by then): on a
    # loaded machine a fixed sleep could hit the start-up, where SIGINT kills
    for ((i = 0; i < 600; i++)); do
        grep -q '"type":"step"' "$tmp/E.jsonl" 2>/dev/null && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    kill -INT $pid
    wait $pid
    rc=$?
    s=$(latest_step "$tmp/E")
    [ $rc = 0 ] && [ -n "$s" ] && [ "$s" -lt 3000 ] ||
        { cat "$tmp/E.log"; bad "E: SIGINT gave exit $rc, checkpoint '$s'"; }
fi

[ $fail = 0 ] && echo "resume ($mode): all checks passed"
exit $fail
