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
# PS apply time.
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
fm=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
bench_build -- pstrain data-tools/pstrain-prep bench/bench_rma || exit 1
pstrain=$top/$build/pstrain
bench=$top/$build/bench/bench_rma
data=${DATA:-$top/out/fashion-mnist.h5}
if ! [ -f "$data" ]; then
    [ -f "$fm/train-images-idx3-ubyte.gz" ] || { echo "bench-scaling: $fm missing" >&2; exit 1; }
    "$top/$build/data-tools/pstrain-prep" idx --train-images "$fm/train-images-idx3-ubyte.gz" \
        --train-labels "$fm/train-labels-idx1-ubyte.gz" \
        --test-images "$fm/t10k-images-idx3-ubyte.gz" \
        --test-labels "$fm/t10k-labels-idx1-ubyte.gz" -o "$data" >/dev/null || exit 1
fi
# shellcheck source=mpiexec.sh
source "$top/jobs/mpiexec.sh"
harness=${MN_HARNESS:-$top/test/multinode/hosts.sh}
[ -f "$harness" ] || { echo "bench-scaling: no multinode harness at $harness (MN_HARNESS)" >&2; exit 1; }
# shellcheck disable=SC1090
. "$harness"
MN_TIMEOUT=${MN_TIMEOUT:-900}
hosts_up 3 || exit 1

for rate in $rates; do
    mn_tbf_clear 1
    if [ "$rate" != none ]; then
        { mn_tbf 1 "$rate" "$burst" "$tbf_latency" && mn_tbf_in 1 "$rate" "$burst" "$tbf_latency"; } ||
            { echo "bench-scaling: tc tbf on host 1 failed" >&2; exit 1; }
    fi
    # the link: 2 origins on hosts 2 and 3 against a target on host 1
    mn_hostfile 1 1 1
    mn_mpiexec -np 3 "$bench" --lat-reps 500 --min 1M --max 1M --reps 5 --seconds 0.5 \
        >"$out/rma-$rate.txt" || { echo "bench-scaling: bench_rma failed" >&2; exit 1; }
    # training: ranks 0 (root) and 1 (PS) on host 1, workers on hosts 2 and 3
    mn_hostfile 2 1 1
    for r in $(seq "$rounds"); do
        mn_mpiexec -np 4 "$pstrain" train --data "$data" --model "$model" --batch "$batch" \
            --ps 1 --mode sync --steps "$steps" --optimizer momentum --lr 0.01 --threads 1 \
            --prep-threads 1 --quiet --summary-json "$out/train-$rate-$r.json" \
            >"$out/train-$rate-$r.log" 2>&1 ||
            { tail -5 "$out/train-$rate-$r.log"; echo "bench-scaling: training failed" >&2; exit 1; }
    done
    echo "== $rate: $(grep -m1 '^latency *fop' "$out/rma-$rate.txt")"
    python3 - "$out" "$rate" "$rounds" "$model" "$batch" "$top" <<'EOF'
import json, re, statistics, subprocess, sys
out, rate, rounds, model, batch, top = sys.argv[1:7]
rma = open("%s/rma-%s.txt" % (out, rate)).read()
# payload bandwidth: 2 origins, 1 MiB gets and puts (the incast a PS sees)
bw = [float(m[2]) for m in re.finditer(r"bandwidth\s+(get|put)\s+1 MiB\s+origins\s+2\s+([\d.]+) GB/s", rma)]
lat = float(re.search(r"latency\s+fop\s+8 B\s+median\s+([\d.]+)", rma)[1])
msg = statistics.mean(float(m[1]) for m in re.finditer(r"per-msg\s+\w+\s+8 B\s+median\s+([\d.]+)", rma))
B = statistics.mean(bw) * 8  # Gbit/s
runs = []
for r in range(1, int(rounds) + 1):
    s = json.load(open("%s/train-%s-%d.json" % (out, rate, r)))
    t = s["timing"]
    ws = t["workers"]
    n = s["steps"] if "steps" in s else s["global_step"]
    # per worker step: its loop's time over its batches
    parts = {k: statistics.mean(w[k] for w in ws) / n for k in
             ("wait_data", "pull", "compute", "push", "wait_version")}
    parts["step"] = sum(parts.values())
    parts["apply"] = t["ps"][0]["apply"] / n
    runs.append(parts)
med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
spread = (min(r["step"] for r in runs), max(r["step"] for r in runs))
cmd = ["python3", top + "/bench/scaling_model.py", "predict", "--model", model, "--ps", "1",
       "--batch", batch, "--workers", "2", "--compute-ms", "%.3f" % (1e3 * med["compute"]),
       "--apply-ms", "%.3f" % (1e3 * med["apply"]), "--bw-ps", "%.4f" % B,
       "--bw-gbit", "%.4f" % max(B, 1.0), "--lat-us", "%.1f" % lat, "--msg-us", "%.2f" % msg, "--root-on-ps-host",
       "--pstrain", top + "/build/pstrain"]
pred = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
last = pred.strip().splitlines()[-1].split()
T = float(last[2])
print("link: %.3f Gbit/s payload (bench_rma, 2 origins, 1 MiB), round trip %.0f us, %.1f us per "
      "pipelined message" % (B, lat, msg))
print("measured, median of %s runs (ms per step): step %.1f [%.1f-%.1f]  wait_data %.1f  pull %.1f"
      "  compute %.1f  push %.1f  wait_version %.1f  (PS apply %.1f)" % (
          rounds, 1e3 * med["step"], 1e3 * spread[0], 1e3 * spread[1], 1e3 * med["wait_data"],
          1e3 * med["pull"], 1e3 * med["compute"], 1e3 * med["push"], 1e3 * med["wait_version"],
          1e3 * med["apply"]))
print("predicted: step %.1f ms  (pull %s, push %s, apply %s, take %s, latency %s)  -> "
      "measured/predicted %.2f" % (T, last[4], last[5], last[6], last[7], last[8],
                                    1e3 * med["step"] / T))
EOF
done
