#!/usr/bin/env bash
# Bad input to `pstrain train` and `pstrain eval`: each case must end with a
# clear one-line error that names the file, flag, model or variable at
# fault, the documented exit status (2 for a usage error: a flag, its value
# or a missing flag; 1 for a failure: a file, a data set, a checkpoint, an
# output, a diverging run), no crash or sanitizer report, and no summary
# file. Uses small generated data sets only.
. "$(dirname "$0")/lib.sh"

# fails_with STATUS NAME 'NEEDLE1|NEEDLE2...' CMD ARGS...: CMD exits with
# STATUS, as described above, and its stderr contains every needle (fixed
# strings). err_case: a failure (1); usage_case: a usage error (2).
fails_with() {
    local want=$1 name=$2 needles=$3 rc n lines
    shift 3
    rm -f "$tmp/s.json"
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" = "$want" ] || bad "$name: exit status $rc, expected $want ($*)"
    if ! crash_free "$tmp/err" || ! crash_free "$tmp/out"; then
        bad "$name: crash or sanitizer report:"
        head -20 "$tmp/err" | sed 's/^/    /'
    fi
    lines=$(grep -c . "$tmp/err")
    [ "$lines" = 1 ] || bad "$name: $lines lines on stderr, expected one error line"
    local IFS='|'
    for n in $needles; do
        grep -qF -- "$n" "$tmp/err" || bad "$name: message does not mention '$n'"
    done
    [ ! -e "$tmp/s.json" ] || bad "$name: summary file left behind"
    ls "$tmp"/s.json.tmp* >/dev/null 2>&1 && bad "$name: temporary summary left behind"
    echo "  $name (exit $rc): $(head -1 "$tmp/err")"
}
err_case() { fails_with 1 "$@"; }
usage_case() { fails_with 2 "$@"; }

d=$tmp
"$MKDATA" "$d/ok.h5" 640 100 28 28 1 10 || { echo "mkdata failed"; exit 1; }
"$MKDATA" "$d/bad-label.h5" 640 100 28 28 1 10 label-range || exit 1
"$MKDATA" "$d/tiny4.h5" 64 16 4 4 1 10 || exit 1
"$MKDATA" "$d/img32.h5" 64 16 32 32 1 10 || exit 1
"$MKDATA" "$d/notest.h5" 64 0 28 28 1 10 || exit 1
printf 'not an HDF5 file\n' >"$d/junk.h5"
T=("$PSTRAIN" train --quiet --summary-json "$d/s.json")
E=("$PSTRAIN" eval --quiet --summary-json "$d/s.json")

say "data sets"
"$PSTRAIN_PREP" verify "$d/bad-label.h5" >/dev/null 2>&1 && bad "pstrain-prep verify accepts the broken set"
err_case "label out of range" "bad-label.h5|label" "${T[@]}" --data "$d/bad-label.h5" --model mlp
err_case "missing file" "nonexistent.h5" "${T[@]}" --data "$d/nonexistent.h5"
err_case "not HDF5" "junk.h5" "${T[@]}" --data "$d/junk.h5"
usage_case "missing --data" "--data" "${T[@]}" --model mlp
# a FIFO must be refused, not block in open() (timeout: a hang fails the needles)
mkfifo "$d/fifo.h5"
err_case "data is a FIFO" "fifo.h5|regular file" timeout 20 "${T[@]}" --data "$d/fifo.h5"
err_case "lenet5 on 4x4" "lenet5|4x4" "${T[@]}" --data "$d/tiny4.h5" --model lenet5
err_case "inception-mini on 4x4" "inception-mini|4x4" "${T[@]}" --data "$d/tiny4.h5" --model inception-mini

say "flags"
usage_case "batch 0" "--batch|'0'" "${T[@]}" --data "$d/ok.h5" --batch 0
usage_case "batch too large" "--batch|at most 1048576" "${T[@]}" --data "$d/ok.h5" --batch 100000000
# a batch far larger than the data set is no error, and activations are sized
# for the largest batch there can be (not 74 GB for lenet5 at this batch)
timeout 60 "${T[@]}" --data "$d/ok.h5" --model lenet5 --batch 1048576 --steps 1 >"$tmp/out" \
    2>"$tmp/err" || bad "lenet5 --batch 1048576 on 640 examples: $(head -1 "$tmp/err")"
