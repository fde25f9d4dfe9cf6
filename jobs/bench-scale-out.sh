#!/usr/bin/env bash
# bench-scale-out.sh - the scale-out series on one host (docs/scaling.md,
# "The scale-out series"): pstrain trained under the MPI launcher with W
# workers for each W of WORKERS, F feeder ranks (`--feeders F`) for each F of
# FEEDERS, each PS layout of LAYOUTS (classic `--ps P`, colocated
# `--ps-per-node P`: on one host the same P parameter servers), in each mode
# of MODES; one table per model and mode: rows W, per (F, layout) the
# images/s, the efficiency images/s / (W x the W=1 images/s of that column),
# and for sync the efficiency bench/scaling_model.py predicts.
#
#   bash jobs/bench-scale-out.sh
#   MODELS=lenet5 WORKERS="1 2 4 8" MODES=sync ROUNDS=5 bash jobs/bench-scale-out.sh
#
# Knobs (environment); the defaults depend on the cores (nproc):
#   MODELS     models, trained on Fashion-MNIST 28x28x1 (lenet5 resnet-20)
#   WORKERS    worker counts; 1 is added when missing, it is every column's
#              base (>= 16 cores: "1 2 4 8 13 14"; fewer: "1 2")
#   FEEDERS    feeder counts F (1 2): the root and F-1 feeder ranks
#   LAYOUTS    classic colocated
#   PS         parameter servers P (1)
#   MODES      sync async
#   STEPS      steps per worker (sync: --steps STEPS; async: --steps
#              STEPS x W, the batches of all workers); default per model:
#              lenet5 1000, the others (resnet-20) 100 (fewer cores: 100
#              and 10)
#   BATCH      batch per worker (64)
#   ROUNDS     rounds over every configuration, the order reversed every
#              other round; each cell is the median over them, with the
#              range (>= 16 cores: 3; fewer: 1)
#   PREP_THREADS  the root's and each feeder's --prep-threads (1)
#   OVERSUBSCRIBE 1: run configurations with more ranks (1 + P + F-1 + W)
#              than cores; 0: skip them with a line saying so (>= 16 cores:
#              0; fewer: 1, and every number is then CPU contention)
#   BW_GBIT, LAT_US, MSG_US  the link of the prediction; when all three are
#              not given, bench/bench_rma measures it once on this host
#              (target and 2 origins, as jobs/bench-rma.sh WHERE=local:
#              payload Gbit/s of 1 MiB gets and puts from 2 origins, the
#              8-byte fetch-and-op round trip, the per-message cost)
#   RUN_TIMEOUT   seconds one training run may take (600)
#   OUT, BUILD_DIR, MPIEXEC_ARGS (e.g. "--bind-to core"): as the other
#              jobs/bench-*.sh and jobs/mpiexec.sh
#
# Each run: --threads 1, momentum, lr 0.01, --quiet, --summary-json; its
# images/s is the summary's images_per_sec (this run's examples over the
# root's serving time: not the start-up, not the final evaluation). The
# prediction (sync only: the model is of lockstep steps) is `scaling_model.py
# predict` with the compute per step (timing.workers compute / steps) of the
# column's W=1 run, the PS memory bandwidth that its apply time per step
# implies (apply = 4 M_ps / B_mem at W=1), and the link above; the predicted
# efficiency is T_step(1) / T_step(W). After each sync table: whether the
# efficiency at the largest W of each column reaches 0.90. When the summaries
# have data.feeders[{rank, batches, prepared, source_wait}], each cell's
# median run's source_wait per feeder as a share of its train_seconds.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
. jobs/mpiexec.sh
cores=$(nproc)
if [ "$cores" -ge 16 ]; then
    workers=${WORKERS:-1 2 4 8 13 14} rounds=${ROUNDS:-3} oversub=${OVERSUBSCRIBE:-0}
    lenet5_steps=1000 resnet_steps=100
else
    workers=${WORKERS:-1 2} rounds=${ROUNDS:-1} oversub=${OVERSUBSCRIBE:-1}
    lenet5_steps=100 resnet_steps=10
fi
models=${MODELS:-lenet5 resnet-20}
feeders=${FEEDERS:-1 2}
layouts=${LAYOUTS:-classic colocated}
P=${PS:-1}
modes=${MODES:-sync async}
batch=${BATCH:-64}
prep=${PREP_THREADS:-1}
run_timeout=${RUN_TIMEOUT:-600}
count() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$bench_name: $1=$2: expected a count >= 1" >&2; exit 2; }; }
count ROUNDS "$rounds"
count PS "$P"
count BATCH "$batch"
count PREP_THREADS "$prep"
[ -z "${STEPS:-}" ] || count STEPS "$STEPS"
for w in $workers; do count WORKERS "$w"; done
for f in $feeders; do count FEEDERS "$f"; done
for l in $layouts; do
    case $l in classic | colocated) ;; *) echo "$bench_name: LAYOUTS: $l: expected classic or colocated" >&2; exit 2 ;; esac
