#!/usr/bin/env bash
# Resume is bitwise (issue 5): run A trains 250 steps straight; run B trains
# 130 steps, then `--resume` continues it to 250. With --limit 6400 (100
# steps per epoch) B stops inside the second epoch, so the resumed run
# replays the data cursor across an epoch boundary. A and B must end with
# bitwise identical variables and optimizer slots (h5diff: 0 differences)
# and the same test accuracy - for each optimizer, with augmentation, with
# an LR decay that changes at the boundary, with batch norm and dropout
# (inception-mini), from a FILE as well as from a DIR, from a directory
# whose newest checkpoint is damaged, and from an empty directory. Also
# --keep-checkpoints pruning and time-based --checkpoint-secs.
. "$(dirname "$0")/lib.sh"
need_fm
need_h5diff

# pair NAME STEPS STOP DATA ARGS...: A straight to STEPS, B to STOP then resumed
pair() {
    local n=$1 steps=$2 stop=$3 data=$4
    shift 4
    local a=$tmp/$n.a b=$tmp/$n.b
    train "$a.log" --data "$data" --steps "$steps" --checkpoint-dir "$a" --summary-json "$a.json" \
        --quiet "$@" || { bad "$n: run A failed"; return; }
    train "$b.1.log" --data "$data" --steps "$stop" --checkpoint-dir "$b" --quiet "$@" ||
        { bad "$n: run B (first part) failed"; return; }
    check "$n: B stopped at step $stop" test -e "$b/ckpt-$stop.h5"
    train "$b.log" --data "$data" --steps "$steps" --checkpoint-dir "$b" --resume \
        --summary-json "$b.json" "$@" || { bad "$n: resumed run B failed"; return; }
    check "$n: B said where it resumed" grep -q "resumed from $b/ckpt-$stop.h5 at step $stop" "$b.log"
    compare "$n" "$a" "$b" "$steps"
}
# compare NAME DIR-A DIR-B STEPS: final checkpoints and test accuracies equal
compare() {
    local n=$1 a=$2 b=$3 steps=$4 va vb
    if same_vars "$a/ckpt-$steps.h5" "$b/ckpt-$steps.h5"; then
        echo "  $n: ckpt-$steps.h5 bitwise equal ($(h5ls -r "$a/ckpt-$steps.h5" | grep -c Dataset) datasets)"
    else
        bad "$n: resumed run differs from the uninterrupted one"
    fi
    va=$(jget "$a.json" 'j["test_accuracy"]') vb=$(jget "$b.json" 'j["test_accuracy"]')
    check "$n: test accuracy $va (straight) != $vb (resumed)" test "$va" = "$vb"
    vb=$(jget "$b.json" 'j["steps"]')
    check "$n: resumed summary says $vb steps, expected $steps" test "$vb" = "$steps"
}

L=(--limit 6400)
say "mlp: optimizers"
pair sgd-decay 250 130 "$FM" --model mlp "${L[@]}" --optimizer sgd --lr 0.05 --lr-decay 0.5 \
    --lr-decay-epochs 1
pair momentum-nesterov 250 130 "$FM" --model mlp "${L[@]}" --optimizer momentum --nesterov
pair adam 250 130 "$FM" --model mlp "${L[@]}" --optimizer adam --lr 0.001 --weight-decay 0.0001
pair rmsprop 250 130 "$FM" --model mlp "${L[@]}" --optimizer rmsprop --lr 0.001 --label-smoothing 0.1
check "adam checkpoint has m and v slots" has_slots "$tmp/adam.a/ckpt-250.h5"
# control: the comparison sees a difference of 120 steps
same_vars "$tmp/adam.a/ckpt-250.h5" "$tmp/adam.b/ckpt-130.h5" >/dev/null &&
    bad "control: ckpt-250.h5 and ckpt-130.h5 compare equal"

say "lenet5 with --augment crop,flip"
pair lenet5-augment 250 130 "$FM" --model lenet5 "${L[@]}" --augment crop,flip --prep-threads 2

say "inception-mini (batch norm, dropout) on a generated set, 20 steps per epoch"
"$MKDATA" "$tmp/small.h5" 320 64 28 28 1 10 || exit 1
pair inception 50 27 "$tmp/small.h5" --model inception-mini --batch 16 --optimizer rmsprop \
    --lr 0.01 --augment flip

say "resume from a FILE into another directory"
a=$tmp/momentum-nesterov.a
train "$tmp/file.1.log" --data "$FM" --model mlp "${L[@]}" --nesterov --steps 170 \
    --checkpoint-dir "$tmp/file.src" --quiet || bad "file: first part failed"
