#!/usr/bin/python3
"""Cross-check of pstrain's models against PyTorch in inference mode.

    xcheck.py MODEL WORKDIR      (PSTRAIN, PSTRAIN_PREP, PSTRAIN_SRC in the environment)

Builds the reference model in PyTorch (torchvision's resnet50 / inception_v3 for
resnet-50 / inception-v3; a module tree with pstrain's layout for the others)
with random weights under a fixed seed, and random batch-norm statistics and
affine parameters (so identity batch norms cannot hide a wrong one; see
randomise). Then:
  1. a data set of a few random images at the model's size: PNG files and
     pstrain-prep png, so pstrain's own reader and normalisation are used;
  2. a template checkpoint from `pstrain train --steps 1 --lr 0`;
  3. data-tools/torch2ckpt.py copies every torch weight into it (h5py);
  4. `pstrain eval --split train --logits L.npy`;
  5. the same images through torch in eval() mode, normalised exactly as
     pstrain does (pipe_normalize: x*scale + bias in float32 with
     scale = 1/(255 std), bias = -mean/std from the data set's attributes);
  6. logits must agree: max|a-b| / max|b| <= 1e-4 (the whole logit matrix);
     the largest per-element |a-b| / |b| is reported too.
Exit 0 on agreement, 1 otherwise.
"""
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn
import torchvision

TOL = 1e-4
SEED = 20261130

SRC = os.environ["PSTRAIN_SRC"]
sys.path.insert(0, os.path.join(SRC, "data-tools"))
import torch2ckpt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import InceptionMini, normalised_train, resnet_cifar  # noqa: E402


# model: (height, width, channels, classes, builder)
MODELS = {
    "inception-mini": (28, 28, 1, 10, lambda c, k: InceptionMini(c, k)),
    "resnet-20": (32, 32, 3, 10, lambda c, k: resnet_cifar(3, c, k)),
    "resnet-56": (32, 32, 3, 10, lambda c, k: resnet_cifar(9, c, k)),
    # torchvision's layouts; inception_v3 without auxiliary logits and without
    # transform_input (pstrain normalises with the data set's statistics)
    "resnet-50": (224, 224, 3, 1000,
                  lambda c, k: torchvision.models.resnet50(weights=None, num_classes=k)),
    "inception-v3": (299, 299, 3, 1000,
                     lambda c, k: torchvision.models.inception_v3(
                         weights=None, num_classes=k, aux_logits=False, init_weights=True,
                         transform_input=False)),
}


def randomise(model, C, H, W):
    """Batch-norm statistics that keep the activations in range, then
    perturbed, and random affine parameters: the running statistics are the
    batch statistics of one training-mode forward pass over random images
    (so the activations of a deep network stay in range whatever its
    initialisation), the variance then scaled by U[0.75, 1.25), the mean moved
    by 0.1 N(0, 1) standard deviations; gamma U[0.75, 1.25), beta 0.1 N(0, 1).
    (Wider draws compound over inception-v3's depth: U[0.5, 1.5) gave logits
    of 5e4.) Everything else keeps the
    model's own (seeded) initialisation."""
    g = torch.Generator().manual_seed(SEED + 1)
    bns = [mod for mod in model.modules() if isinstance(mod, nn.BatchNorm2d)]
    for mod in bns:
        mod.reset_running_stats()
        mod.momentum = None  # a cumulative average: after one batch, its statistics
    model.train()
    with torch.no_grad():
        model(torch.randn(4, C, H, W, generator=g))
        for mod in bns:
            c = mod.num_features
            mod.momentum = 0.1
            mod.running_var.mul_(0.75 + 0.5 * torch.rand(c, generator=g))
            mod.running_mean.add_(0.1 * mod.running_var.sqrt() * torch.randn(c, generator=g))
            mod.weight.copy_(0.75 + 0.5 * torch.rand(c, generator=g))
            mod.bias.copy_(0.1 * torch.randn(c, generator=g))


# ---- a data set of random images through pstrain-prep png ----

def write_png(path, img):
    """8-bit gray (H, W, 1) or RGB (H, W, 3), no filter, zlib."""
    h, w, c = img.shape

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0 if c == 1 else 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw)))
        f.write(chunk(b"IEND", b""))


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r.stdout


def main():
    name, work = sys.argv[1], sys.argv[2]
    H, W, C, K, build = MODELS[name]
    n_images = 2
    pstrain, prep = os.environ["PSTRAIN"], os.environ["PSTRAIN_PREP"]

    rng = np.random.default_rng(SEED)
    tree = os.path.join(work, "png")
    for k in range(K):
        os.makedirs(os.path.join(tree, "c%04d" % k))
    for i in range(n_images):
        img = rng.integers(0, 256, size=(H, W, C), dtype=np.uint8)
        write_png(os.path.join(tree, "c%04d" % (i % K), "%d.png" % i), img)
    ds = os.path.join(work, "d.h5")
    run([prep, "png", tree, "--channels", str(C), "-o", ds])

    ck = os.path.join(work, "ck")
    run([pstrain, "train", "--data", ds, "--model", name, "--steps", "1", "--batch",
         str(n_images), "--lr", "0", "--optimizer", "sgd", "--checkpoint-dir", ck, "--quiet"])
    template = os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())

    torch.manual_seed(SEED)
    model = build(C, K)
    randomise(model, C, H, W)
    model.eval()
    imported = os.path.join(work, "imported.h5")
    nvars = torch2ckpt.convert(model.state_dict(), template, imported)

    lpath = os.path.join(work, "logits.npy")
    run([pstrain, "eval", "--data", ds, "--checkpoint", imported, "--split", "train",
         "--logits", lpath, "--quiet"])
    a = np.load(lpath)

    with torch.no_grad():
        b = model(normalised_train(ds)).numpy()

    if a.shape != b.shape:
        sys.exit("FAIL: pstrain logits %s, torch %s" % (a.shape, b.shape))
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    rel = d.max() / np.abs(b).max()
    per = (d / np.maximum(np.abs(b), 1e-30)).max()
    print("%s: %d variables imported; %d images %dx%dx%d, %d classes; max|logit| %.4g; "
          "max|a-b| %.3g; max|a-b|/max|b| = %.3g (tolerance %g); largest per-element "
          "|a-b|/|b| %.3g; argmax agrees on %d/%d"
          % (name, nvars, n_images, H, W, C, K, np.abs(b).max(), d.max(), rel, TOL, per,
             int((a.argmax(1) == b.argmax(1)).sum()), n_images))
    if not rel <= TOL:
        sys.exit("FAIL: logits differ by %.3g relative, tolerance %g" % (rel, TOL))
    print("PASS")


if __name__ == "__main__":
    main()
