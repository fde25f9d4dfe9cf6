#!/usr/bin/python3
"""Peer for test/train/test_resnet20_epoch.sh: PyTorch trains resnet-20 for one
epoch on Fashion-MNIST with the settings `pstrain train --model resnet-20` uses
by default, and prints the test accuracy (one JSON line).

    /usr/bin/python3 test/torch/peer_resnet20.py --seed 1 [--threads 2] [--epochs 1] [--init he]

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
--seed. `--init he` draws pstrain's initialisers before 2026-12-01 instead
(convolutions He truncated normal, |z| <= 2, variance 2/fan_in; the dense
layer Glorot uniform, bias 0), the setting of the earlier measurements.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--init", choices=["torch", "he"], default="torch")
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
    model.train()
    for _ in range(a.epochs):
        perm = torch.randperm(n)
        for i in range(0, n, a.batch):
            idx = perm[i:i + a.batch]
            opt.zero_grad(set_to_none=True)
            loss = lf(model(xtr_t[idx]), ytr_t[idx])
            loss.backward()
            opt.step()
            steps += 1
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, xte_t.shape[0], 500):
            correct += (model(xte_t[i:i + 500]).argmax(1) == yte_t[i:i + 500]).sum().item()
    print(json.dumps({"model": "resnet-20", "seed": a.seed, "init": a.init, "epochs": a.epochs, "steps": steps,
                      "test_accuracy": correct / xte_t.shape[0], "final_loss": loss.item(),
                      "seconds": round(time.time() - t0, 1), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
