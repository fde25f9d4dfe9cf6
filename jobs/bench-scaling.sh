#!/usr/bin/env bash
# The scaling model against measured sync steps (docs/scaling.md): pstrain
# sync training across 3 emulated hosts (network namespaces over veth and a
# bridge: the multinode harness MN_HARNESS, default test/multinode/hosts.sh),
# root and one PS on host 1, one worker on each of hosts 2 and 3, with host
# 1's link capped in both directions by tc tbf at each rate of RATES ("none":
# uncapped; tbf's BURST, default 64kb, and TBF_LATENCY, default 50ms: the
# queue it keeps). For each rate: bench_rma across the same hosts (the link's
# payload bandwidth for 2 origins and a small round trip), then ROUNDS
# training runs; prints the measured step time and its parts next to
# bench/scaling_model.py's prediction from the measured B, L, compute and
# PS apply time (scaling_model.py check; the runs and the cap: scaling-lib.sh).
#
#   bash jobs/bench-scaling.sh [ROUNDS]          (default 3)
#   RATES="100mbit 200mbit 500mbit none" MODEL=resnet-20 BATCH=16 STEPS=100 \
#       bash jobs/bench-scaling.sh 3
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
set +e # hosts.sh's cleanup runs commands that may fail
bench_out out/bench-scaling
rounds=${1:-3}
rates=${RATES:-100mbit 200mbit none}
model=${MODEL:-resnet-20}
batch=${BATCH:-16}
steps=${STEPS:-100}
burst=${BURST:-64kb}
tbf_latency=${TBF_LATENCY:-50ms}
bench_build -- pstrain data-tools/pstrain-prep bench/bench_rma || exit 1
pstrain=$top/$build/pstrain
bench=$top/$build/bench/bench_rma
data=${DATA:-$top/out/fashion-mnist.h5}
bench_fashion_h5 "$top/$build/data-tools/pstrain-prep" "$data"
# shellcheck source=mpiexec.sh
source "$top/jobs/mpiexec.sh"
harness=${MN_HARNESS:-$top/test/multinode/hosts.sh}
[ -f "$harness" ] || { echo "bench-scaling: no multinode harness at $harness (MN_HARNESS)" >&2; exit 1; }
# shellcheck disable=SC1090
. "$harness"
# shellcheck source=scaling-lib.sh
. "$top/jobs/scaling-lib.sh"
MN_TIMEOUT=${MN_TIMEOUT:-900}
hosts_up 3 || exit 1

for rate in $rates; do
    scaling_cap 1 "$rate" "$burst" "$tbf_latency" ||
        { echo "bench-scaling: tc tbf on host 1 failed" >&2; exit 1; }
    # the link: 2 origins on hosts 2 and 3 against a target on host 1
    scaling_rma "$bench" "$out/rma-$rate.txt" --lat-reps 500 --reps 5 --seconds 0.5 ||
        { echo "bench-scaling: bench_rma failed" >&2; exit 1; }
    # training: ranks 0 (root) and 1 (PS) on host 1, workers on hosts 2 and 3
    mn_hostfile 2 1 1
    summaries=()
    for r in $(seq "$rounds"); do
        summaries+=("$out/train-$rate-$r.json")
        scaling_train "$pstrain" "$out/train-$rate-$r.json" "$out/train-$rate-$r.log" "$data" \
            "$model" "$batch" "$steps" ||
            { tail -5 "$out/train-$rate-$r.log"; echo "bench-scaling: training failed" >&2; exit 1; }
    done
    echo "== $rate: $(grep -m1 '^latency *fop' "$out/rma-$rate.txt")"
    python3 "$top/bench/scaling_model.py" check --model "$model" --ps 1 --batch "$batch" \
        --workers 2 --root-on-ps-host --rma "$out/rma-$rate.txt" --summary "${summaries[@]}" \
        --pstrain "$pstrain" || exit 1
done
