#!/usr/bin/python3
"""Peer for test/train/test_resnet20_epoch.sh: PyTorch trains resnet-20 for one
epoch on Fashion-MNIST with the settings `pstrain train --model resnet-20` uses
by default, and prints the test accuracy (one JSON line).

    /usr/bin/python3 test/torch/peer_resnet20.py --seed 1 [--threads 2] [--epochs 1] [--init he]
        [--lr-decay F --lr-decay-epochs E] [--warmup-epochs E]
        [--moving-average-decay D[,D2...] [--no-averages]] [--diag] [--progress]

The test's settings: --lr-decay 0.1 --lr-decay-epochs 0.75 (docs/torchvision.md).

pstrain's settings, reproduced: SGD with momentum 0.9 (a = 0.9 a + g; w -= lr a,
which is torch.optim.SGD's rule), lr 0.01, batch 64 with the last partial batch
of the epoch (938 steps), no weight decay, no augmentation, softmax
cross-entropy; batch norm eps 1e-3 and moving averages with decay 0.99
(torch momentum 0.01), test accuracy with the moving statistics; initial
weights from the same distributions as pstrain's (PyTorch 1.13's defaults,
which the peer torch_models.py resnet_cifar keeps and pstrain follows:
every convolution and dense weight U(+-1/sqrt(fan_in)), the dense bias too;
gamma 1, beta 0; docs/torchvision.md); input x/255 normalised with the mean
and standard deviation of the training pixels (what pstrain-prep stores and
pstrain applies). The shuffle and the random draws are PyTorch's own, from
--seed. `--init he` draws other initialisers instead (convolutions He
truncated normal, |z| <= 2, variance 2/fan_in; the dense layer Glorot
uniform, bias 0), to compare the two settings.

The schedule and the averages follow pstrain's (src/nn/optim.c,
docs/training.md, "Training recipes"): --lr-decay F --lr-decay-epochs E is the staircase
lr * F^floor(s / (E * 938)) of update s (0-based), --warmup-epochs E its
linear warm-up from lr/10, both computed in double and rounded to float as
lr_at does; --moving-average-decay D keeps pstrain's moving average of every
variable and batch-norm moving statistic (d = min(D, (1 + t) / (10 + t)) in
float after update t; average -= (average - variable) * (1 - d)) and tests
with it (--no-averages: with the raw variables); several decays D,D2,... are
kept side by side from the same training (the first is tested), and the
output adds each one's accuracy (ema_<D>) and the raw variables' with the
moving statistics (raw_accuracy). --diag adds the raw
variables' accuracy with the moving statistics and with statistics
recomputed from the final weights (60 training batches of 500), to tell the
statistics' lag from the weights' noise; --progress prints every 100 steps
to stderr.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import resnet_cifar  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def set_init(model, he):
    """Batch-norm decay 0.99; with he, pstrain's former initialisers (the
    default: PyTorch's own, as constructed)."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.momentum = 0.01
            if not he:
                continue
            if isinstance(mod, nn.Conv2d):
                fan_in = mod.in_channels * mod.kernel_size[0] * mod.kernel_size[1]
                sd = math.sqrt(2.0 / fan_in) / 0.87962566103423978
                w = torch.empty_like(mod.weight)
                nn.init.trunc_normal_(w, 0.0, 1.0, -2.0, 2.0)
                mod.weight.copy_(w * sd)
            elif isinstance(mod, nn.Linear):
                lim = math.sqrt(6.0 / (mod.in_features + mod.out_features))
                mod.weight.uniform_(-lim, lim)
                mod.bias.zero_()
            elif isinstance(mod, nn.BatchNorm2d):
                mod.weight.fill_(1.0)
                mod.bias.zero_()


def accuracy(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], 500):
            correct += (model(x[i:i + 500]).argmax(1) == y[i:i + 500]).sum().item()
    return correct / x.shape[0]


def precise_bn(model, x):
    """Batch-norm statistics recomputed with the final weights: the
    cumulative mean over 60 training batches of 500 (diagnosis only)."""
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.reset_running_stats()
            mod.momentum = None
    model.train()
    with torch.no_grad():
        for i in range(0, 30000, 500):
            model(x[i:i + 500])


def lr_at(a, spe, step):
    """pstrain's lr_at (src/nn/optim.c): the rate of update `step` (0-based):
    staircase decay, then the warm-up factor, in double, rounded to float."""
    base = float(np.float32(a.lr))
    lr = base
    if a.lr_decay not in (0.0, 1.0) and a.lr_decay_epochs > 0:
        k = math.floor(step / (spe * float(np.float32(a.lr_decay_epochs))))
        lr = base * float(np.float32(a.lr_decay)) ** k
    if a.warmup_epochs > 0:
        nw = float(np.float32(a.warmup_epochs)) * spe
        if step < nw:
            lr *= 0.1 + 0.9 * (step / nw)
    return float(np.float32(lr))


