#!/usr/bin/python3
"""Is torch-trainstep-resnet-20 robust to rounding? (a check of trainstep.py's design)

    trainstep_noise.py [--draws D] [--noise E] [--keep-kinks] WORKDIR

A correct pstrain rounds differently from PyTorch wherever a kernel sums in
another order. This stands in for one: PyTorch's float64 step of trainstep.py
(same weights, betas moved by clear_kinks, nonzero momentum slots, the same
comparison and limit) with noise of E times each tensor's RMS added to every
convolution's, batch norm's and dense layer's output and to the gradient
flowing back into each (E = 1e-6 by default: several times the float32 error
of pstrain's kernels, nn-wino's limits are 6e-7 forward and 1.5e-6 input
gradient), a fresh draw each time. Every draw must pass compare() against the
step without noise. --keep-kinks skips clear_kinks (the former design): then
some draws flip a ReLU and fail, which shows what clear_kinks is for (it
exits 1 when any draw fails either way). No pstrain is involved; the images
are random, normalised to mean 0 and standard deviation 1.
"""
import argparse
import copy
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainstep as ts  # noqa: E402


def noisy(model, eps, gen):
    """model with noise eps * RMS * N(0, 1) on every conv, batch-norm and
    dense output, forward and backward."""
    def jitter(t):
        return t + eps * t.detach().pow(2).mean().sqrt() * torch.randn(
            t.shape, generator=gen, dtype=t.dtype)

    def hook(mod, inp, out):
        if out.requires_grad:
            out.register_hook(jitter)
        return jitter(out)

    for mod in model.modules():
        if isinstance(mod, (nn.Conv2d, nn.BatchNorm2d, nn.Linear)):
            mod.register_forward_hook(hook)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--noise", type=float, default=1e-6)
    ap.add_argument("--keep-kinks", action="store_true")
    ap.add_argument("--model", default="resnet-20")
    ap.add_argument("work")
    args = ap.parse_args()
    name = args.model
    H, W, C, K, build = ts.MODELS[name]
    torch.manual_seed(ts.SEED)
    model = build(C, K)
    ts.randomise(model, C, H, W)
    rng = np.random.default_rng(ts.SEED)
    x = torch.from_numpy(rng.standard_normal((4, C, H, W)).astype(np.float32))
    y = torch.from_numpy(np.arange(4) % K)
    if not args.keep_kinks:
        near, moved, largest = ts.clear_kinks(name, model, x.double())
        print("%s: %d pre-ReLU values within %g of 0; %d batch-norm channels moved off the "
              "ReLU kink, by at most %.3g" % (name, near, ts.MARGIN, moved, largest))
        ts.check_kinks(name, model, x)
    slots = ts.random_slots(model, x, y)
    slots64 = {k: a.astype(np.float64) for k, a in slots.items()}
    before = {nm: v for _, nm, v in ts.torch2ckpt.mapping(model.state_dict())}
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.momentum = 0.01
    model = model.double()
    loss, after, grad = ts.torch_step(copy.deepcopy(model), x.double(), y, slots64)
    gen = torch.Generator().manual_seed(ts.SEED + 3)
    failed = 0
    for d in range(args.draws):
        m = noisy(copy.deepcopy(model), args.noise, gen)
        loss_n, after_n, grad_n = ts.torch_step(m, x.double(), y, slots64)
        try:
            ts.compare("%s draw %d" % (name, d), 4, before, (loss_n, loss_n, loss),
                       (after_n, after_n, after), (grad_n, grad_n, grad),
                       who=("with noise", "with noise"))
        except SystemExit as e:
            print(e)
            failed += 1
    print("%s: %d of %d draws with noise %g failed (%s)"
          % (name, failed, args.draws, args.noise,
             "betas as drawn" if args.keep_kinks else "kinks cleared"))
    if failed:
        sys.exit("FAIL: %d draws" % failed)
    print("PASS")


if __name__ == "__main__":
    main()
