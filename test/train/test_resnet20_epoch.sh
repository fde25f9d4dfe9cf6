#!/usr/bin/env bash
# resnet-20, one epoch of Fashion-MNIST against PyTorch's test accuracy for
# the same model and settings (issue 9 asks for 0.01). Suite slow: one 1-epoch
# run on 2 threads (the result does not depend on the thread count), about
# 1.5 minutes of CPU, about a minute on 2 idle cores (18 minutes at load 17).
#
# The settings: pstrain's defaults (batch 64, SGD momentum 0.9, lr 0.01, batch
# norm decay 0.99) with the rate cut to 0.001 for the last quarter of the
# epoch (--lr-decay 0.1 --lr-decay-epochs 0.75: staircase, updates 704-937 of
# 938). At the constant 0.01 one epoch is far too noisy for 0.01: the weights
# still move fast at the end, the batch-norm moving statistics (decay 0.99,
# about the last 100 steps) lag them, and single PyTorch runs spread from 0.72
# to 0.87 (seed 3: 0.723 with the moving statistics, 0.877 with statistics
# recomputed from the final weights). With the cut the statistics catch up
# (seed 3: 0.890 and 0.895) and single runs spread ten times less (SD 0.0056
# against 0.053), but still more than the issue's 0.01 allows: one run and the
# peer's mean differ by chance with a standard deviation of
# SD * sqrt(1 + 1/N_PEER) = 0.0063 (SD: the per-run standard deviation of
# the peer's runs; pstrain's one run, seed 1 0.8914, adds no degree of
# freedom), so a check at 0.01 would fail a correct pstrain about one run in
# nine. The check is |pstrain - PEER_ACC| <= max(0.01, 3 of those) = 0.0188:
# what one run can tell (a two-sided 0.3% false alarm), and no sharper.
#
# The peer numbers are PyTorch 1.13 (Debian) running
# test/torch/peer_resnet20.py, which trains the same network
# (test/torch/torch_ref.py resnet_cifar, the module tree pstrain's variable
# names follow) from the same initial distributions (PyTorch's defaults,
# which pstrain's resnet-20 draws too: docs/torchvision.md, Initial weights),
# batch-norm eps 1e-3 and decay 0.99, the same schedule (pstrain's lr_at),
# batch 64, the same normalisation, one epoch; measured 2026-12-01 on the
# shared 2-core machine with
#   for s in 1 2 3 4; do OMP_NUM_THREADS=1 /usr/bin/python3 \
#     test/torch/peer_resnet20.py --seed $s --lr-decay 0.1 --lr-decay-epochs 0.75; done
# (PEER_RUNS below; PEER_ACC is their mean). That the training arithmetic
# itself matches PyTorch's is checked step by step by the torch suite
# (torch-trainstep-resnet-20, 3.7e-4 relative).
. "$(dirname "$0")/lib.sh"
need_fm

PEER_RUNS="seeds 1-4: 0.9027 0.8955 0.8902 0.8916"
PEER_ACC=0.8950
SD=0.0056
N_PEER=4
SEED=1
SCHEDULE="--lr-decay 0.1 --lr-decay-epochs 0.75"
TOL=$(awk -v sd="$SD" -v n="$N_PEER" 'BEGIN { t = 3 * sd * sqrt(1 + 1 / n); printf "%.4f", (t > 0.01 ? t : 0.01) }')

say "resnet-20, 1 epoch, $SCHEDULE, seed $SEED, --threads 2"
# shellcheck disable=SC2086 # SCHEDULE is a list of flags
train "$tmp/run.log" --data "$FM" --model resnet-20 --epochs 1 --seed $SEED --threads 2 \
    $SCHEDULE --summary-json "$tmp/run.json" --quiet || bad "training failed"
[ "$fail" = 0 ] || finish
say "$(tail -1 "$tmp/run.log")"
acc=$(jget "$tmp/run.json" '"%.4f" % j["test_accuracy"]')
say "pstrain test accuracy $acc; PyTorch $PEER_ACC (mean of $PEER_RUNS); tolerance $TOL (3 standard deviations of the difference, per-run SD $SD)"
check "test accuracy $acc within $TOL of PyTorch's $PEER_ACC" \
    awk -v a="$acc" -v p="$PEER_ACC" -v t="$TOL" 'BEGIN { d = a - p; exit !(d <= t && -d <= t) }'
finish
