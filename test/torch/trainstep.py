#!/usr/bin/python3
"""One training step of pstrain against PyTorch from the same weights.

    trainstep.py MODEL WORKDIR   (PSTRAIN, PSTRAIN_PREP, PSTRAIN_SRC in the environment)

The reference and its weights as in xcheck.py (random init under a fixed seed,
batch-norm statistics and affine parameters far from identity); 4 random
images. pstrain: a template checkpoint (`train --steps 1 --batch 4`, momentum),
the torch weights imported into it (torch2ckpt.py zeroes the momentum slots),
then `train --resume IMPORTED --steps 2`: one step of batch 4 with lr 0.01
and momentum 0.9 from the imported weights. PyTorch: the same step (train
mode, batch norm with batch statistics and moving averages of decay 0.99 =
torch momentum 0.01, mean softmax cross-entropy, SGD momentum 0.9). Every
variable's change must agree: max|da - db| / max|db| <= 1e-3 per variable
(da pstrain's new value minus the imported one, db PyTorch's), so the
gradients, the batch-norm training forward and backward and the moving
statistics match, not only inference. The order of the 4 examples within the
batch may differ (an epoch's shuffle); the mean gradient does not depend on
it beyond rounding.
"""
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xcheck  # noqa: E402
from xcheck import MODELS, SEED, randomise, run, torch2ckpt, write_png  # noqa: E402

TOL = 1e-3
LR = 0.01


def main():
    name, work = sys.argv[1], sys.argv[2]
    H, W, C, K, build = MODELS[name]
    n = 4
    pstrain, prep = os.environ["PSTRAIN"], os.environ["PSTRAIN_PREP"]
    rng = np.random.default_rng(SEED)
    tree = os.path.join(work, "png")
    for k in range(K):
        os.makedirs(os.path.join(tree, "c%04d" % k))
    for i in range(n):
        write_png(os.path.join(tree, "c%04d" % (i % K), "%d.png" % i),
                  rng.integers(0, 256, size=(H, W, C), dtype=np.uint8))
    ds = os.path.join(work, "d.h5")
    run([prep, "png", tree, "--channels", str(C), "-o", ds])
    ck = os.path.join(work, "ck")
    common = ["--data", ds, "--model", name, "--batch", str(n), "--lr", str(LR),
              "--optimizer", "momentum", "--momentum", "0.9", "--quiet"]
    run([pstrain, "train"] + common + ["--steps", "1", "--checkpoint-dir", ck])
    template = os.path.join(ck, "ckpt-1.h5")

    torch.manual_seed(SEED)
    model = build(C, K)
    randomise(model, C, H, W)
    imported = os.path.join(work, "imported.h5")
    torch2ckpt.convert(model.state_dict(), template, imported)
    before = {nm: v for _, nm, v in torch2ckpt.mapping(model.state_dict())}

    ck2 = os.path.join(work, "ck2")
    run([pstrain, "train"] + common + ["--steps", "2", "--resume", imported,
                                       "--checkpoint-dir", ck2])
    with h5py.File(os.path.join(ck2, "ckpt-2.h5"), "r") as f:
        after_a = {nm: f["variables"][nm][...] for nm in before}

    with h5py.File(ds, "r") as f:
        px = f["train/images"][:]
        labels = f["train/labels"][:]
        mean = np.asarray(f.attrs["mean"], dtype=np.float32).astype(np.float64)
        std = np.asarray(f.attrs["std"], dtype=np.float32).astype(np.float64)
    sd = np.where(std.astype(np.float32) > np.float32(1e-12), std, 1.0)
    x = px.astype(np.float32) * (1.0 / (255.0 * sd)).astype(np.float32) + \
        (-mean / sd).astype(np.float32)
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.momentum = 0.01
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loss = nn.functional.cross_entropy(
        model(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))),
        torch.from_numpy(labels.astype(np.int64)))
    loss.backward()
    opt.step()
    after_b = {nm: v for _, nm, v in torch2ckpt.mapping(model.state_dict())}

    worst, worst_name, bad = 0.0, "", []
    for nm in sorted(before):
        da = after_a[nm].astype(np.float64) - before[nm]
        db = after_b[nm].astype(np.float64) - before[nm]
        scale = np.abs(db).max()
        if scale == 0:
            if np.abs(da).max() != 0:
                bad.append("%s: PyTorch leaves it unchanged, pstrain moves it by %.3g"
                           % (nm, np.abs(da).max()))
            continue
        rel = np.abs(da - db).max() / scale
        if rel > worst:
            worst, worst_name = rel, nm
        if not rel <= TOL:
            bad.append("%s: changes differ by %.3g relative (max change %.3g)" % (nm, rel, scale))
    print("%s: one step of batch %d, loss %.4f, %d variables; largest max|da-db|/max|db| %.3g "
          "(%s), tolerance %g" % (name, n, loss.item(), len(before), worst, worst_name, TOL))
    if bad:
        print("\n".join(bad[:10]))
        sys.exit("FAIL: %d variables differ" % len(bad))
    print("PASS")


if __name__ == "__main__":
    main()
