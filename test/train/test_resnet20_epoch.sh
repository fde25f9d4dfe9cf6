#!/usr/bin/env bash
# resnet-20, one epoch of Fashion-MNIST with pstrain's defaults (batch 64,
# momentum 0.9, lr 0.01, seed 1234), reaches PyTorch's test accuracy for the
# same model and settings within 0.01 (issue 9). Suite slow: the epoch takes
# about 2 minutes of CPU time (1 thread; measured 3.5 s per 30 steps).
#
# The peer number is PyTorch 1.13 (Debian) running test/torch/peer_resnet20.py,
# which trains the same network (test/torch/torch_ref.py resnet_cifar, the
# module tree pstrain's variable names follow) with pstrain's initialisers,
# batch-norm eps 1e-3 and decay 0.99, SGD momentum 0.9, lr 0.01, batch 64,
# the same normalisation, one epoch, measured 2026-11-30 with
#   for s in 1 2; do /usr/bin/python3 test/torch/peer_resnet20.py --seed $s; done
# seed 1: 0.8434, seed 2: 0.8172. PEER_ACC is their mean, PEER_SPREAD their
# range: wider than the tolerance, so this checks pstrain against the peer's
# mean, not against any one PyTorch run. pstrain (deterministic for a seed,
# whatever --threads): seed 1234 0.8244, seed 1 0.8276 before the fast
# convolution kernels, seed 1234 0.8317 with them. A change of the
# arithmetic (another summation order) moves pstrain's number like another
# seed would. Agreement with PyTorch is checked exactly per step by the torch
# suite step by step (torch-trainstep-resnet-20).
. "$(dirname "$0")/lib.sh"
need_fm

PEER_ACC=0.8303
PEER_SPREAD=0.0262
TOL=0.01



say "resnet-20, 1 epoch, --threads 2"
if train "$tmp/train.log" --data "$FM" --model resnet-20 --epochs 1 --threads 2 \
    --summary-json "$tmp/s.json" --quiet; then
    say "$(tail -1 "$tmp/train.log")"
    acc=$(jget "$tmp/s.json" 'j["test_accuracy"]')
    say "pstrain test accuracy $acc; PyTorch $PEER_ACC (mean of 2 seeds, range $PEER_SPREAD); tolerance $TOL"
    check "test accuracy $acc within $TOL of PyTorch's $PEER_ACC" \
        awk -v a="$acc" -v p="$PEER_ACC" -v t="$TOL" 'BEGIN { d = a - p; exit !(d <= t && -d <= t) }'
else
    bad "training failed"
fi
finish