usage_case "batch junk" "--batch|12x" "${T[@]}" --data "$d/ok.h5" --batch 12x
usage_case "lr -1" "--lr|-1" "${T[@]}" --data "$d/ok.h5" --lr -1
usage_case "lr nan" "--lr|nan" "${T[@]}" --data "$d/ok.h5" --lr nan
usage_case "epochs -1" "--epochs" "${T[@]}" --data "$d/ok.h5" --epochs -1
usage_case "steps 0" "--steps" "${T[@]}" --data "$d/ok.h5" --steps 0
usage_case "unknown model" "--model|resnet50" "${T[@]}" --data "$d/ok.h5" --model resnet50
usage_case "unknown optimizer" "--optimizer|adagrad" "${T[@]}" --data "$d/ok.h5" --optimizer adagrad
usage_case "unknown flag" "--no-such-flag" "${T[@]}" --data "$d/ok.h5" --no-such-flag
usage_case "stray argument" "stray" "${T[@]}" --data "$d/ok.h5" stray
usage_case "unknown augmentation" "--augment|rotate" "${T[@]}" --data "$d/ok.h5" --augment crop,rotate
usage_case "lr-decay without epochs" "--lr-decay" "${T[@]}" --data "$d/ok.h5" --lr-decay 0.5
usage_case "checkpoint-every without dir" "--checkpoint-dir" "${T[@]}" --data "$d/ok.h5" \
    --checkpoint-every 5
usage_case "resume without file or dir" "--resume" "${T[@]}" --data "$d/ok.h5" --resume
usage_case "unknown command" "frobnicate" "$PSTRAIN" frobnicate

say "outputs that cannot be written"
err_case "metrics in a missing directory" "$d/nodir/m.jsonl" "${T[@]}" --data "$d/ok.h5" \
    --model mlp --metrics "$d/nodir/m.jsonl"
err_case "summary in a missing directory" "$d/nodir/x.json" "$PSTRAIN" train --quiet \
    --data "$d/ok.h5" --model mlp --summary-json "$d/nodir/x.json"
err_case "trace in a missing directory" "$d/nodir/t.jsonl" "${T[@]}" --data "$d/ok.h5" \
    --model mlp --trace-examples "$d/nodir/t.jsonl"
# a single process writes the trace too (it was silently ignored): one line per step
"${T[@]}" --data "$d/ok.h5" --model mlp --steps 3 --trace-examples "$d/t.jsonl" >"$tmp/out" 2>&1 ||
    bad "train with --trace-examples failed"
[ "$(grep -c '^{"worker":0,"step":[0-2],"ticket":[0-2],"epoch":0,"ids":\[' "$d/t.jsonl")" = 3 ] ||
    bad "single-process trace: expected 3 batch lines, got: $(head -c 200 "$d/t.jsonl")"
touch "$d/plainfile"
err_case "checkpoint dir under a file" "$d/plainfile/ck" "${T[@]}" --data "$d/ok.h5" \
    --model mlp --checkpoint-dir "$d/plainfile/ck"

# outputs that are devices are written in place, never renamed over or
# removed (as root, the old rename replaced /dev/null); mknod needs root
if mknod "$d/null-dev" c 1 3 2>/dev/null && mknod "$d/full-dev" c 1 7 2>/dev/null; then
    "${T[@]}" --data "$d/ok.h5" --model mlp --steps 2 --summary-json "$d/null-dev" \
        >"$tmp/out" 2>"$tmp/err" || bad "summary to a null device: $(head -1 "$tmp/err")"
    [ -c "$d/null-dev" ] || bad "summary replaced the null device node"
    err_case "summary to a full device" "full-dev" "$PSTRAIN" train --quiet --data "$d/ok.h5" \
        --model mlp --steps 2 --summary-json "$d/full-dev"
    [ -c "$d/full-dev" ] || bad "summary removed the full device node"
fi

# an unusable checkpoint directory fails at the start, not after training
# (timeout: the old code trained all epochs first)
err_case "checkpoint dir is a file" "$d/plainfile|not a directory" timeout 20 "${T[@]}" \
    --data "$d/ok.h5" --model mlp --epochs 100000 --checkpoint-dir "$d/plainfile"

say "diverging loss"
# sgd with lr 1e6 overflows within a few steps; the message names the step,
# and the checkpoints written before it stay good.
err_case "NaN/Inf loss" "step|--lr" "${T[@]}" --data "$d/ok.h5" --model mlp --optimizer sgd \
    --lr 1e6 --epochs 5 --checkpoint-dir "$d/div" --checkpoint-every 1
if [ -e "$d/div/latest" ]; then
    dstep=$(grep -o 'at step [0-9]*' "$tmp/err" | grep -o '[0-9]*$')
    cstep=$("$CKPT_CHECK" "$d/div/$(cat "$d/div/latest")") || bad "latest checkpoint after divergence does not verify"
    [ -n "$dstep" ] && [ -n "$cstep" ] && [ "$cstep" -lt "$dstep" ] ||
        bad "latest checkpoint (step ${cstep:-?}) is not before the diverging step ${dstep:-?}"
    # its parameters are finite: it resumes (and diverges again, at a later step)
    for f in "$d"/div/ckpt-*.h5; do
        "$CKPT_CHECK" "$f" >/dev/null || bad "$f does not verify"
    done
