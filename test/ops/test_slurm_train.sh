#!/usr/bin/env bash
# jobs/prep.sbatch and jobs/train.sbatch on a real one-node Slurm.
#
#   train (default): prep.sbatch converts Fashion-MNIST; train.sbatch trains
#       LeNet-5 with RANKS ranks (mpirun --oversubscribe); the job completes
#       with 0, summary.json has the steps, ranks, PS and workers asked for,
#       the final checkpoint loads with `pstrain eval`.
#   resume: train.sbatch is signalled with `scancel --signal=USR1 --full`
#       once it has written a checkpoint: it checkpoints, exits 0 and requeues
#       itself; the requeued job resumes from that checkpoint and finishes;
#       then a follow-up job (a new submission with the same CKPT_DIR) resumes
#       from the final checkpoint and trains 20 steps more.
#
#   test_slurm_train.sh [train|resume]      RANKS=4 by default (SLURM_TEST_RANKS)
# Skips (77) where Slurm cannot start, pstrain has no checkpoints yet, or
# Fashion-MNIST is not installed.
set -u
mode=${1:-train}
src=${PSTRAIN_SRC:?PSTRAIN_SRC must name the source tree}
PSTRAIN=${PSTRAIN:?PSTRAIN must name the pstrain binary}
PSTRAIN_PREP=${PSTRAIN_PREP:?PSTRAIN_PREP must name pstrain-prep}
RANKS=${SLURM_TEST_RANKS:-4}
fm=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}

if ! "$PSTRAIN" train --help 2>&1 | grep -q -- --checkpoint-dir; then
    echo "SKIP: '$PSTRAIN train --help' has no --checkpoint-dir yet"
    exit 77
fi
[ -f "$fm/train-images-idx3-ubyte.gz" ] || [ -f "$fm/train-images-idx3-ubyte" ] ||
    { echo "SKIP: Fashion-MNIST not found in $fm"; exit 77; }

