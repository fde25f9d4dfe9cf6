#!/usr/bin/env bash
# kill -9 at random moments (issue 5): an mlp run is killed with SIGKILL
# several times, checkpointing every 20 steps in even rounds and at every
# step in odd ones (nearly all of its time then goes to writing
# checkpoints, so the kill lands inside a write). After each kill every
# ckpt-*.h5 in the directory verifies (never half-written), DIR/latest names
# a good one and never goes back, and `--resume` continues from it. The run
# finally ends bitwise equal to an uninterrupted one. KILL9_SEED=N repeats
# a sequence of kill times, KILL9_ROUNDS=N sets the number of kills (8).
. "$(dirname "$0")/lib.sh"
need_fm
need_h5diff

seed=${KILL9_SEED:-$(( $(date +%s) % 32768 ))}
rounds=${KILL9_ROUNDS:-8}
RANDOM=$seed
ARGS=(--data "$FM" --model mlp --optimizer adam --lr 0.001 --limit 6400 --epochs 20)
TOTAL=2000
D=$tmp/k

say "uninterrupted reference run, $TOTAL steps"
train "$tmp/ref.log" "${ARGS[@]}" --quiet --checkpoint-dir "$tmp/ref" --summary-json "$tmp/ref.json" ||
    { bad "reference run failed"; finish; }

say "$rounds kills (KILL9_SEED=$seed)"
last=0 resume_at=0 tmps=0 done_early=0
for ((r = 1; r <= rounds; r++)); do
    # Round 1 is killed 0.3..1.5 s after its start (start-up, or early
    # training). Later rounds first wait until the run wrote a checkpoint of
    # its own (latest changed; at most 60 s), then
    # are killed 0..0.6 s later: on a loaded machine start-up alone can take
    # longer than a fixed delay, and every round must get into training.
    delay=$(awk -v r=$RANDOM -v first=$((r == 1)) \
        'BEGIN {printf "%.2f", first ? 0.3 + 1.2 * r / 32768 : 0.6 * r / 32768}')
    every=$((r % 2 ? 1 : 20))
    before=$(cat "$D/latest" 2>/dev/null)
    "$PSTRAIN" train "${ARGS[@]}" --checkpoint-dir "$D" --checkpoint-every $every --resume \
        >"$tmp/run$r.log" 2>&1 &
    pid=$!
    if [ "$r" -gt 1 ]; then
        for ((i = 0; i < 600; i++)); do
            [ "$(cat "$D/latest" 2>/dev/null)" != "$before" ] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.1
        done
    fi
    sleep "$delay"
    if ! kill -9 $pid 2>/dev/null; then
        wait $pid
        echo "  round $r: the run ended before the kill (after ${delay} s, exit $?)"
        done_early=1
        break
    fi
    wait $pid 2>/dev/null
    crash_free "$tmp/run$r.log" || bad "round $r: crash report before the kill"
    n=0 newest=0
    for f in "$D"/ckpt-*.h5; do
        [ -e "$f" ] || continue
        n=$((n + 1))
        s=$("$CKPT_CHECK" "$f" 2>"$tmp/check.err") ||
            bad "round $r: $f does not verify: $(cat "$tmp/check.err")"
        [ "${s:-0}" -gt "$newest" ] && newest=$s
    done
    t=$(ls -A "$D" 2>/dev/null | grep -c '\.tmp')
    [ "$t" -gt 0 ] && tmps=$((tmps + 1))
    step=0
    if [ -e "$D/latest" ]; then
        f=$D/$(cat "$D/latest")
        step=$("$CKPT_CHECK" "$f" 2>"$tmp/check.err") || bad "round $r: latest $f does not verify: $(cat "$tmp/check.err")"
    fi
    check "round $r: latest went back from step $last to $step" test "${step:-0}" -ge "$last"
    echo "  round $r (every $every): killed ${delay} s after $([ $r = 1 ] && echo its start || echo its first checkpoint); latest step ${step:-?}, $n checkpoints, $t temporaries"
    last=${step:-0}
    # A kill between a checkpoint's rename and the update of DIR/latest
    # leaves a complete file newer than the pointer: --resume takes it.
    resume_at=$((newest > last ? newest : last))
done
echo "  $tmps of $rounds kills left a temporary file (killed while writing a checkpoint)"

say "resume to the end"
train "$tmp/final.log" "${ARGS[@]}" --checkpoint-dir "$D" --checkpoint-every 20 --resume \
    --summary-json "$tmp/final.json" || bad "final resumed run failed"
if [ $done_early = 0 ] && [ "$resume_at" -gt 0 ]; then
    check "the final run resumed from step $resume_at (latest named $last)" \
        grep -q "resumed from $D/ckpt-$resume_at.h5 at step $resume_at" "$tmp/final.log"
elif [ $done_early = 0 ]; then
    check "no checkpoint was left, yet the final run says it resumed" \
        bash -c '! grep -q "resumed from" "$1"' _ "$tmp/final.log"
fi
check "the kills left no checkpoint past round 1 (KILL9_SEED=$seed)" test "$last" -gt 0
check "no temporary files left after a clean end" test -z "$(ls -A "$D" | grep '\.tmp')"
if same_vars "$tmp/ref/ckpt-$TOTAL.h5" "$D/ckpt-$TOTAL.h5"; then
    echo "  ckpt-$TOTAL.h5 bitwise equal to the uninterrupted run"
else
    bad "killed and resumed run differs from the uninterrupted one (KILL9_SEED=$seed)"
fi
va=$(jget "$tmp/ref.json" 'j["test_accuracy"]') vb=$(jget "$tmp/final.json" 'j["test_accuracy"]')
check "test accuracy $va (uninterrupted) != $vb (resumed)" test "$va" = "$vb"
finish
