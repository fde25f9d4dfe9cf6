#!/usr/bin/env bash
# resnet-20, one epoch of Fashion-MNIST with pstrain's defaults (batch 64,
# momentum 0.9, lr 0.01), reaches PyTorch's test accuracy for the same model
# and settings within 0.01 (issue 9): the mean over pstrain seeds SEEDS
# against the mean over the peer's seeds. Suite slow: two 1-epoch runs at
# once (seed 1234 on 2 threads, seed 1 on 1; the result does not depend on
# the thread count), about 4 minutes of CPU and 2-3 minutes on 2 idle cores.
#
# The peer numbers are PyTorch 1.13 (Debian) running
# test/torch/peer_resnet20.py, which trains the same network
# (test/torch/torch_ref.py resnet_cifar, the module tree pstrain's variable
# names follow) from the same initial distributions (PyTorch's defaults,
# which pstrain's resnet-20 draws too: docs/torchvision.md, Initial weights),
# batch-norm eps 1e-3 and decay 0.99, SGD momentum 0.9, lr 0.01, batch 64,
# the same normalisation, one epoch; measured 2026-12-01 on the shared
# 2-core machine with
#   for s in 1 2; do
#     OMP_NUM_THREADS=1 /usr/bin/python3 test/torch/peer_resnet20.py --seed $s; done
# PEER_RUNS below; PEER_ACC is their mean. One epoch from this initialisation
# is noisy: the runs of either side spread over several hundredths (pstrain
# seeds 1234 / 1: 0.7858 / 0.8604), so the check compares means
# and is only as sharp as the seeds allow. That the training arithmetic
# itself matches PyTorch's is checked step by step by the torch suite
# (torch-trainstep-resnet-20).
. "$(dirname "$0")/lib.sh"
need_fm

PEER_RUNS="seed 1 0.8136, seed 2 0.8227"
PEER_ACC=0.8182
TOL=0.01
SEEDS="1234 1"

say "resnet-20, 1 epoch, seeds $SEEDS (seed 1234 with --threads 2)"
train "$tmp/1234.log" --data "$FM" --model resnet-20 --epochs 1 --seed 1234 --threads 2 \
    --summary-json "$tmp/1234.json" --quiet &
pid=$!
train "$tmp/1.log" --data "$FM" --model resnet-20 --epochs 1 --seed 1 --threads 1 \
    --summary-json "$tmp/1.json" --quiet || bad "seed 1: training failed"
wait $pid || bad "seed 1234: training failed"
[ "$fail" = 0 ] || finish
for s in $SEEDS; do say "seed $s: $(tail -1 "$tmp/$s.log")"; done
acc=$(python3 -c 'import json, sys
v = [json.load(open("%s/%s.json" % (sys.argv[1], s)))["test_accuracy"] for s in sys.argv[2].split()]
print("%.4f" % (sum(v) / len(v)))' "$tmp" "$SEEDS")
say "pstrain mean test accuracy $acc; PyTorch $PEER_ACC (mean of $PEER_RUNS); tolerance $TOL"
check "mean test accuracy $acc within $TOL of PyTorch's $PEER_ACC" \
    awk -v a="$acc" -v p="$PEER_ACC" -v t="$TOL" 'BEGIN { d = a - p; exit !(d <= t && -d <= t) }'
finish