. "$(dirname "$0")/slurm-lib.sh"
slurm_up 16
work=$SLURM_TEST_DIR/jobs
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# json_num FILE KEY -> the number after "KEY": (flat, first occurrence)
json_num() { sed -n "s/.*\"$2\": *\(-\{0,1\}[0-9][0-9.eE+-]*\).*/\1/p" "$1" | head -1; }
# latest_step DIR -> the step of DIR/latest's checkpoint
latest_step() { sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' "$1/latest" 2>/dev/null; }
show_log() { echo "---- $1 ----"; cat "$1" 2>/dev/null; echo "----"; }

# ---- data: through prep.sbatch (train) or directly (resume) -----------------
data=$work/fm.h5
if [ "$mode" = train ]; then
    jid=$(OUT=$data PREP=$PSTRAIN_PREP SRC=$fm sbatch --parsable -o "$work/prep.out" \
        "$src/jobs/prep.sbatch") || { echo "FAIL: sbatch prep.sbatch"; exit 1; }
    slurm_wait_job "$jid" 120
    echo "prep job $jid: $JOB_STATE $JOB_EXIT"
    [ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = 0:0 ] || { show_log "$work/prep.out"; bad "prep.sbatch"; exit 1; }
    "$PSTRAIN_PREP" verify "$data" >/dev/null || { bad "prep.sbatch output does not verify"; exit 1; }
    [ -s "${data%.h5}-preview.png" ] || bad "prep.sbatch wrote no preview"
else
    "$PSTRAIN_PREP" idx --train-images "$fm"/train-images-idx3-ubyte* \
        --train-labels "$fm"/train-labels-idx1-ubyte* --test-images "$fm"/t10k-images-idx3-ubyte* \
        --test-labels "$fm"/t10k-labels-idx1-ubyte* -o "$data" >/dev/null ||
        { echo "FAIL: pstrain-prep idx"; exit 1; }
fi

# common job settings: small and quick; several ranks on the one node
export DATA=$data PSTRAIN MODEL=lenet5 PS=1 BATCH=32 OVERSUBSCRIBE=1 CKPT_SECS=0
export EXTRA_ARGS="--limit 4096 --log-every 0.01"
sb=(sbatch --parsable -N1 -n "$RANKS" --ntasks-per-node="$RANKS")

if [ "$mode" = train ]; then
    out=$work/run-train
    jid=$(OUT=$out STEPS=40 CKPT_EVERY=20 "${sb[@]}" -o "$work/train.out" "$src/jobs/train.sbatch") ||
        { echo "FAIL: sbatch train.sbatch"; exit 1; }
    slurm_wait_job "$jid" 180
    echo "train job $jid: $JOB_STATE $JOB_EXIT"
    [ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = 0:0 ] || { show_log "$work/train.out"; bad "train.sbatch did not complete with 0"; exit 1; }
    s=$out/summary.json
    [ -s "$s" ] || { show_log "$work/train.out"; bad "no summary.json"; exit 1; }
    [ "$(json_num "$s" steps)" = 40 ] || bad "summary steps $(json_num "$s" steps), expected 40"
    [ "$(json_num "$s" ranks)" = "$RANKS" ] || bad "summary ranks $(json_num "$s" ranks), expected $RANKS"
    if [ "$RANKS" -gt 1 ]; then
        [ "$(json_num "$s" ps)" = 1 ] || bad "summary ps $(json_num "$s" ps), expected 1"
        [ "$(json_num "$s" workers)" = $((RANKS - 2)) ] || bad "summary workers $(json_num "$s" workers)"
    fi
    acc=$(json_num "$s" test_accuracy)
    awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.2 && a <= 1) }' || bad "test accuracy '$acc' after 40 steps"
    grep -q '"type":"step"' "$out"/metrics-*.jsonl || bad "metrics file has no step lines"
    if command -v gnuplot >/dev/null; then
        [ "$(od -An -tx1 -N4 "$out/loss.png" 2>/dev/null | tr -d ' ')" = 89504e47 ] ||
            bad "train.sbatch made no loss.png"
    fi
    if [ ! -s "$out/ckpt/latest" ]; then
        if [ "$RANKS" -gt 1 ]; then
            echo "SKIP (partial): the summary checks passed, but distributed training wrote no checkpoint in $out/ckpt"
            echo "      (distributed checkpointing not implemented yet?)"
            [ $fail = 0 ] && exit 77
        fi
        bad "no checkpoint written"
    else
        [ "$(latest_step "$out/ckpt")" = 40 ] || bad "latest checkpoint step $(latest_step "$out/ckpt"), expected 40"
        "$PSTRAIN" eval --data "$data" --checkpoint "$out/ckpt/latest" --summary-json "$work/eval.json" \
            >"$work/eval.out" 2>&1 || { show_log "$work/eval.out"; bad "pstrain eval of the final checkpoint"; }
        [ "$(json_num "$work/eval.json" examples)" = 10000 ] || bad "eval examples $(json_num "$work/eval.json" examples)"
    fi
    grep -q 'transport shm' "$work/train.out" || bad "train.sbatch did not pick the one-node transport"

    # the multi-node recipe, on the one node: srun --mpi=pmix and the TCP
    # flags (btl self,tcp, pml ob1, osc pt2pt), with checkpoints; and with
    # room for it, a second feeder (FEEDERS)
    if [ "$RANKS" -gt 1 ]; then
        out=$work/run-tcp
        feeders=1
        [ "$RANKS" -ge 4 ] && feeders=2
        jid=$(OUT=$out STEPS=20 CKPT_EVERY=10 LAUNCHER=srun TRANSPORT=tcp FEEDERS=$feeders "${sb[@]}" \
            -o "$work/tcp.out" "$src/jobs/train.sbatch") || { echo "FAIL: sbatch train.sbatch (tcp)"; exit 1; }
        slurm_wait_job "$jid" 180
        echo "train job $jid (srun, TCP): $JOB_STATE $JOB_EXIT"
        grep -q 'transport tcp, launcher srun' "$work/tcp.out" || bad "TRANSPORT=tcp LAUNCHER=srun not honoured"
        if [ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = 0:0 ]; then
            [ "$(json_num "$out/summary.json" steps)" = 20 ] || bad "tcp: summary steps $(json_num "$out/summary.json" steps), expected 20"
            [ "$(json_num "$out/summary.json" feeders)" = $feeders ] || bad "tcp: summary feeders $(json_num "$out/summary.json" feeders), expected $feeders"
            [ "$(latest_step "$out/ckpt")" = 20 ] || bad "tcp: latest checkpoint $(latest_step "$out/ckpt"), expected 20"
        else
            show_log "$work/tcp.out"
            bad "train.sbatch with srun and TCP did not complete with 0"
        fi
    fi
    [ $fail = 0 ] && echo "slurm train: all checks passed"
    exit $fail
fi

