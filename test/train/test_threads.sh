#!/usr/bin/env bash
# Threads per rank (issue 9): results do not depend on the thread counts.
#   single: `pstrain train --threads 1, 2, 3` in one process end with
#           bitwise the same parameters (--dump-params + cmp) for lenet5,
#           inception-mini (batch norm, dropout, concat) and resnet-20 (add)
#           with weight decay and label smoothing; `pstrain eval --threads`
#           prints the same numbers; --threads 0 runs on the affinity mask's
#           CPUs and the start-up line says how many; bad values are one-line
#           usage errors (exit 2).
#   dist:   sync MPI launcher runs of lenet5 (root, 1 PS, 2 workers) with --threads 1, 2, 3
#           and --ps-threads 1, 2, 3 end with bitwise the same parameters;
#           the start-up line names the threads of every role.
#
#   test_threads.sh FM MKDATA CKPT_CHECK single|dist
. "$(dirname "$0")/lib.sh"
mode=${4:-single}
export BLIS_NUM_THREADS=1

# 28x28x1, 10 classes; batches of 24 (no multiple of 2 or 3 threads' shares)
"$MKDATA" "$tmp/d.h5" 240 50 28 28 1 10 || exit 1
B0=(--data "$tmp/d.h5" --batch 24 --lr 0.02 --weight-decay 0.0005 --label-smoothing 0.1 --seed 3
    --log-every 0)
B=("${B0[@]}" --quiet)

# same_dump A B: the parameter dumps are equal byte for byte
same_dump() { cmp "$1" "$2" >/dev/null 2>&1 || { cmp "$1" "$2" 2>&1 | sed 's/^/    /'; return 1; }; }

if [ "$mode" = dist ]; then
    launch=(timeout -k 5 200 "${MPIEXEC_CMD[@]}" -n 4 "$PSTRAIN")
    for t in 1 2 3; do
        say "dist: sync, 1 PS, 2 workers, --threads $t --ps-threads $t"
        args=("${B[@]}")
        [ $t = 3 ] && args=("${B0[@]}") # the start-up lines
        run "$tmp/m$t.log" train "${args[@]}" --model lenet5 --ps 1 --steps 4 \
            --threads $t --ps-threads $t --dump-params "$tmp/m$t.bin" ||
            bad "MPI launcher --threads $t failed"
    done
    for t in 2 3; do
        check "dist: --threads $t differs from --threads 1" same_dump "$tmp/m1.bin" "$tmp/m$t.bin"
    done
    check "dist: the start-up line does not name the threads of every role" \
        grep -q "threads: root 2 prep, each worker 3 compute, each PS 3 optimizer" "$tmp/m3.log"
    finish
fi

launch=(timeout -k 5 200 "$PSTRAIN")
models=(lenet5 inception-mini)
if "$PSTRAIN" train --help | grep -q resnet-20; then models+=(resnet-20); fi
for model in "${models[@]}"; do
    for t in 1 2 3; do
        say "single: $model --threads $t"
        run "$tmp/$model.$t.log" train "${B[@]}" --model "$model" --steps 6 --threads $t \
            --dump-params "$tmp/$model.$t.bin" --checkpoint-dir "$tmp/$model.$t" ||
            bad "$model --threads $t failed"
    done
    for t in 2 3; do
        check "$model: --threads $t ends with other parameters than --threads 1" \
            same_dump "$tmp/$model.1.bin" "$tmp/$model.$t.bin"
    done
done

say "single: pstrain eval --threads 1 and 3 print the same numbers"
ck=$tmp/inception-mini.1
for t in 1 3; do
    nice "$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$ck" --threads $t \
        --summary-json "$tmp/ev$t.json" >"$tmp/ev$t.log" 2>&1 || bad "eval --threads $t failed"
done
check "eval: --threads 3 differs from --threads 1" \
    test "$(jget "$tmp/ev1.json" '(j["loss"], j["accuracy"])')" = \
    "$(jget "$tmp/ev3.json" '(j["loss"], j["accuracy"])')"

say "single: --threads 0 uses the CPUs of the affinity mask"
ncpu=$(nproc)
launch=(timeout -k 5 200 "$PSTRAIN")
run "$tmp/t0.log" train "${B0[@]}" --model lenet5 --steps 2 --threads 0 || bad "--threads 0 failed"
check "--threads 0: no 'threads: $ncpu compute' line" grep -q "threads: $ncpu compute, 2 prep" \
    "$tmp/t0.log"
# a mask of exactly T CPUs pins the pool (include/pstrain/pool.h); PSTRAIN_PIN=0 does not
if [ "$ncpu" -gt 1 ]; then
    check "--threads 0: not pinned: $(grep 'threads:' "$tmp/t0.log")" \
        grep -q "threads: $ncpu compute, 2 prep; compute pinned to CPUs [0-9]" "$tmp/t0.log"
    PSTRAIN_PIN=0 run "$tmp/t0n.log" train "${B0[@]}" --model lenet5 --steps 2 --threads 0 ||
        bad "PSTRAIN_PIN=0 --threads 0 failed"
    check "PSTRAIN_PIN=0: pinned: $(grep 'threads:' "$tmp/t0n.log")" \
        grep -q "threads: $ncpu compute, 2 prep\$" "$tmp/t0n.log"
fi

say "single: bad values are one-line usage errors"
for args in "--threads -1" "--threads 1025" "--threads x" "--ps-threads 2000" "--ps-threads -2"; do
    # shellcheck disable=SC2086
    "$PSTRAIN" train --data "$tmp/d.h5" $args >"$tmp/bad.log" 2>&1
    rc=$?
    check "train $args: exit $rc, expected 2" test $rc = 2
    check "train $args: not one line naming the flag: $(cat "$tmp/bad.log")" \
        test "$(wc -l <"$tmp/bad.log")" = 1 -a "$(grep -c -- "${args%% *}: expected" "$tmp/bad.log")" = 1
done
"$PSTRAIN" eval --data "$tmp/d.h5" --checkpoint "$ck" --threads -3 >"$tmp/bad.log" 2>&1
rc=$?
check "eval --threads -3: exit $rc, expected 2" test $rc = 2
check "eval --threads -3: $(cat "$tmp/bad.log")" grep -q -- "--threads: expected 0..1024" "$tmp/bad.log"
finish
