#!/usr/bin/env bash
# Distributed-training benchmark (prints numbers; not a timed test).
#
#  1. LeNet-5 on Fashion-MNIST, EPOCHS epoch(s), batch 64 per worker, momentum:
#     one process (`pstrain train`) vs 4 ranks under the MPI launcher (root, 1 PS, 2 workers)
#     in sync and in async mode (plain SGD: accumulate straight into the PS
#     window). images/s (from --summary-json, training time only) and the
#     ratio to one process; then each worker's time breakdown (waiting for
#     data, pull, compute, push, waiting for the version) and the PS's apply
#     and idle time, with pull+push as a share of a worker's step.
#  2. Pull/push bandwidth of a ~10M-parameter MLP (114x114x3 input,
#     partitioned over the PS) by MPI_Get/MPI_Put vs memcpy (bench_dist pull).
#  3. The root's batch ring with workers that only consume (bench_dist ring):
#     synthetic source and the real pipeline, vs what training workers need.
#
# With as many busy ranks as cores, scaling numbers show the machine, not the
# protocol: on a 2-core machine 2 workers + root + PS share 2 cores.
#
# Each configuration runs ROUNDS times, alternating, and the median images/s
# is reported (other load on a shared machine moves single runs a lot).
#
#   bash jobs/bench-dist.sh [ROUNDS]        (default 3; EPOCHS=1)
#   BUILD_DIR=build-x OUT=out/bench-dist EPOCHS=2 bash jobs/bench-dist.sh 5
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
bench_out out/bench-dist
epochs=${EPOCHS:-1}
rounds=${1:-3}

bench_build -- pstrain data-tools/pstrain-prep bench/bench_dist
pstrain=$build/pstrain
bench=$build/bench/bench_dist
PSTRAIN=$pstrain
# shellcheck source=mpiexec.sh
source "$top/jobs/mpiexec.sh" # the launcher of the MPI the build uses
mpirun=("${MPIEXEC_CMD[@]}")

data=$out/fashion-mnist.h5
bench_fashion_h5 "$build/data-tools/pstrain-prep" "$data"

echo "== 1. lenet5, Fashion-MNIST, $epochs epoch(s), batch 64 per worker, $(nproc) cores, median of $rounds"
common=(--data "$data" --model lenet5 --epochs "$epochs" --batch 64 --quiet)
for r in $(seq "$rounds"); do
    "$pstrain" train "${common[@]}" --optimizer momentum --lr 0.01 \
        --summary-json "$out/single-$r.json" >/dev/null
    "${mpirun[@]}" -n 4 "$pstrain" train "${common[@]}" --ps 1 --mode sync --optimizer momentum \
        --lr 0.01 --summary-json "$out/sync-$r.json" >/dev/null
    "${mpirun[@]}" -n 4 "$pstrain" train "${common[@]}" --ps 1 --mode async --optimizer sgd \
        --lr 0.05 --summary-json "$out/async-$r.json" >/dev/null
done
python3 - "$out" "$rounds" <<'EOF'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    runs = [json.load(open("%s/%s-%d.json" % (out, name, r + 1))) for r in range(rounds)]
    runs.sort(key=lambda r: r["images_per_sec"])
    return runs[len(runs) // 2], [r["images_per_sec"] for r in runs]
runs = [("single",) + load("single"), ("sync, 2 workers",) + load("sync"),
        ("async, 2 workers",) + load("async")]
base = runs[0][1]["images_per_sec"]
print("%-18s %10s %7s %9s %9s  %s" % ("run", "images/s", "ratio", "test acc", "train s", "all rounds"))
for name, r, allr in runs:
    print("%-18s %10.0f %6.2fx %9.4f %9.2f  %s" % (name, r["images_per_sec"], r["images_per_sec"] / base,
          r.get("test_accuracy", float("nan")), r["train_seconds"], " ".join("%.0f" % x for x in allr)))
for name, r, _ in runs[1:]:
    t = r.get("timing", {})
    print("timing breakdown, %s, median run (seconds over the run):" % name)
    for i, w in enumerate(t.get("workers", [])):
        step = sum(w.values())
        comm = w["pull"] + w["push"]
        print("  worker %d: wait_data %.3f pull %.3f compute %.3f push %.3f wait_version %.3f"
              "  -> pull+push %.1f%% of the step" % (i, w["wait_data"], w["pull"], w["compute"],
                                                      w["push"], w["wait_version"],
                                                      100 * comm / step if step else 0))
    for i, p in enumerate(t.get("ps", [])):
        print("  ps %d: apply %.3f idle %.3f" % (i + 1, p["apply"], p["idle"]))
EOF

echo "== 2. pull/push bandwidth, ~10M-parameter mlp"
"${mpirun[@]}" -n 3 "$bench" pull --ps 1
"${mpirun[@]}" -n 4 "$bench" pull --ps 2

echo "== 3. root batch ring, consume-only workers (lenet5 workers need the images/s above)"
"${mpirun[@]}" -n 3 "$bench" ring --seconds 3
"${mpirun[@]}" -n 3 "$bench" ring --seconds 3 --data "$data"