def ema_vars(model):
    """Every variable pstrain averages: the trainable ones and the batch-norm
    moving statistics (not torch's num_batches_tracked)."""
    out = list(model.parameters())
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            out += [mod.running_mean, mod.running_var]
    return out


def ema_update(ema, avg, decay, t):
    """pstrain's ema_decay_at and ema_apply after the update that makes the
    global step t: d = min(D, (1 + t) / (10 + t)) in float32, then
    average -= (average - variable) * (1 - d)."""
    n = np.float32(t)
    d = min(np.float32((np.float32(1) + n) / (np.float32(10) + n)), np.float32(decay))
    one_d = float(np.float32(1) - d)
    with torch.no_grad():
        for v, m in zip(ema, avg):
            m.sub_((m - v) * one_d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--init", choices=["torch", "he"], default="torch")
    ap.add_argument("--lr-decay", type=float, default=1.0)
    ap.add_argument("--lr-decay-epochs", type=float, default=0.0)
    ap.add_argument("--warmup-epochs", type=float, default=0.0)
    ap.add_argument("--moving-average-decay", type=str, default="0",
                    help="D or D1,D2,...: the first is tested; each gets ema_<D> in the output")
    ap.add_argument("--no-averages", action="store_true")
    ap.add_argument("--diag", action="store_true")
    ap.add_argument("--progress", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"))
    ytr = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
    xte = read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz"))
    yte = read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz"))
    px = xtr.astype(np.float64) / 255.0
    mean, std = px.mean(), px.std()

    def prep(x):
        return torch.from_numpy(((x.astype(np.float32) / 255.0 - mean) / std)
                                .astype(np.float32)[:, None, :, :].copy())

    xtr_t, xte_t = prep(xtr), prep(xte)
    ytr_t, yte_t = torch.from_numpy(ytr.astype(np.int64)), torch.from_numpy(yte.astype(np.int64))
    model = resnet_cifar(3, 1, 10)
    set_init(model, a.init == "he")
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    lf = nn.CrossEntropyLoss()
    t0 = time.time()
    n, steps = xtr_t.shape[0], 0
    spe = (n + a.batch - 1) // a.batch
    decays = [float(d) for d in a.moving_average_decay.split(",")]
    decays = [d for d in decays if d > 0]
    ema = ema_vars(model) if decays else None
    avgs = [[v.detach().clone() for v in ema] for _ in decays] if ema else []
    model.train()
    for _ in range(a.epochs):
        perm = torch.randperm(n)
        for i in range(0, n, a.batch):
            idx = perm[i:i + a.batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(a, spe, steps)
            opt.zero_grad(set_to_none=True)
            loss = lf(model(xtr_t[idx]), ytr_t[idx])
            loss.backward()
            opt.step()
            steps += 1
            if a.progress and steps % 100 == 0:
                print("step %d loss %.4f lr %g %.0f s" % (steps, loss.item(), opt.param_groups[0]["lr"],
                                                          time.time() - t0), file=sys.stderr, flush=True)
            for d, avg in zip(decays, avgs):
                ema_update(ema, avg, d, steps)
    extra = {}
    if a.diag:
        # where the spread comes from: the raw variables with the moving
        # statistics, and with statistics recomputed over the training set
        extra["raw_moving_stats"] = accuracy(model, xte_t, yte_t)
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        precise_bn(model, xtr_t)
        extra["raw_precise_bn"] = accuracy(model, xte_t, yte_t)
        model.load_state_dict(saved)
    if ema:
        # every average's accuracy; the raw variables' (with the moving
        # statistics) first, then the first average stays in place unless
        # --no-averages
        extra["raw_accuracy"] = accuracy(model, xte_t, yte_t)
        raw = [v.detach().clone() for v in ema]
        for d, avg in reversed(list(zip(decays, avgs))):
            with torch.no_grad():
                for v, m in zip(ema, avg):
                    v.copy_(m)
            extra["ema_%g" % d] = accuracy(model, xte_t, yte_t)
        if a.no_averages:
            with torch.no_grad():
                for v, m in zip(ema, raw):
                    v.copy_(m)
    correct = round(accuracy(model, xte_t, yte_t) * xte_t.shape[0])
    print(json.dumps({"model": "resnet-20", "seed": a.seed, "init": a.init, "epochs": a.epochs,
                      "lr": a.lr, "lr_decay": a.lr_decay, "lr_decay_epochs": a.lr_decay_epochs,
                      "warmup_epochs": a.warmup_epochs, "moving_average_decay": decays[0] if decays else 0.0, "steps": steps,
                      "test_accuracy": correct / xte_t.shape[0], "final_loss": loss.item(),
                      "seconds": round(time.time() - t0, 1), "torch": torch.__version__, **extra}))


if __name__ == "__main__":
    main()