# ---- resume: signal -> checkpoint -> requeue -> resume -> follow-up -------------
out=$work/run-resume
ck=$out/ckpt
total=1500
jid=$(OUT=$out CKPT_DIR=$ck STEPS=$total CKPT_EVERY=10 REQUEUE_ON_SIGNAL=1 \
    "${sb[@]}" -o "$work/resume.out" "$src/jobs/train.sbatch") || { echo "FAIL: sbatch"; exit 1; }
t0=$SECONDS
until [ -s "$ck/latest" ] || [ $((SECONDS - t0)) -ge 90 ]; do
    s=$(slurm_state "$jid")
    case "${s%% *}" in COMPLETED | FAILED | CANCELLED) break ;; esac
    sleep 0.2
done
if [ ! -s "$ck/latest" ]; then
    show_log "$work/resume.out"
    scancel "$jid"
    if [ "$RANKS" -gt 1 ] && grep -q 'trained lenet5' "$work/resume.out"; then
        echo "SKIP: distributed training ran but wrote no checkpoint (not implemented yet?)"
        exit 77
    fi
    bad "no checkpoint appeared within 90 s"
    exit 1
fi
scancel --signal=USR1 --full "$jid"
echo "signalled job $jid after checkpoint step $(latest_step "$ck")"
# the job checkpoints, exits 0 and requeues itself; the requeued run
# (SLURM_RESTART_COUNT=1) starts after cred_expire (10 s) and resumes
t0=$SECONDS
until grep -q 'pstrain exited with status' "$work/resume.out" 2>/dev/null || [ $((SECONDS - t0)) -ge 60 ]; do sleep 0.2; done
# the checkpoint the stop wrote: the newest one once the first run is over
stopped=$(ls "$ck" | sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' | sort -n | tail -1)
until grep -q 'restart 1' "$work/resume.out" 2>/dev/null || [ $((SECONDS - t0)) -ge 60 ]; do sleep 0.3; done
grep -q 'got SIGUSR1' "$work/resume.out" || bad "the batch script did not see SIGUSR1"
grep -q 'pstrain train: signal 10' "$work/resume.out" || bad "pstrain did not report the signal"
grep -q 'pstrain exited with status 0' "$work/resume.out" || { show_log "$work/resume.out"; bad "pstrain did not exit 0 after the signal"; exit 1; }
[ -n "$stopped" ] && [ "$stopped" -lt "$total" ] || bad "stopped at '$stopped', not before the end ($total)"
grep -q 'requeueing job' "$work/resume.out" || bad "train.sbatch did not requeue"
grep -q 'restart 1' "$work/resume.out" || { show_log "$work/resume.out"; bad "the requeued job did not start within 60 s"; exit 1; }
slurm_wait_job "$jid" 240
echo "requeued job $jid: $JOB_STATE $JOB_EXIT (stopped at $stopped)"
[ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = 0:0 ] || bad "requeued job ended $JOB_STATE $JOB_EXIT"
grep -q "resumed from $ck/ckpt-$stopped.h5 at step $stopped" "$work/resume.out" ||
    { show_log "$work/resume.out"; bad "the requeued job did not resume from ckpt-$stopped.h5"; }
[ "$(json_num "$out/summary.json" steps)" = $total ] || bad "summary steps $(json_num "$out/summary.json" steps), expected $total"
[ "$(latest_step "$ck")" = $total ] || bad "latest checkpoint $(latest_step "$ck"), expected $total"

# a follow-up job (new submission, same CKPT_DIR) continues further
more=$((total + 20))
jid2=$(OUT=$work/run-follow CKPT_DIR=$ck STEPS=$more CKPT_EVERY=10 REQUEUE_ON_SIGNAL=0 \
    "${sb[@]}" -o "$work/follow.out" "$src/jobs/train.sbatch") || { echo "FAIL: sbatch"; exit 1; }
slurm_wait_job "$jid2" 120
echo "follow-up job $jid2: $JOB_STATE $JOB_EXIT"
[ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = 0:0 ] || bad "follow-up job ended $JOB_STATE $JOB_EXIT"
grep -q "resumed from $ck/ckpt-$total.h5 at step $total" "$work/follow.out" ||
    { show_log "$work/follow.out"; bad "the follow-up job did not resume from ckpt-$total.h5"; }
[ "$(latest_step "$ck")" = $more ] || bad "latest checkpoint $(latest_step "$ck"), expected $more"
n=$(ls "$ck"/ckpt-*.h5 | wc -l)
[ "$n" -le 3 ] || bad "$n checkpoints kept, KEEP=3"
[ $fail = 0 ] && echo "slurm signal/requeue/resume: all checks passed"
exit $fail
