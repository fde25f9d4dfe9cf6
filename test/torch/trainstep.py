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
statistics match, not only inference. PyTorch gets the 4 examples in the
order of pstrain's batch (its --trace-examples).

inception-v3 runs at 75x75 (its smallest size) with 10 classes, so that the
step takes seconds; its dropout (rate 0.5, before fc) stays on in both: the
PyTorch side multiplies by the mask pstrain draws for that step and layer
(dropout_mask: nn_seed_mix(seed, step, layer index), one xoshiro256** stream
per block of NN_DROPOUT_BLOCK elements, two 24-bit uniforms per draw;
src/nn/layers.c), so the dropout forward and backward are checked too.
"""
import copy
import json
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
SEED_PSTRAIN = 1234  # pstrain train's default --seed
# Models whose float32 step is chaotic (compare_chaotic): inception-v3's
# training-mode step at 75x75 and batch 4 (batch norm over 4 values in
# Mixed_7*, torchvision's std-0.1 weights) moves by a median 3% and up to 20%
# of a variable's change between PyTorch in float32 and in float64.
CHAOTIC = {"inception-v3"}
TOL_LOSS = 1e-4
F_VAR, F_MEDIAN, F_P90 = 50.0, 2.0, 4.0
# image size and classes of the step where they differ from xcheck's
SIZES = {"inception-v3": (75, 75, 3, 10)}

M64 = (1 << 64) - 1


def splitmix64(state):
    """pst_splitmix64: (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def seed_mix(a, b, c):
    """nn_seed_mix."""
    _, h = splitmix64(a)
    _, h = splitmix64(h ^ b)
    return splitmix64(h ^ c)[1]


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


def dropout_mask(n, rate, seed, block=4096):
    """nn_dropout_mask: keep with probability 1 - rate, scaled by 1/(1 - rate)."""
    keep = np.float32(1.0) - np.float32(rate)
    scale = np.float32(1.0) / keep
    mask = np.zeros(n, dtype=np.float32)
    for b0 in range(0, n, block):
        b1 = min(b0 + block, n)
        st, s = seed_mix(seed, b0 // block, 0x64726F70), []
        for _ in range(4):
            st, v = splitmix64(st)
            s.append(v)
        us = []
        while len(us) < b1 - b0:
            r = (rotl((s[1] * 5) & M64, 7) * 9) & M64
            t = (s[1] << 17) & M64
            s[2] ^= s[0]
            s[3] ^= s[1]
            s[1] ^= s[2]
            s[0] ^= s[3]
            s[2] ^= t
            s[3] = rotl(s[3], 45)
            us += [r >> 40, (r >> 8) & 0xFFFFFF]  # an odd tail takes the first (nn_rng_uniform)
        u = np.array(us[:b1 - b0], dtype=np.float32) * np.float32(1.0 / 16777216.0)
        mask[b0:b1] = np.where(u < keep, scale, np.float32(0.0))
    return mask


class FixedDropout(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.mask = mask

    def forward(self, x):
        return x * self.mask.to(x.dtype).reshape(x.shape)


def torch_step(model, x, y):
    """One SGD-momentum step in train mode: the loss and the new variables."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item(), {nm: v.astype(np.float64) for _, nm, v in
                         torch2ckpt.mapping(model.state_dict())}


def layer_index(dry_run, name):
    """The index of layer `name` in pstrain's --dry-run table."""
    rows = dry_run.splitlines()
    head = next(i for i, r in enumerate(rows) if r.split()[:2] == ["layer", "kind"])
    names = [r.split()[0] for r in rows[head + 1:] if r.startswith("  ") and r.split()]
    return names.index(name)


def main():
    name, work = sys.argv[1], sys.argv[2]
    H, W, C, K, build = MODELS[name]
    H, W, C, K = SIZES.get(name, (H, W, C, K))
    n = 4
    pstrain, prep = os.environ["PSTRAIN"], os.environ["PSTRAIN_PREP"]
    if name == "inception-v3":
        # This step is ill-conditioned (batch norm over 4 values at Mixed_7c's
        # 1x1 pixels): PyTorch's own float32 result is a median 3% from its
        # float64 one. pstrain's Winograd kernels round differently from a
        # direct convolution (within their error bound, which nn-wino checks
        # against a double reference), and this step amplifies that to 2.5x
        # PyTorch's float32 error in the median (largest 361x, Mixed_7c), so
        # the comparison with PyTorch's float32 error only means something on
        # the direct kernels: they are what this test checks. Winograd is on
        # in torch-trainstep-resnet-20 and in every torch-xcheck test.
        os.environ["PSTRAIN_WINO"] = "0"
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
    trace = os.path.join(work, "trace.jsonl")
    run([pstrain, "train"] + common + ["--steps", "2", "--resume", imported,
                                       "--checkpoint-dir", ck2, "--trace-examples", trace,
                                       "--metrics", os.path.join(work, "m.jsonl")])
    with open(os.path.join(work, "m.jsonl")) as f:
        loss_a = [json.loads(r) for r in f if '"step"' in r][-1]["loss"]
    with open(trace) as f:
        rec = json.loads(f.read().splitlines()[-1])
    order, step = rec["ids"], rec["step"]
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
    x, labels = x[order], labels[order]  # pstrain's batch order
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.momentum = 0.01
    dropouts = [nm for nm, mod in model.named_modules() if isinstance(mod, nn.Dropout)]
    for nm in dropouts:
        rate = getattr(model, nm).p
        li = layer_index(run([pstrain, "train"] + common + ["--dry-run"]), nm.replace(".", "/"))
        cols = model.fc.in_features
        mask = dropout_mask(n * cols, rate, seed_mix(SEED_PSTRAIN, step, li))
        print("%s: dropout %s (layer %d, rate %g) with pstrain's mask of step %d: %d of %d kept"
              % (name, nm, li, rate, step, int((mask > 0).sum()), mask.size))
        setattr(model, nm, FixedDropout(torch.from_numpy(mask)))
    model64 = copy.deepcopy(model).double()
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    yt = torch.from_numpy(labels.astype(np.int64))
    loss, after_b = torch_step(model, xt, yt)
    loss64, after_64 = torch_step(model64, xt.double(), yt)

    print("%s: loss of the step: pstrain %.6g, PyTorch %.6g (float64 %.6g)"
          % (name, loss_a, loss, loss64))
    if name in CHAOTIC:
        compare_chaotic(name, before, after_a, after_b, after_64, loss_a, loss, loss64)
    else:
        compare(name, n, loss, before, after_a, after_b)
    print("PASS")


def compare(name, n, loss, before, after_a, after_b):
    """Every variable's change within TOL of PyTorch's, relative to its largest."""
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
          "(%s), tolerance %g" % (name, n, loss, len(before), worst, worst_name, TOL))
    if bad:
        print("\n".join(bad[:10]))
        sys.exit("FAIL: %d variables differ" % len(bad))


def compare_chaotic(name, before, after_a, after_b, after_64, loss_a, loss32, loss64):
    """A step whose float32 result is itself uncertain: pstrain's error and
    PyTorch's float32 error, both against PyTorch in float64, per variable
    (max|d - d64| / max|d64|). pstrain must be as close to the float64 step
    as PyTorch's own float32 step: each error within max(TOL, F_VAR x
    PyTorch's), and over all variables the median of the ratio at most
    F_MEDIAN and its 90th percentile at most F_P90; the loss likewise."""
    bad, ratios, worst = [], [], (0.0, "")
    e_loss_a, e_loss_b = abs(loss_a - loss64) / abs(loss64), abs(loss32 - loss64) / abs(loss64)
    if not e_loss_a <= max(TOL_LOSS, F_VAR * e_loss_b):
        bad.append("the loss: pstrain off float64 by %.3g, PyTorch float32 by %.3g"
                   % (e_loss_a, e_loss_b))
    for nm in before:
        d64 = after_64[nm] - before[nm]
        scale = np.abs(d64).max()
        if scale == 0:
            continue
        ea = np.abs(after_a[nm].astype(np.float64) - before[nm] - d64).max() / scale
        eb = np.abs(after_b[nm] - before[nm] - d64).max() / scale
        if os.environ.get("TRAINSTEP_VERBOSE"):
            print("  %-45s max|d64| %.3g  pstrain %.3g  torch32 %.3g" % (nm, scale, ea, eb))
        ratios.append(ea / max(eb, 1e-12))
        worst = max(worst, (ratios[-1], nm))
        if not ea <= max(TOL, F_VAR * eb):
            bad.append("%s: pstrain off float64 by %.3g, PyTorch float32 by %.3g (max change %.3g)"
                       % (nm, ea, eb, scale))
    med, p90 = np.median(ratios), np.percentile(ratios, 90)
    print("%s: %d variables; error against float64, pstrain / PyTorch float32: median %.3g "
          "(at most %g), 90th percentile %.3g (at most %g), largest %.3g (%s; at most %g "
          "where above %g); loss %.3g / %.3g"
          % (name, len(ratios), med, F_MEDIAN, p90, F_P90, worst[0], worst[1], F_VAR, TOL,
             e_loss_a, e_loss_b))
    if not med <= F_MEDIAN:
        bad.append("median ratio %.3g" % med)
    if not p90 <= F_P90:
        bad.append("90th percentile ratio %.3g" % p90)
    if bad:
        print("\n".join(bad[:10]))
        sys.exit("FAIL: %d differences" % len(bad))

if __name__ == "__main__":
    main()
