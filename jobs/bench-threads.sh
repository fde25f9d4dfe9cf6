#!/usr/bin/env bash
# bench-threads.sh - the speedup of T threads over one thread on one process
# (issue 9's goal (c): --threads 2 against --threads 1), measured in one
# process: bench_model --compare-threads builds one model per thread count
# and interleaves their steps (A B B A ...), so that the machine's drift of
# speed over minutes falls on both alike; separate runs' ratios are mostly
# that drift here. Also checks that every thread count gives the same bits
# (bench_model exits 1 when not).
#
#   bash jobs/bench-threads.sh                         (threads 1,2; the configurations below)
#   THREADS=1,2,3 CONFIGS="resnet-20 28x28x1 10 64 20 400" bash jobs/bench-threads.sh
#   CHRT="chrt -f 50" bash jobs/bench-threads.sh        (as root: other processes cannot take a core)
#   RUNS=12 GAP=300 CHRT="chrt -f 50" bash jobs/bench-threads.sh
#                                                      (a series: 12 runs, one every 5 minutes)
#
# Each line of CONFIGS is "model HxWxC classes batch warmup steps" (steps per
# thread count). Prints bench_model's lines per configuration and a summary
# line each: the ratios of median and of best step times and the per-round
# ratios' median and quartiles.
#
# A series (RUNS > 1) repeats all configurations RUNS times, starting a run
# every GAP seconds (0: back to back). A VM's speed for data crossing between
# cores can change for minutes at a time (docs/platform.md, "Two cores"), so one run's
# ratio says little; a series spread over an hour gives the distribution.
# Before each run, bench_peak's "share" test probes that state (a cache
# line's one-way hand-over between two CPUs, and the read rate of 512 KiB
# the other CPU just wrote), printed as a STATE line. At the end a SERIES
# line per configuration and thread count: the runs' median/median ratios
# (min, quartiles interpolated between runs, max), how many reach GOAL
# (default 1.85), and each run's ratio next to its probe.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
export BLIS_NUM_THREADS=1 OMP_NUM_THREADS=1
runs=${RUNS:-1}
gap=${GAP:-0}
goal=${GOAL:-1.85}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "$bench_name: RUNS=$runs: expected a count >= 1" >&2; exit 2; }
[[ $gap =~ ^[0-9]+$ ]] || { echo "$bench_name: GAP=$gap: expected seconds >= 0" >&2; exit 2; }
[[ $goal =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "$bench_name: GOAL=$goal: expected a ratio" >&2; exit 2; }
targets=(bench/bench_model)
[ "$runs" -gt 1 ] && targets+=(bench/bench_peak)
bench_build -Dbuildtype=release -- "${targets[@]}"
bench=$build/bench/bench_model
threads=${THREADS:-1,2}
read -r -a chrt <<<"${CHRT:-}"
CONFIGS=${CONFIGS:-"resnet-20 28x28x1 10 64 20 300
inception-mini 28x28x1 10 64 40 600
resnet-50 224x224x3 1000 8 3 30"}

# one run of every configuration; SPEEDUP lines tagged with the run number
one_run() { # run
    local model size classes batch warmup steps res
    while read -r model size classes batch warmup steps; do
        [ -n "$model" ] || continue
        res=$("${chrt[@]}" "$bench" --compare-threads "$threads" --batch "$batch" --size "$size" \
            --classes "$classes" --warmup "$warmup" --steps "$steps" "$model")
        printf '%s\n' "$res"
        printf '%s\n' "$res" | awk -v m="$model" -v s="$size" -v b="$batch" -v r="$1" -v n="$runs" '
            /^  speedup/ { sub(":", "", $6)
                           printf "SPEEDUP %s %s batch %s: threads %s/%s median/median %s, best/best %s, per-round median %s (q1 %s, q3 %s)%s\n",
                           m, s, b, $3, $6, $8, $10, $18, $16, $20, (n > 1 ? " run " r : "") }'
    done <<<"$CONFIGS"
}

# the state probe: "STATE run R: line N ns, cross-core read X GB/s (ratio Y)"
probe() { # run
    "${chrt[@]}" "$build/bench/bench_peak" --seconds 0.3 --rounds 3 share | awk -v r="$1" '
        /^share/ { for (i = 1; i <= NF; i++) {
                       if ($i == "back") x = $(i + 1)
                       if ($i == "(ratio") { y = $(i + 1); sub(/\).*/, "", y) }
                       if ($i == "ns") ns = $(i - 1) }
                   printf "STATE run %s: line %s ns, cross-core read %s GB/s (ratio %s)\n", r, ns, x, y }'
}

if [ "$runs" -eq 1 ]; then
    one_run 1
    exit 0
fi
log=$(mktemp "${TMPDIR:-/tmp}/bench-threads.XXXXXX")
trap 'rm -f "$log"' EXIT
start=$(date +%s)
for ((r = 1; r <= runs; r++)); do
    wait_s=$((start + (r - 1) * gap - $(date +%s)))
    [ "$wait_s" -gt 0 ] && sleep "$wait_s"
    echo "run $r of $runs at $(date -u +%H:%M:%S) UTC"
    { probe "$r"; one_run "$r"; } | tee -a "$log"
done
awk -v goal="$goal" -v runs="$runs" '
    function q(a, n, f,   h, i) { h = f * (n - 1) + 1; i = int(h); return i >= n ? a[n] : a[i] + (h - i) * (a[i + 1] - a[i]) }
    function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t } }
    /^STATE run/ { r = $3; sub(":", "", r); state[r] = $5 " ns" }
    /^SPEEDUP/ { key = $2 " " $3 " batch " $5 " threads " $7
                 if (!(key in n)) order[++nk] = key
                 v = $9; sub(",", "", v); val[key, ++n[key]] = v; per[key] = per[key] sprintf(" %s (%s)", v, state[$NF]) }
    END { for (k = 1; k <= nk; k++) { key = order[k]; m = n[key]; met = 0
              for (i = 1; i <= m; i++) { a[i] = val[key, i] + 0; if (a[i] >= goal) met++ }
              sort(a, m)
              printf "SERIES %s: median/median over %d runs: min %.3f q1 %.3f median %.3f q3 %.3f max %.3f; %d of %d >= %s\n",
                     key, m, a[1], q(a, m, 0.25), q(a, m, 0.5), q(a, m, 0.75), a[m], met, m, goal
              printf "SERIES %s: per run (state probe):%s\n", key, per[key] } }' "$log"
