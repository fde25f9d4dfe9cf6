#!/usr/bin/env bash
# Passive-target progress: pstrain under MPICH with its default progress and
# with MPIR_CVAR_ASYNC_PROGRESS=1, and under Open MPI as the reference
# (prints numbers; not a timed test). docs/platform.md, "MPICH 4.0.2".
#
#  1. bench_dist target: rank 1 makes fetch-and-ops on rank 0's window while
#     rank 0 serves like pstrain's loops (back-off up to 1000 us: the root;
#     250 us: a sync PS) or computes 20 ms at a time without MPI calls (a PS
#     applying a large update, the root evaluating): latency median, p90, max,
#     and the target's CPU share.
#  2. Training, 1 PS, 2 workers (4 ranks):
#     sync   LeNet-5 on Fashion-MNIST (--limit LIMIT), batch 64, momentum;
#     async  the same, async plain SGD: workers accumulate into the PS window
#            and the PS only serves progress (dist_test.sh's `idle` case);
#     r20    resnet-20, sync, 2 PS (5 ranks), batch 16, STEPS steps on
#            32x32x3 data from test_dist mkdata (a PS with a larger update).
#     Per configuration: images/s, ms per step, the workers' mean time per
#     step waiting for data / pulling / pushing / waiting for the version, the
#     PS's apply and idle time, PS and root CPU over the training time, and
#     the CPU seconds of the whole job (user + sys, all ranks and threads).
#
# Every configuration runs ROUNDS times, alternating; medians and [min-max].
#
#   bash jobs/bench-progress.sh [ROUNDS]       (default 3)
#   OMPI_BUILD_DIR=build MPICH_BUILD_DIR=build-mpich LIMIT=12800 STEPS=12 \
#     OUT=out/bench-progress bash jobs/bench-progress.sh 5
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
bench_out out/bench-progress
rounds=${1:-3}
limit=${LIMIT:-12800}
steps=${STEPS:-12}
ompi=${OMPI_BUILD_DIR:-build}
mpich=${MPICH_BUILD_DIR:-build-mpich}
targets=(pstrain data-tools/pstrain-prep bench/bench_dist test/dist/test_dist)
build=$ompi bench_build -Dmpi=openmpi -- "${targets[@]}"
build=$mpich bench_build -Dmpi=mpich -- "${targets[@]}"

data=$out/fashion-mnist.h5
bench_fashion_h5 "$ompi/data-tools/pstrain-prep" "$data"
c3=$out/c3-32.h5
[ -f "$c3" ] || "$ompi/test/dist/test_dist" mkdata "$c3" 1024 64 32 32 3 10 >/dev/null

# launcher CONFIG: the launcher command for a configuration, in MPIEXEC_CMD
configs=(ompi mpich mpich-async)
launcher() {
    unset MPI_FLAVOUR
    case $1 in
    ompi) MPIEXEC=mpirun dir=$ompi async=0 ;;
    mpich) MPIEXEC=mpiexec.mpich dir=$mpich async=0 ;;
    mpich-async) MPIEXEC=mpiexec.mpich dir=$mpich async=1 ;;
    esac
    source "$top/jobs/mpiexec.sh"
}

# run CONFIG NAME NP PROGRAM-AND-ARGS...: CPU of the whole job in NAME.time
run() {
    local cfg=$1 name=$2 np=$3
    shift 3
    launcher "$cfg"
    MPIR_CVAR_ASYNC_PROGRESS=$async /usr/bin/time -f '%U %S %e' -o "$out/$name.time" \
        "${MPIEXEC_CMD[@]}" -n "$np" "$@"
}

echo "== $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$rounds rounds, LIMIT=$limit STEPS=$steps"
common=(--model lenet5 --data "$data" --limit "$limit" --batch 64 --ps 1 --quiet)
for r in $(seq "$rounds"); do
    for cfg in "${configs[@]}"; do
        launcher "$cfg"
        b=$dir/bench/bench_dist
        {
            run "$cfg" "$cfg-tgt1000-$r" 2 "$b" target --max-us 1000 --iters 1000
            run "$cfg" "$cfg-tgt250-$r" 2 "$b" target --max-us 250 --iters 1000
            run "$cfg" "$cfg-busy-$r" 2 "$b" target --busy-ms 20 --iters 100
        } >"$out/$cfg-target-$r.txt"
        run "$cfg" "$cfg-sync-$r" 4 "$dir/pstrain" train "${common[@]}" --mode sync \
            --optimizer momentum --lr 0.01 --summary-json "$out/$cfg-sync-$r.json" >/dev/null
        run "$cfg" "$cfg-async-$r" 4 "$dir/pstrain" train "${common[@]}" --mode async \
            --optimizer sgd --lr 0.05 --summary-json "$out/$cfg-async-$r.json" >/dev/null
        run "$cfg" "$cfg-r20-$r" 5 "$dir/pstrain" train --model resnet-20 --data "$c3" --batch 16 \
            --ps 2 --steps "$steps" --mode sync --optimizer momentum --lr 0.01 --quiet \
            --summary-json "$out/$cfg-r20-$r.json" >/dev/null
    done
    echo "round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done

