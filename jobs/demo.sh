#!/usr/bin/env bash
# The README's main job, on one machine: install what is missing, build,
# prepare Fashion-MNIST as HDF5, train LeNet-5 under the MPI launcher (rank 0 root,
# 1 parameter server, 2 workers), evaluate, and plot the metrics.
#
#   bash jobs/demo.sh                 # everything, output in out/demo/
#   EPOCHS=3 MODE=async bash jobs/demo.sh
#   bash PREFIX/share/pstrain/jobs/demo.sh   # installed: the installed programs,
#                                            # output in ./out/demo/
set -euo pipefail
jobs=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$jobs/.." && pwd)

EPOCHS=${EPOCHS:-2}
MODEL=${MODEL:-lenet5}
MODE=${MODE:-sync}
WORKERS=${WORKERS:-2}
PS=${PS:-1}
OUT=${OUT:-out/demo}

if [ -f "$top/meson.build" ]; then
    # the source tree: install what is missing, build, run from the build
    cd "$top"
    bash jobs/install-deps.sh
    build=${BUILD_DIR:-build}
    [ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
    ninja -C "$build" pstrain data-tools/pstrain-prep >/dev/null
    PSTRAIN=$build/pstrain
    PREP=$build/data-tools/pstrain-prep
else
    # an installation, PREFIX/share/pstrain/jobs: the programs of PREFIX/bin
    bin=$(cd "$top/../.." && pwd)/bin
    PSTRAIN=$bin/pstrain
    PREP=$bin/pstrain-prep
    [ -x "$PSTRAIN" ] || PSTRAIN=$(command -v pstrain)
    [ -x "$PREP" ] || PREP=$(command -v pstrain-prep)
fi
mkdir -p "$OUT"
"$PSTRAIN" --version
. "$jobs/mpiexec.sh" # MPIEXEC_CMD: the launcher of the MPI pstrain was built with

fm=/usr/share/datasets/fashion-mnist
echo "== 1. prepare Fashion-MNIST -> $OUT/fashion-mnist.h5"
"$PREP" idx --force \
    --train-images $fm/train-images-idx3-ubyte.gz --train-labels $fm/train-labels-idx1-ubyte.gz \
    --test-images $fm/t10k-images-idx3-ubyte.gz --test-labels $fm/t10k-labels-idx1-ubyte.gz \
    --classes "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot" \
    -o "$OUT/fashion-mnist.h5"
"$PREP" verify "$OUT/fashion-mnist.h5"
"$PREP" info "$OUT/fashion-mnist.h5"
"$PREP" preview "$OUT/fashion-mnist.h5" --count 64 -o "$OUT/preview.png"

ranks=$((1 + PS + WORKERS))
echo "== 2. train $MODEL, $MODE, with $(basename "$MPIEXEC") -n $ranks (root, $PS PS, $WORKERS workers)"
"$PSTRAIN" plan --model "$MODEL" --ps "$PS"
"${MPIEXEC_CMD[@]}" -n "$ranks" "$PSTRAIN" train --data "$OUT/fashion-mnist.h5" \
    --model "$MODEL" --ps "$PS" --mode "$MODE" --epochs "$EPOCHS" --batch 64 \
    --optimizer momentum --lr 0.01 --checkpoint-dir "$OUT/ckpt" --log-every 0.25 \
    --metrics "$OUT/metrics.jsonl" --summary-json "$OUT/summary.json"

echo "== 3. evaluate the final checkpoint"
"$PSTRAIN" eval --data "$OUT/fashion-mnist.h5" --checkpoint "$OUT/ckpt/latest" \
    --summary-json "$OUT/eval.json"

echo "== 4. plot"
bash "$jobs/plot-metrics" "$OUT/metrics.jsonl" "$OUT"
echo "demo done: $OUT/summary.json, $OUT/eval.json, $OUT/preview.png, $OUT/*.png"
