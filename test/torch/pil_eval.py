#!/usr/bin/python3
"""torchvision's resnet50 evaluated by pstrain and by torchvision, from the same
JPEG files, must agree.

    pil_eval.py WORKDIR      (PSTRAIN, PSTRAIN_PREP, PSTRAIN_SRC in the environment)

  1. a tree of photo-like JPEGs (varied sizes, odd and even sides, landscape and
     portrait, gray and colour files, 4:2:0 and 4:4:4) and `pstrain-prep images
     --store encoded`: the data set holds the files' own bytes;
  2. torchvision's resnet50 with random weights under a fixed seed, its
     batch-norm statistics calibrated on the images (one training-mode pass
     with cumulative averages), nothing downloaded;
  3. a template checkpoint (`pstrain train --model resnet-50 --augment resnet
     --normalize imagenet --steps 1 --lr 0`) and data-tools/torch2ckpt.py;
  4. `pstrain eval --augment resnet --normalize imagenet --logits`;
  5. torchvision's own evaluation of the same bytes: PIL open, convert("RGB")
     (torchvision's image loader), Resize(256), CenterCrop(224), ToTensor,
     Normalize with ImageNet's constants;
  6. every prediction must agree and the logits to max|a-b| / max|b| <= 1e-4.
Exit 0 on agreement, 1 otherwise.
"""
import io
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision
import torchvision.transforms as T
from PIL import Image

TOL = 1e-4
SEED = 20261206
K = 4
# (width, height, gray, 4:4:4)
SIZES = [(500, 375, False, False), (375, 500, False, True), (301, 257, True, False),
         (256, 256, False, False), (640, 427, False, True), (227, 229, True, True),
         (333, 199, False, False), (257, 480, False, False), (224, 224, True, False),
         (431, 300, False, True), (260, 261, False, False), (298, 512, True, False),
         (600, 401, False, False), (255, 255, False, True), (320, 240, False, False),
         (241, 359, True, True), (512, 384, False, False), (389, 293, False, True),
         (280, 420, False, False), (450, 250, True, False), (240, 320, False, True),
         (359, 241, False, False), (273, 305, False, False), (500, 333, True, True),
         (222, 300, False, False), (300, 222, False, True), (413, 287, False, False),
         (287, 413, True, False), (350, 350, False, False), (367, 263, False, True),
         (263, 367, False, False), (480, 360, True, True)]


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r.stdout


def write_tree(tree, rng):
    for k in range(K):
        os.makedirs(os.path.join(tree, "c%d" % k))
    for i, (w, h, gray, full_chroma) in enumerate(SIZES):
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        base = 128 + 70 * np.sin(x / (9 + i) + i) * np.cos(y / (13 + 2 * i))
        tint = rng.uniform(0.6, 1.4, 3)
        px = base[..., None] * tint + rng.normal(0, 20, (h, w, 3))
        im = Image.fromarray(np.clip(px, 0, 255).astype(np.uint8))
        if gray:
            im = im.convert("L")
        im.save(os.path.join(tree, "c%d" % (i % K), "%03d.jpg" % i), quality=80 + i % 15,
                subsampling=0 if full_chroma else 2)


def main():
    import h5py

    sys.path.insert(0, os.path.join(os.environ["PSTRAIN_SRC"], "data-tools"))
    import torch2ckpt

    work = sys.argv[1]
    pstrain, prep = os.environ["PSTRAIN"], os.environ["PSTRAIN_PREP"]
    rng = np.random.default_rng(SEED)
    tree = os.path.join(work, "jpeg")
    write_tree(tree, rng)
    ds = os.path.join(work, "d.h5")
    run([prep, "images", tree, "--store", "encoded", "--channels", "3", "-o", ds])

    # torchvision's evaluation of the data set's bytes, in its order
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                    T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    with h5py.File(ds, "r") as f:
        enc, off = f["train/encoded"][:], f["train/offsets"][:]
    xs = []
    for i in range(len(off) - 1):
        with Image.open(io.BytesIO(enc[off[i]:off[i + 1]].tobytes())) as im:
            xs.append(tf(im.convert("RGB")))
    x = torch.stack(xs)
    n = x.shape[0]

    torch.manual_seed(SEED)
    model = torchvision.models.resnet50(weights=None, num_classes=K)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative: after one batch, its statistics
    model.train()
    with torch.no_grad():
        model(x)
    model.eval()

    ck = os.path.join(work, "ck")
    run([pstrain, "train", "--data", ds, "--model", "resnet-50", "--augment", "resnet",
         "--normalize", "imagenet", "--steps", "1", "--batch", "2", "--lr", "0", "--optimizer",
         "sgd", "--checkpoint-dir", ck, "--quiet"])
    template = os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())
    imported = os.path.join(work, "imported.h5")
    nvars = torch2ckpt.convert(model.state_dict(), template, imported)
    lpath = os.path.join(work, "logits.npy")
    run([pstrain, "eval", "--data", ds, "--checkpoint", imported, "--split", "train",
         "--augment", "resnet", "--normalize", "imagenet", "--logits", lpath, "--quiet"])
    a = np.load(lpath)
    with torch.no_grad():
        b = model(x).numpy()

    if a.shape != b.shape:
        sys.exit("FAIL: pstrain logits %s, torchvision %s" % (a.shape, b.shape))
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    rel = d.max() / np.abs(b).max()
    agree = int((a.argmax(1) == b.argmax(1)).sum())
    print("resnet50: %d variables imported; %d JPEGs (%d gray), %d classes; max|logit| %.4g; "
          "max|a-b| %.3g; max|a-b|/max|b| = %.3g (tolerance %g); predictions agree on %d/%d"
          % (nvars, n, sum(s[2] for s in SIZES), K, np.abs(b).max(), d.max(), rel, TOL, agree,
             n))
    if agree != n:
        sys.exit("FAIL: %d of %d predictions differ" % (n - agree, n))
    if not rel <= TOL:
        sys.exit("FAIL: logits differ by %.3g relative, tolerance %g" % (rel, TOL))
    print("PASS")


if __name__ == "__main__":
    main()