python3 - "$out" "$rounds" "${configs[@]}" <<'EOF'
import json, re, statistics, sys
out, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def fmt(xs, f="%.1f"):
    xs = sorted(xs)
    return (f % statistics.median(xs)) + " [" + (f % xs[0]) + "-" + (f % xs[-1]) + "]"
print("\n1. fetch-and-op latency on a passive target (us), target CPU share; median [min-max]")
print("%-12s %-24s %-24s %-24s %s" % ("config", "back-off<=1000us median", "p90", "max", "target CPU %"))
for kind, label in [("tgt1000", "back-off 10-1000 us"), ("tgt250", "back-off 10-250 us"),
                    ("busy", "busy 20 ms, no MPI")]:
    print(" " + label)
    for c in configs:
        med, p90, mx, cpu = [], [], [], []
        for r in range(1, rounds + 1):
            txt = open("%s/%s-target-%d.txt" % (out, c, r)).read()
            blocks = txt.split("target: ")[1:]
            b = blocks[["tgt1000", "tgt250", "busy"].index(kind)]
            m = re.search(r"median ([\d.]+) us, p90 ([\d.]+) us, max ([\d.]+) us; target CPU "
                          r"[\d.]+ s of [\d.]+ s wall \((\d+)%\)", b)
            med.append(float(m[1])); p90.append(float(m[2])); mx.append(float(m[3]))
            cpu.append(float(m[4]))
        print("%-12s %-24s %-24s %-24s %s" % (c, fmt(med), fmt(p90), fmt(mx, "%.0f"), fmt(cpu, "%.0f")))

print("\n2. training (medians [min-max] over %d rounds)" % rounds)
for scen in ["sync", "async", "r20"]:
    print(" " + {"sync": "lenet5 sync, 1 PS, 2 workers", "async": "lenet5 async SGD, 1 PS, 2 workers",
                 "r20": "resnet-20 sync, 2 PS, 2 workers, batch 16"}[scen])
    print("%-12s %-20s %-20s %-44s %-26s %-22s %s" % (
        "config", "images/s", "ms/step", "worker ms/step: data pull push wait_version",
        "PS apply/idle s", "PS, root CPU %", "job CPU s / wall s"))
    for c in configs:
        ips, ms, wk, ps, cpu, job = [], [], [], [], [], []
        for r in range(1, rounds + 1):
            j = json.load(open("%s/%s-%s-%d.json" % (out, c, scen, r)))
            ips.append(j["images_per_sec"])
            ms.append(1e3 * j["train_seconds"] / j["steps"])
            t = j["timing"]
            ws = t["workers"]
            nb = j["steps"] * (1 if scen == "async" else len(ws))  # batches
            wk.append([1e3 * sum(w[k] for w in ws) / nb
                       for k in ["wait_data", "pull", "push", "wait_version"]])
            ps.append([sum(p["apply"] for p in t["ps"]), sum(p["idle"] for p in t["ps"])])
            cpu.append([100 * max(p["cpu"] for p in t["ps"]) / j["train_seconds"],
                        100 * t["root_cpu"] / j["train_seconds"]])
            u, s_, e = map(float, open("%s/%s-%s-%d.time" % (out, c, scen, r)).read().split()[-3:])
            job.append([u + s_, e])
        col = lambda rows, i: [x[i] for x in rows]
        print("%-12s %-20s %-20s %-44s %-26s %-22s %s" % (
            c, fmt(ips, "%.0f"), fmt(ms),
            " ".join("%.2f" % statistics.median(col(wk, i)) for i in range(4)),
            "%.2f / %.2f" % (statistics.median(col(ps, 0)), statistics.median(col(ps, 1))),
            "%.0f, %.0f" % (statistics.median(col(cpu, 0)), statistics.median(col(cpu, 1))),
            "%.1f / %.1f" % (statistics.median(col(job, 0)), statistics.median(col(job, 1)))))
EOF
