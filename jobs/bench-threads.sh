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
#
# Each line of CONFIGS is "model HxWxC classes batch warmup steps" (steps per
# thread count). Prints bench_model's lines per configuration and a summary
# line each: the ratios of median and of best step times and the per-round
# ratios' median and quartiles.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
export BLIS_NUM_THREADS=1 OMP_NUM_THREADS=1
bench_build -Dbuildtype=release -- test/nn/bench_model
bench=$build/test/nn/bench_model
threads=${THREADS:-1,2}
read -r -a chrt <<<"${CHRT:-}"
CONFIGS=${CONFIGS:-"resnet-20 28x28x1 10 64 20 300
inception-mini 28x28x1 10 64 40 600
resnet-50 224x224x3 1000 8 3 30"}

while read -r model size classes batch warmup steps; do
    [ -n "$model" ] || continue
    res=$("${chrt[@]}" "$bench" --compare-threads "$threads" --batch "$batch" --size "$size" \
        --classes "$classes" --warmup "$warmup" --steps "$steps" "$model")
    printf '%s\n' "$res"
    printf '%s\n' "$res" | awk -v m="$model" -v s="$size" -v b="$batch" '
        /^  speedup/ { sub(":", "", $6)
                       printf "SPEEDUP %s %s batch %s: threads %s/%s median/median %s, best/best %s, per-round median %s (q1 %s, q3 %s)\n",
                       m, s, b, $3, $6, $8, $10, $18, $16, $20 }'
done <<<"$CONFIGS"
