#!/usr/bin/env bash
# bench_model --compare-threads on small models for a few interleaved steps:
# the per-thread-count lines, the speedup lines and the bitwise-equal line
# are printed (no timing is checked), --layers prints its per-layer table
# and keeps the bits, a seeded defect (--perturb: one bit of
# one parameter) makes the comparison fail with exit 1 and a message, and a
# bad list is refused.
set -u
bench=${1:?usage: test_bench_compare.sh path/to/bench_model}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-bench-compare.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # message, command...
    local msg=$1; shift
    if ! "$@"; then echo "FAIL: $msg"; fail=1; fi
}
has() { grep -qE -- "$2" "$1" || { echo "missing /$2/ in:"; cat "$1"; return 1; }; }

args=(--batch 8 --warmup 1 --steps 3 --compare-threads 1,2,3 lenet5 resnet-20)
"$bench" "${args[@]}" >"$tmp/out" 2>&1
check "exit status 0 (got $?)" test $? -eq 0
for m in lenet5 resnet-20; do
    check "$m header" has "$tmp/out" "^compare $m batch 8 28x28x1 classes 10: threads 1,2,3, 1 warm-up \+ 3 timed steps each"
done
for t in 1 2 3; do
    check "threads $t line, both models" test "$(grep -cE "^  threads $t: step ms best [0-9.]+ q1 [0-9.]+ median [0-9.]+ q3 [0-9.]+ max [0-9.]+; img/s median [0-9]+ best [0-9]+$" "$tmp/out")" -eq 2
done
for t in 2 3; do
    check "speedup $t/1 line, both models" test "$(grep -cE "^  speedup threads $t / threads 1: median/median [0-9.]+x  best/best [0-9.]+x  per round min [0-9.]+ q1 [0-9.]+ median [0-9.]+ q3 [0-9.]+ max [0-9.]+$" "$tmp/out")" -eq 2
done
check "bitwise-equal line, both models" test "$(grep -cE "^  bitwise equal: threads 1,2,3, parameters and optimizer slots \([0-9]+ floats\) and every step's loss after 4 steps$" "$tmp/out")" -eq 2

# --layers: per-layer medians (nn_model_set_profile_wall), the same bits;
# and 2u: a second 2-thread model with every buffer its own bytes
"$bench" --batch 8 --warmup 1 --steps 3 --compare-threads 1,2,2u --layers lenet5 >"$tmp/layers" 2>&1
st=$?
check "--layers: exit status 0 (got $st)" test $st -eq 0
check "--layers: header" has "$tmp/layers" "^  per layer, median wall us of the 3 timed steps \(threads 1 first"
for l in conv1 pool1 conv2 fc1 logits; do
    check "--layers: row $l" has "$tmp/layers" "^  $l +[a-z0-9]+ +[0-9.]+( +[0-9.]+ +[0-9.]+x){2} +[0-9.]+( +[0-9.]+ +[0-9.]+x){2}$"
done
check "--layers: sums by kind" has "$tmp/layers" "^  sum of medians +conv2d +[0-9.]+ +[0-9.]+ +[0-9.]+x"
check "--layers: sum of all" has "$tmp/layers" "^  sum of medians, all +[0-9.]+ +[0-9.]+ +[0-9.]+x"
for t in 1 2 2u; do
    check "--layers: outside the layers, threads $t" has "$tmp/layers" "^  threads $t +step +[0-9.]+  train step +[0-9.]+  layers +[0-9.]+  train step - layers +-?[0-9.]+  optimizer +[0-9.]+  step - sum of layer medians +-?[0-9.]+$"
done
check "2u: its line" has "$tmp/layers" "^  speedup threads 2u / threads 1: median/median"
check "--layers: bitwise-equal line" has "$tmp/layers" "^  bitwise equal: threads 1,2,2u,"

# the seeded defect: the comparison must see one flipped bit
"$bench" --batch 8 --warmup 0 --steps 2 --compare-threads 1,2 --perturb lenet5 >"$tmp/bad" 2>&1
st=$?
check "perturbed: exit 1 (got $st)" test $st -eq 1
check "perturbed: message" has "$tmp/bad" "^bench_model: compare lenet5: parameters differ after 2 steps: threads 1 and 2 at float [0-9]+"
check "perturbed: no equal line" test "$(grep -c "bitwise equal" "$tmp/bad")" -eq 0

"$bench" --compare-threads 2 lenet5 >"$tmp/usage" 2>&1
st=$?
check "one thread count: exit 1 (got $st)" test $st -eq 1
check "one thread count: message" has "$tmp/usage" "bad --compare-threads, want a list of 2-8 thread counts"
exit $fail
