#!/usr/bin/env bash
# bench-timeline.sh - what --timeline costs: sync runs under the MPI launcher
# (root, 1 PS, 2 workers) with and without it, alternating, the order of the
# pair swapped every round so that a drift of the machine's speed falls on
# both alike; the mean step of each run (summary: train_seconds / steps),
# then the medians and their ratio per model (goal: under 1.01) with the
# ratio's 95% interval (the pairs resampled).
#
#   bash jobs/bench-timeline.sh                 (ROUNDS=5 pairs per model)
#   ROUNDS=9 MODELS="lenet5" bash jobs/bench-timeline.sh
#
# lenet5 trains on Fashion-MNIST (300 steps of 64), resnet-20 on 32x32x3
# data written by test_dist mkdata (30 steps of 32). On a shared or
# oversubscribed machine the runs of one setting spread far wider than 1%
# and even 30 pairs leave the ratio a few percent uncertain: it shows a cost
# under 1% only where its interval does. build/bench/bench_timeline times
# the recording alone.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
. jobs/mpiexec.sh
rounds=${ROUNDS:-5}
models=${MODELS:-lenet5 resnet-20}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "$bench_name: ROUNDS=$rounds: expected a count >= 1" >&2; exit 2; }
bench_out "$build/bench-timeline"
bench_build -Dbuildtype=release -- pstrain data-tools/pstrain-prep test/dist/test_dist
bench_fashion_h5 "$build/data-tools/pstrain-prep" "$out/fashion-mnist.h5"
[ -f "$out/c32.h5" ] || "$build/test/dist/test_dist" mkdata "$out/c32.h5" 2048 256 32 32 3 10 >/dev/null

# one run: the mean step in ms
step_ms() { # model flag...
    local model=$1 args
    shift
    if [ "$model" = lenet5 ]; then args=(--data "$out/fashion-mnist.h5" --steps 300 --batch 64)
    else args=(--data "$out/c32.h5" --steps 30 --batch 32); fi
    "${MPIEXEC_CMD[@]}" -n 4 "$build/pstrain" train --ps 1 --model "$model" "${args[@]}" --quiet \
        --summary-json "$out/s.json" "$@" >/dev/null 2>"$out/err" ||
        { echo "$bench_name: $model failed: $(tail -1 "$out/err")" >&2; exit 1; }
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print("%.3f" % (1e3 * s["train_seconds"] / s["steps"]))' "$out/s.json"
}

# the 95% interval of the ratio of medians (the lower middle, as median), the
# pairs resampled with a fixed seed
ratio_interval() { # "off runs" "on runs"
    python3 - "$1" "$2" <<'PY'
import random, statistics, sys
off, on = ([float(x) for x in a.split()] for a in sys.argv[1:3])
rng = random.Random(1)
rs = sorted(statistics.median_low(on[i] for i in ix) / statistics.median_low(off[i] for i in ix)
            for ix in ([rng.randrange(len(off)) for _ in off] for _ in range(2000)))
print("95%% interval %.3f-%.3f" % (rs[50], rs[1949]))
PY
}

for model in $models; do
    off=() on=()
    for ((i = 1; i <= rounds; i++)); do
        if ((i % 2)); then
            a=$(step_ms "$model"); b=$(step_ms "$model" --timeline "$out/t.json")
        else
            b=$(step_ms "$model" --timeline "$out/t.json"); a=$(step_ms "$model")
        fi
        off+=("$a") on+=("$b")
        echo "$model round $i: off $a ms, on $b ms"
    done
    m_off=$(printf '%s\n' "${off[@]}" | median) m_on=$(printf '%s\n' "${on[@]}" | median)
    echo "$model: median step off $m_off ms (runs ${off[*]}), on $m_on ms (runs ${on[*]}), ratio $(awk -v a="$m_on" -v b="$m_off" 'BEGIN { printf "%.3f", a / b }') ($(ratio_interval "${off[*]}" "${on[*]}"))"
done