fi

say "checkpoints that do not fit"
"$PSTRAIN" train --quiet --data "$d/ok.h5" --model mlp --steps 3 --checkpoint-dir "$d/ck" \
    >"$tmp/log" 2>&1 || { bad "making a checkpoint failed"; cat "$tmp/log"; }
ck=$d/ck/ckpt-3.h5
err_case "resume: other model" "ckpt-3.h5|mlp|lenet5" "${T[@]}" --data "$d/ok.h5" \
    --model lenet5 --steps 5 --resume "$ck"
err_case "resume: other optimizer" "ckpt-3.h5|adam" "${T[@]}" --data "$d/ok.h5" --model mlp \
    --optimizer adam --steps 5 --resume "$ck"
err_case "resume: other image size" "ckpt-3.h5|32" "${T[@]}" --data "$d/img32.h5" --model mlp \
    --steps 5 --resume "$ck"
err_case "resume: other batch" "ckpt-3.h5|--batch" "${T[@]}" --data "$d/ok.h5" --model mlp \
    --batch 32 --steps 5 --resume "$ck"
err_case "resume: other seed" "ckpt-3.h5|seed" "${T[@]}" --data "$d/ok.h5" --model mlp \
    --seed 7 --steps 5 --resume "$ck"
err_case "resume: other --limit" "ckpt-3.h5|batches per epoch|--limit" "${T[@]}" --data "$d/ok.h5" \
    --model mlp --limit 64 --steps 5 --resume "$ck"
err_case "resume: missing file" "nothere.h5" "${T[@]}" --data "$d/ok.h5" --model mlp --steps 5 \
    --resume "$d/nothere.h5"
head -c 3000 "$ck" >"$d/cut.h5"
err_case "resume: truncated file" "cut.h5" "${T[@]}" --data "$d/ok.h5" --model mlp --steps 5 \
    --resume "$d/cut.h5"
err_case "resume: a data set, not a checkpoint" "ok.h5" "${T[@]}" --data "$d/ok.h5" --model mlp \
    --steps 5 --resume "$d/ok.h5"

mkdir -p "$d/empty"
say "eval"
err_case "eval: other image size" "ckpt-3.h5|32x32" "${E[@]}" --data "$d/img32.h5" --checkpoint "$ck"
err_case "eval: no checkpoint in dir" "$d/empty" "${E[@]}" --data "$d/ok.h5" --checkpoint "$d/empty"
err_case "eval: checkpoint is a FIFO" "fifo.h5|regular file" timeout 20 "${E[@]}" --data "$d/ok.h5" \
    --checkpoint "$d/fifo.h5"
err_case "eval: truncated checkpoint" "cut.h5" "${E[@]}" --data "$d/ok.h5" --checkpoint "$d/cut.h5"
err_case "eval: missing data" "gone.h5" "${E[@]}" --data "$d/gone.h5" --checkpoint "$ck"
err_case "eval: broken data" "bad-label.h5|label" "${E[@]}" --data "$d/bad-label.h5" --checkpoint "$ck"
err_case "eval: no such split" "val" "${E[@]}" --data "$d/ok.h5" --checkpoint "$ck" --split val
err_case "eval: no test split" "notest.h5|test" "${E[@]}" --data "$d/notest.h5" --checkpoint "$ck"
usage_case "eval: batch 0" "--batch" "${E[@]}" --data "$d/ok.h5" --checkpoint "$ck" --batch 0
usage_case "eval: missing --checkpoint" "--checkpoint" "${E[@]}" --data "$d/ok.h5"
# the summary escapes a checkpoint path that needs it (was printed raw: invalid JSON)
mkdir -p "$d/q\"d\\x" && cp "$ck" "$d/q\"d\\x/c.h5"
"$PSTRAIN" eval --quiet --data "$d/ok.h5" --checkpoint "$d/q\"d\\x/c.h5" --summary-json "$d/e.json" \
    >"$tmp/out" 2>"$tmp/err" || bad "eval of a checkpoint under q\"d\\x: $(head -1 "$tmp/err")"
grep -qF 'q\"d\\x/c.h5",' "$d/e.json" || bad "checkpoint path not escaped in the eval summary"
# a batch far larger than the split is no error (nor an attempt to allocate it)
"${E[@]}" --data "$d/ok.h5" --checkpoint "$ck" --batch 2000000000 >"$tmp/out" 2>"$tmp/err" ||
    bad "eval --batch 2000000000 failed: $(head -1 "$tmp/err")"
finish