done
for m in $modes; do
    case $m in sync | async) ;; *) echo "$bench_name: MODES: $m: expected sync or async" >&2; exit 2 ;; esac
done
case " $workers " in *" 1 "*) ;; *) workers="1 $workers" ;; esac
# shellcheck disable=SC2086 # a list of counts
workers=$(printf '%s\n' $workers | sort -nu | tr '\n' ' ')

# the columns (F:layout) and the configurations (F:layout:W) that run
columns=() configs=()
for f in $feeders; do
    for l in $layouts; do
        columns+=("$f:$l")
        for w in $workers; do
            n=$((1 + P + f - 1 + w))
            if [ "$n" -gt "$cores" ] && [ "$oversub" != 1 ]; then
                echo "skip F=$f $l W=$w: $n ranks on $cores cores (OVERSUBSCRIBE=1 runs it)"
                continue
            fi
            configs+=("$f:$l:$w")
        done
    done
done
[ ${#configs[@]} -gt 0 ] || { echo "$bench_name: no configuration fits $cores cores" >&2; exit 1; }

bench_out out/bench-scale-out
bench_build -Dbuildtype=release -- pstrain data-tools/pstrain-prep bench/bench_rma
pstrain=$build/pstrain
data=$out/fashion-mnist.h5
bench_fashion_h5 "$build/data-tools/pstrain-prep" "$data"

# the link of the prediction
if [ -n "${BW_GBIT:-}" ] && [ -n "${LAT_US:-}" ] && [ -n "${MSG_US:-}" ]; then
    link="$BW_GBIT $LAT_US $MSG_US given"
else
    "${MPIEXEC_CMD[@]}" -n 3 "$build/bench/bench_rma" --min 1M --max 1M --reps 3 --lat-reps 500 \
        >"$out/rma.txt" 2>&1 || { tail -3 "$out/rma.txt"; echo "$bench_name: bench_rma failed" >&2; exit 1; }
    link="$(python3 -c 'import sys; sys.path.insert(0, "bench"); import scaling_model as s
print(*s.read_rma(sys.argv[1]))' "$out/rma.txt") bench_rma"
fi

steps_of() { # model: steps per worker
    if [ -n "${STEPS:-}" ]; then echo "$STEPS"
    elif [ "$1" = lenet5 ]; then echo "$lenet5_steps"
    else echo "$resnet_steps"; fi
}

failed=0
run_one() { # model mode F layout W round
    local model=$1 mode=$2 f=$3 layout=$4 w=$5 r=$6 steps base args
    base=$out/$model-$mode-F$f-$layout-W$w
    steps=$(steps_of "$model")
    [ "$mode" = async ] && steps=$((steps * w))
    args=(--data "$data" --model "$model" --batch "$batch" --mode "$mode" --steps "$steps"
        --optimizer momentum --lr 0.01 --threads 1 --prep-threads "$prep" --quiet
        --summary-json "$base-r$r.json")
    if [ "$layout" = classic ]; then args+=(--ps "$P"); else args+=(--ps-per-node "$P"); fi
    [ "$f" -gt 1 ] && args+=(--feeders "$f")
    rm -f "$base-r$r.json"
    if ! timeout -k 10 "$run_timeout" "${MPIEXEC_CMD[@]}" -n $((1 + P + f - 1 + w)) \
        "$pstrain" train "${args[@]}" >"$base-r$r.log" 2>&1; then
        echo "$bench_name: $model $mode F=$f $layout W=$w round $r failed: $(tail -1 "$base-r$r.log")" >&2
        failed=1
    fi
}

echo "== scale-out series: $cores cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $MPI_FLAVOUR;" \
    "P=$P, batch $batch per worker, $rounds round(s), workers: $workers"
[ "$cores" -ge 16 ] || echo "   (fewer than 16 cores: a smoke series; ranks share cores, so the numbers are CPU contention, not scaling)"
for ((r = 1; r <= rounds; r++)); do
    order=("${configs[@]}")
    if ((r % 2 == 0)); then
        order=()
        for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[$i]}"); done
    fi
    for model in $models; do
        for mode in $modes; do
            for c in "${order[@]}"; do
                IFS=: read -r f layout w <<<"$c"
                run_one "$model" "$mode" "$f" "$layout" "$w" "$r"
            done
        done
    done
    echo "round $r done"
done

python3 - "$out" "$pstrain" "$P" "$batch" "$rounds" "$link" "$models" "$modes" "$workers" \
    "${columns[@]}" <<'EOF'
import json, os, statistics, subprocess, sys
sys.path.insert(0, "bench")
import scaling_model as sm

out, pstrain, P, batch, rounds, link, models, modes, workers = sys.argv[1:10]
P, batch, rounds = int(P), int(batch), int(rounds)
columns = [tuple(c.split(":")) for c in sys.argv[10:]]
workers = [int(w) for w in workers.split()]
bw, lat, msg, link_src = link.split()
print("link of the prediction (%s): %s Gbit/s, round trip %s us, %s us per pipelined message"
      % (link_src, bw, lat, msg))

def runs(model, mode, f, layout, w):
    """The cell's summaries (over the rounds), by images/s."""
    rs = []
    for r in range(1, rounds + 1):
        path = "%s/%s-%s-F%s-%s-W%d-r%d.json" % (out, model, mode, f, layout, w, r)
        if os.path.exists(path):
            rs.append(json.load(open(path)))
    return sorted(rs, key=lambda s: s["images_per_sec"])

def predicted(model, base):
    """T_step(1) / T_step(W) from scaling_model.py predict, with the W=1
    run's compute and apply per step."""
    n = base["steps"]
    compute_ms = 1e3 * base["timing"]["workers"][0]["compute"] / n
    apply_s = max(p["apply"] for p in base["timing"]["ps"]) / n
    args = ["--compute-ms", "%.4f" % compute_ms]
    if apply_s > 0:
        mem = 4 * sm.plan(pstrain, model, P)["max_bytes"] / apply_s / 1e9
        args += ["--mem-gbs", "%.4f" % mem]
    cmd = [sys.executable, "bench/scaling_model.py", "predict", "--model", model, "--ps", str(P),
           "--batch", str(batch), "--bw-gbit", bw, "--lat-us", lat, "--msg-us", msg,
           "--workers", ",".join(map(str, workers)), "--pstrain", pstrain] + args
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("bench-scale-out: %s: %s" % (" ".join(cmd), res.stderr.strip()))
    T = {}
    for line in res.stdout.splitlines():
        f = line.split()
        if len(f) >= 3 and f[1].isdigit():
            T[int(f[1])] = float(f[2])
    return {w: T[1] / T[w] for w in T}, " ".join(args)

for model in models.split():
    for mode in modes.split():
        print("\n== %s, %s: images/s (median [range] of %d), efficiency = images/s / (W x W=1), "
              "model: predicted efficiency" % (model, mode, rounds))
        head, cells, notes, waits = ["W"], {}, [], []
        for f, layout in columns:
            head += ["F=%s %s" % (f, layout), "eff", "model"]
            base = runs(model, mode, f, layout, 1)
            base_rate = statistics.median(s["images_per_sec"] for s in base) if base else None
            pred = {}
            if mode == "sync" and base:
                pred, how = predicted(model, base[(len(base) - 1) // 2])
                notes.append("F=%s %s: predict %s" % (f, layout, how))
            col = {}
            for w in workers:
                rs = runs(model, mode, f, layout, w)
                if not rs:
                    col[w] = ("-", "-", "-", None)
                    continue
                rates = [s["images_per_sec"] for s in rs]
                rate = statistics.median(rates)
                spread = " [%.0f-%.0f]" % (rates[0], rates[-1]) if len(rs) > 1 else ""
                eff = rate / (w * base_rate) if base_rate else None
                col[w] = ("%.0f%s" % (rate, spread), "%.2f" % eff if eff is not None else "n/a",
                          "%.2f" % pred[w] if w in pred else "-", eff)
                med = rs[(len(rs) - 1) // 2]
                fd = med.get("data", {}).get("feeders")
                if isinstance(fd, list) and fd and med.get("train_seconds"):
                    waits.append("W=%d F=%s %s: " % (w, f, layout) + ", ".join(
                        "rank %s %.0f%%" % (x.get("rank", "?"),
                                            100 * x.get("source_wait", 0) / med["train_seconds"])
                        for x in fd))
            cells[(f, layout)] = col
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for w in workers:
            row = [str(w)]
            for c in columns:
                row += list(cells[c][w][:3])
            print("| " + " | ".join(row) + " |")
        for n in notes:
            print(n)
        if mode == "sync":
            for (f, layout), col in cells.items():
                done = [w for w in workers if col[w][3] is not None]
                if done:
                    w = done[-1]
                    e = col[w][3]
                    print("goal, F=%s %s: efficiency %.2f at W=%d, %s 0.90" % (
                        f, layout, e, w, "meets" if e >= 0.9 else "below"))
        if waits:
            print("source_wait / train_seconds per feeder (data.feeders, median run):")
            for x in waits:
                print("  " + x)
        else:
            print("data.feeders: not in these summaries")
EOF
exit $failed