train "$tmp/file.b.log" --data "$FM" --model mlp "${L[@]}" --nesterov --steps 250 \
    --checkpoint-dir "$tmp/file.b" --resume "$tmp/file.src/ckpt-170.h5" \
    --summary-json "$tmp/file.b.json" || bad "file: resumed run failed"
compare file "$a" "$tmp/file.b" 250

say "resume from a directory whose newest checkpoint is damaged"
b=$tmp/damaged.b
train "$b.1.log" --data "$FM" --model mlp "${L[@]}" --nesterov --steps 130 --checkpoint-dir "$b" \
    --checkpoint-every 50 --keep-checkpoints 0 --quiet || bad "damaged: first part failed"
check "damaged: ckpt-50, 100, 130 written" test -e "$b/ckpt-50.h5" -a -e "$b/ckpt-100.h5" \
    -a -e "$b/ckpt-130.h5"
sz=$(stat -c %s "$b/ckpt-130.h5")
truncate -s $((sz / 2)) "$b/ckpt-130.h5"
"$CKPT_CHECK" "$b/ckpt-130.h5" >/dev/null 2>&1 && bad "damaged: truncated file still verifies"
train "$b.log" --data "$FM" --model mlp "${L[@]}" --nesterov --steps 250 --checkpoint-dir "$b" \
    --resume --summary-json "$b.json" || bad "damaged: resumed run failed"
check "damaged: resumed from ckpt-100.h5" grep -q "resumed from $b/ckpt-100.h5 at step 100" "$b.log"
compare damaged "$a" "$b" 250

say "--resume with an empty checkpoint directory starts from scratch"
b=$tmp/empty.b
mkdir "$b"
train "$b.log" --data "$FM" --model mlp "${L[@]}" --nesterov --steps 250 --checkpoint-dir "$b" \
    --resume --summary-json "$b.json" || bad "empty: run failed"
check "empty: says it starts from scratch" grep -q "no checkpoint in $b" "$b.log"
compare empty "$a" "$b" 250

say "--keep-checkpoints"
for keep in 3 0 1; do
    d=$tmp/keep$keep
    train "$d.log" --data "$FM" --model mlp "${L[@]}" --steps 100 --checkpoint-dir "$d" \
        --checkpoint-every 10 --keep-checkpoints $keep --quiet || bad "keep $keep: run failed"
    case $keep in
    3) want="ckpt-100.h5 ckpt-80.h5 ckpt-90.h5 latest lock" ;;
    1) want="ckpt-100.h5 latest lock" ;;
    0) want="$(for s in 10 20 30 40 50 60 70 80 90 100; do echo ckpt-$s.h5; done | sort | tr '\n' ' ')latest lock" ;;
    esac
    # (lock: the writer's lock file, which stays)
    got=$(ls -A "$d" | sort | tr '\n' ' ' | sed 's/ $//')
    check "--keep-checkpoints $keep: files '$got', expected '$want'" test "$got" = "$want"
    check "--keep-checkpoints $keep: latest names ckpt-100.h5" grep -qx ckpt-100.h5 "$d/latest"
    for f in "$d"/ckpt-*.h5; do
        s=$("$CKPT_CHECK" "$f") || bad "$f does not verify"
        check "$f holds step $s" test "$(basename "$f")" = "ckpt-$s.h5"
    done
done
say "--checkpoint-secs"
d=$tmp/secs
train "$d.log" --data "$FM" --model lenet5 "${L[@]}" --epochs 3 --checkpoint-dir "$d" \
    --checkpoint-secs 0.25 --keep-checkpoints 0 --summary-json "$d.json" --quiet ||
    bad "--checkpoint-secs run failed"
secs=$(jget "$d.json" 'j["train_seconds"]')
n=$(ls "$d" | grep -c '^ckpt-.*\.h5$')
# one every 0.25 s of a run of train_seconds, plus the final one
want=$(awk -v s="$secs" 'BEGIN {print int(s / 0.25 / 2)}')
echo "  $n checkpoints in a run of $secs s"
check "--checkpoint-secs 0.25: $n checkpoints in $secs s, expected more than $want" test "$n" -gt "$want"
check "--checkpoint-secs: final ckpt-300.h5" test -e "$d/ckpt-300.h5"
for f in "$d"/ckpt-*.h5; do
    "$CKPT_CHECK" "$f" >/dev/null || bad "$f does not verify"
done
finish
