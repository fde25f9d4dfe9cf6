#!/usr/bin/env bash
# bench-models.sh - images/s of one training step, pstrain's bench_model
# beside PyTorch's peer (torch_models.py: forward, loss, backward, SGD with
# momentum on random data; not part of this repository: PEER=path), run
# alternately so both see the same machine.
#
#   PEER=/path/to/torch_models.py bash jobs/bench-models.sh [ROUNDS]   (default 2)
#   CONFIGS="resnet-50 224x224x3 1000 32 2 3" PEER=... bash jobs/bench-models.sh
#
# Each line of CONFIGS below is "model HxWxC classes batch threads steps".
# PyTorch runs with OpenBLAS when Debian's libopenblas0-pthread is present
# (its strongest configuration here: oneDNN convolutions plus OpenBLAS).
# Prints one line per run and, per configuration, the best of the rounds.
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
rounds=${1:-2}
peer=${PEER:?set PEER to the path of torch_models.py}
export BLIS_NUM_THREADS=1 OMP_NUM_THREADS=1
bench_build -Dbuildtype=release -- bench/bench_model
bench=$build/bench/bench_model
openblas=/usr/lib/x86_64-linux-gnu/openblas-pthread
CONFIGS=${CONFIGS:-"inception-mini 28x28x1 10 64 1 40
resnet-20 28x28x1 10 64 1 20
resnet-50 224x224x3 1000 8 1 3
inception-v3 299x299x3 1000 8 1 3"}

while read -r model size classes batch threads steps; do
    [ -n "$model" ] || continue
    best_p=0 best_t=0
    for ((r = 0; r < rounds; r++)); do
        p=$("$bench" --steps "$steps" --warmup 2 --batch "$batch" \
            --size "$size" --classes "$classes" --threads "$threads" "$model" |
            sed -n "s/^$model .* step \([0-9.]*\) ms best.*/\1/p" | head -1 |
            awk -v b="$batch" '{ printf "%.2f", b / ($1 / 1000) }')
        t=$(LD_LIBRARY_PATH=$openblas OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$peer" \
            --model "$model" --size "$size" --classes "$classes" --batch "$batch" \
            --threads "$threads" --steps "$steps" |
            /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["best_images_per_sec"], 2))')
        echo "$model $size batch $batch threads $threads round $r: pstrain $p img/s, pytorch $t img/s"
        best_p=$(awk -v a="$best_p" -v b="$p" 'BEGIN { print (b > a ? b : a) }')
        best_t=$(awk -v a="$best_t" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
    done
    awk -v m="$model" -v s="$size" -v b="$batch" -v t="$threads" -v p="$best_p" -v q="$best_t" \
        'BEGIN { printf "BEST %s %s batch %s threads %s: pstrain %.1f img/s, pytorch %.1f img/s, ratio %.2f\n", m, s, b, t, p, q, p / q }'
done <<<"$CONFIGS"
