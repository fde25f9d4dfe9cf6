#!/usr/bin/env bash
# check-dump-params.sh - whether two pstrain binaries train every built-in
# model to the same bits: `pstrain train --dump-params` after a few steps on
# a tiny synthetic data set, with 1 and 2 compute threads, compared with cmp.
# A tool for refactorings that must not change results, not a test.
#
#   bash jobs/check-dump-params.sh OLD_PSTRAIN NEW_PSTRAIN
#
# Prints one line per model and run (same / DIFFERENT / skipped, and why);
# exits 1 when any dump differs or a run fails in one binary only.
# Environment:
#   MKDATA   the data maker (default: mkdata beside NEW or in its build dir's
#            test/train, else OLD's)
#   MODELS   models to run (default: every one OLD's `pstrain plan --help`
#            names)
#   STEPS    training steps (default 3), BATCH examples per step (default 8)
#   SWITCHES 1 (default): also run resnet-20 and inception-mini under each
#            kernel and graph switch (PSTRAIN_WINO, PSTRAIN_FUSE,
#            PSTRAIN_ALIAS), whose values must keep their meaning; 0: not
set -u
OLD=${1:?usage: check-dump-params.sh OLD_PSTRAIN NEW_PSTRAIN}
NEW=${2:?usage: check-dump-params.sh OLD_PSTRAIN NEW_PSTRAIN}
STEPS=${STEPS:-3}
BATCH=${BATCH:-8}
SWITCHES=${SWITCHES:-1}
for b in "$OLD" "$NEW"; do
    [ -x "$b" ] || { echo "check-dump-params: $b is not an executable" >&2; exit 2; }
done
if [ -z "${MKDATA:-}" ]; then
    for d in "$(dirname "$NEW")" "$(dirname "$OLD")"; do
        for m in "$d/mkdata" "$d/test/train/mkdata" "$d/../test/train/mkdata" "$d/../../test/train/mkdata"; do
            [ -x "$m" ] && { MKDATA=$m; break 2; }
        done
    done
fi
[ -x "${MKDATA:-}" ] || { echo "check-dump-params: set MKDATA (test/train/mkdata)" >&2; exit 2; }
export LC_ALL=C
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-dump.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The image sizes to try per model, smallest first: the first one the
# model accepts (in OLD) is used.
sizes() {
    case $1 in
    mlp) echo "8x8x1" ;;
    lenet5) echo "28x28x1 32x32x3" ;;
    inception-v3) echo "75x75x3 80x80x3 96x96x3 139x139x3 299x299x3" ;;
    resnet-50 | resnet-*) echo "32x32x3 64x64x3 224x224x3" ;;
    *) echo "16x16x3 32x32x3 64x64x3 75x75x3 96x96x3 224x224x3" ;;
    esac
}

# data H W C: a 4-class set of 2 batches per step, made once per size
data() {
    local f="$tmp/d$1x$2x$3.h5"
    [ -s "$f" ] || "$MKDATA" "$f" $((BATCH * 4)) 8 "$1" "$2" "$3" 4 >/dev/null || return 1
    echo "$f"
}

# run BIN OUT MODEL DATA THREADS [VAR=VALUE...]: one training run
run() {
    local bin=$1 out=$2 model=$3 d=$4 t=$5
    shift 5
    env "$@" "$bin" train --data "$d" --model "$model" --batch "$BATCH" --steps "$STEPS" \
        --threads "$t" --quiet --dump-params "$out" >"$out.log" 2>&1
}

fail=0
# compare MODEL SIZE THREADS [VAR=VALUE...]: one line
compare() {
    local model=$1 size=$2 t=$3
    shift 3
    local h w c tag d
    IFS=x read -r h w c <<<"$size"
    tag="$model $size threads $t${1:+ $*}"
    d=$(data "$h" "$w" "$c") || { echo "$tag: FAILED: mkdata"; fail=1; return; }
    run "$OLD" "$tmp/old.bin" "$model" "$d" "$t" "$@"
    local ro=$?
    run "$NEW" "$tmp/new.bin" "$model" "$d" "$t" "$@"
    local rn=$?
    if [ $ro != 0 ] || [ $rn != 0 ]; then
        if [ $ro != 0 ] && [ $rn != 0 ]; then
            echo "$tag: skipped: both fail ($(tail -1 "$tmp/old.bin.log"))"
        else
            echo "$tag: DIFFERENT: exit $ro (old) against $rn (new)"
            tail -2 "$tmp/old.bin.log" "$tmp/new.bin.log" | sed 's/^/    /'
            fail=1
        fi
    elif cmp -s "$tmp/old.bin" "$tmp/new.bin"; then
        echo "$tag: same ($(stat -c %s "$tmp/new.bin") bytes)"
    else
        echo "$tag: DIFFERENT: $(cmp "$tmp/old.bin" "$tmp/new.bin" 2>&1 | head -1)"
        fail=1
    fi
}

# the first size of sizes(MODEL) that OLD accepts (a --dry-run builds the model)
pick_size() {
    local model=$1 s h w c d
    for s in $(sizes "$model"); do
        IFS=x read -r h w c <<<"$s"
        d=$(data "$h" "$w" "$c") || continue
        if "$OLD" train --data "$d" --model "$model" --batch "$BATCH" --dry-run \
            >/dev/null 2>&1; then
            echo "$s"
            return 0
        fi
    done
    return 1
}

models=${MODELS:-$("$OLD" plan --help 2>&1 | sed -n 's/^M: //p' | tr -d '|')}
[ -n "$models" ] || { echo "check-dump-params: no models (set MODELS)" >&2; exit 2; }
for model in $models; do
    size=$(pick_size "$model") || { echo "$model: skipped: no size of '$(sizes "$model")' fits"; continue; }
    for t in 1 2; do compare "$model" "$size" "$t"; done
    if [ "$SWITCHES" = 1 ] && { [ "$model" = resnet-20 ] || [ "$model" = inception-mini ]; }; then
        for sw in PSTRAIN_WINO=0 PSTRAIN_WINO=2 PSTRAIN_WINO=3 PSTRAIN_FUSE=0 PSTRAIN_FUSE=1 \
            PSTRAIN_ALIAS=0; do
            compare "$model" "$size" 2 "$sw"
        done
    fi
done
exit $fail
