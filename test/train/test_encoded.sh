#!/usr/bin/env bash
# Training and evaluation on an encoded (JPEG) data set (issue 10).
#   single: lenet5 --image-size 28x28 --augment inception trains and evaluates
#           (the test split through the recipe's evaluation transform); the
#           same parameters for --prep-threads 1 and 3; a run resumed from
#           its epoch-1 checkpoint ends with the parameters of an uninterrupted
#           2-epoch run; pstrain eval on the checkpoint (size and recipe from
#           it) prints the run's final accuracy; errors: no --image-size for
#           a model without a natural size, a resume with another --augment,
#           a budget below the pipeline's minimum; bad flag values are
#           one-line usage errors (exit 2).
#   dist:   sync MPI launcher with 2 workers: the same parameters for 1 and 2
#           parameter servers.
#
#   test_encoded.sh FM MKDATA CKPT_CHECK MKENCODED single|dist
. "$(dirname "$0")/lib.sh"
MKENCODED=${4:?mkencoded path}
mode=${5:-single}
export BLIS_NUM_THREADS=1

"$MKENCODED" "$tmp/enc.h5" 300 60 4 || exit 1
B=(--data "$tmp/enc.h5" --model lenet5 --image-size 28x28 --augment inception --batch 25
   --lr 0.05 --seed 7 --log-every 0 --quiet)
same_dump() { cmp "$1" "$2" >/dev/null 2>&1 || { cmp "$1" "$2" 2>&1 | sed 's/^/    /'; return 1; }; }

if [ "$mode" = dist ]; then
    for P in 1 2; do
        say "dist: sync, $P PS, 2 workers"
        launch=(timeout -k 5 200 "${MPIEXEC_CMD[@]}" -n $((P + 3)) "$PSTRAIN")
        run "$tmp/d$P.log" train "${B[@]}" --ps $P --steps 8 --prep-threads 2 \
            --dump-params "$tmp/d$P.bin" || bad "MPI launcher with $P PS failed"
    done
    check "dist: 2 PS end with other parameters than 1 PS" same_dump "$tmp/d1.bin" "$tmp/d2.bin"
    finish
fi

launch=(timeout -k 5 200 "$PSTRAIN")
for t in 1 3; do
    say "single: --prep-threads $t"
    run "$tmp/t$t.log" train "${B[@]}" --epochs 2 --prep-threads $t --dump-params "$tmp/t$t.bin" \
        --summary-json "$tmp/t$t.json" --checkpoint-dir "$tmp/ck$t" || bad "--prep-threads $t failed"
done
check "--prep-threads 3 ends with other parameters than --prep-threads 1" \
    same_dump "$tmp/t1.bin" "$tmp/t3.bin"
pyok "the run's summary has no evaluation of the 60 test examples" '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["eval_split"] == "test" and j["eval_examples"] == 60, j
assert 0 <= j["eval_accuracy"] <= j["eval_top5_accuracy"] <= 1, j' "$tmp/t1.json"

say "resume from the epoch-1 checkpoint"
run "$tmp/r1.log" train "${B[@]}" --epochs 1 --checkpoint-dir "$tmp/ckr" || bad "epoch 1 failed"
run "$tmp/r2.log" train "${B[@]}" --epochs 2 --checkpoint-dir "$tmp/ckr" --resume \
    --dump-params "$tmp/r2.bin" || bad "the resumed run failed"
check "a resumed run ends with other parameters than an uninterrupted one" \
    same_dump "$tmp/t1.bin" "$tmp/r2.bin"
say "resume with another --augment"
if "$PSTRAIN" train "${B[@]/inception/resnet}" --epochs 3 --checkpoint-dir "$tmp/ckr" --resume \
    >"$tmp/ra.log" 2>&1; then
    bad "resuming an inception run with --augment resnet was accepted"
fi
check "the refused resume does not name the recipes" \
    grep -q "attribute augment is 'inception' but this run uses --augment resnet" "$tmp/ra.log"

say "pstrain eval on the checkpoint: its size and recipe"
"$PSTRAIN" eval --data "$tmp/enc.h5" --checkpoint "$tmp/ck1" --quiet >"$tmp/ev.log" 2>&1 ||
    { bad "pstrain eval failed"; tail -3 "$tmp/ev.log"; }
pyok "pstrain eval's accuracy differs from the run's final evaluation" '
import json, re, sys
j = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
m = re.search(r"accuracy ([0-9.]+), top-5 ([0-9.]+)", log)
assert m, log
assert abs(j["eval_accuracy"] - float(m.group(1))) < 6e-5, (j["eval_accuracy"], m.group(1))
assert abs(j["eval_top5_accuracy"] - float(m.group(2))) < 6e-5, (j["eval_top5_accuracy"], m.group(2))
' "$tmp/t1.json" "$tmp/ev.log"

say "errors"
# expect CODE PATTERN ARGS...: pstrain exits CODE with one line matching PATTERN
expect() {
    local code=$1 pat=$2 rc
    shift 2
    "$PSTRAIN" "$@" >"$tmp/x.log" 2>&1
    rc=$?
    if [ $rc != "$code" ] || ! grep -q -- "$pat" "$tmp/x.log" || [ "$(wc -l <"$tmp/x.log")" != 1 ]; then
        bad "pstrain $*: exit $rc (want $code), want one line matching '$pat':"
        head -3 "$tmp/x.log" | sed 's/^/    /'
    fi
}
expect 1 "lenet5 has no natural input size: give --image-size HxW" \
    train --data "$tmp/enc.h5" --model lenet5 --epochs 1 --quiet
expect 1 "memory budget 1.0 MiB is too small" train "${B[@]}" --epochs 1 --memory-budget 1M
expect 2 "--image-size: expected HxW" train "${B[@]}" --image-size 0x28
expect 2 "--image-size: expected HxW" train "${B[@]}" --image-size 28y28
expect 2 "--augment: expected inception, resnet" train "${B[@]}" --augment inceptoin
expect 2 "--memory-budget: expected a size" train "${B[@]}" --memory-budget 12Q
expect 2 "--image-size: expected HxW" eval --data "$tmp/enc.h5" --checkpoint "$tmp/ck1" \
    --image-size x
finish
