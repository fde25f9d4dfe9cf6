#!/usr/bin/python3
"""data-tools/ckpt2torch.py: pstrain checkpoints out to PyTorch.

    test_ckpt2torch.py WORKDIR   (PSTRAIN, PSTRAIN_PREP, PSTRAIN_SRC in the environment)

  1. round trip, bitwise: a torch model (resnet-20's resnet_cifar and
     torchvision's resnet50, random weights and batch-norm statistics) ->
     torch2ckpt.py -> ckpt2torch.py gives every tensor of its state_dict back
     bit for bit, and load_state_dict(strict=True) takes it;
  2. a resnet-20 trained by pstrain (20 steps, moving averages on), exported,
     gives pstrain eval's logits in PyTorch (max|a-b| / max|b| <= 1e-4), for
     the raw variables (--no-averages / default export) and for the moving
     averages (pstrain eval's default / --averages);
  3. torch2ckpt.py --normalize records the normalisation pstrain eval then
     uses (the same output as eval --normalize imagenet, another than
     --normalize dataset);
  4. the refusals: a model without a counterpart, --averages without
     averages, a file that is not a checkpoint (exit 1, one line, nothing
     written).
"""
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
import torchvision

SRC = os.environ["PSTRAIN_SRC"]
sys.path.insert(0, os.path.join(SRC, "data-tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt2torch  # noqa: E402
import torch2ckpt  # noqa: E402
from torch_ref import normalised_train, resnet_cifar  # noqa: E402
from xcheck import randomise, write_png  # noqa: E402

TOL = 1e-4
fails = []


def check(msg, ok):
    print(("ok   " if ok else "FAIL ") + msg)
    if not ok:
        fails.append(msg)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r.stdout


def dataset(work, tag, H, C, K, n, rng):
    tree = os.path.join(work, "png-" + tag)
    for k in range(K):
        os.makedirs(os.path.join(tree, "c%04d" % k))
    for i in range(n):
        img = rng.integers(0, 256, size=(H, H, C), dtype=np.uint8)
        write_png(os.path.join(tree, "c%04d" % (i % K), "%d.png" % i), img)
    ds = os.path.join(work, tag + ".h5")
    run([os.environ["PSTRAIN_PREP"], "png", tree, "--channels", str(C), "-o", ds])
    return ds


def latest(ck):
    return os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())


def template(work, tag, ds, model, batch, extra=()):
    ck = os.path.join(work, "ck-" + tag)
    run([os.environ["PSTRAIN"], "train", "--data", ds, "--model", model, "--steps", "1",
         "--batch", str(batch), "--lr", "0", "--optimizer", "sgd", "--checkpoint-dir", ck,
         "--quiet"] + list(extra))
    return latest(ck)


def round_trip(work, tag, model, torch_model, ds, batch, H, C):
    torch_model.eval()
    randomise(torch_model, C, H, H)
    sd = torch_model.state_dict()
    imported = os.path.join(work, tag + "-imported.h5")
    torch2ckpt.convert(sd, template(work, tag, ds, model, batch), imported)
    back = ckpt2torch.export(imported)
    floats = [k for k, v in sd.items() if v.is_floating_point()]
    same = [k for k in floats if k in back and back[k].dtype == sd[k].dtype
            and back[k].shape == sd[k].shape and torch.equal(back[k], sd[k])
            and np.array_equal(back[k].numpy().view(np.uint32), sd[k].numpy().view(np.uint32))]
    check("%s: torch -> pstrain -> torch, %d of %d float tensors bitwise equal"
          % (tag, len(same), len(floats)), len(same) == len(floats))
    check("%s: the same keys (%d)" % (tag, len(sd)), sorted(back) == sorted(sd))
    try:
        torch_model.load_state_dict(back, strict=True)
        check("%s: load_state_dict(strict=True) takes it" % tag, True)
    except RuntimeError as ex:
        check("%s: load_state_dict(strict=True): %s" % (tag, str(ex).splitlines()[0]), False)


def imported_normalize(work, ds):
    pstrain = os.environ["PSTRAIN"]
    src = os.path.join(work, "resnet-20-imported.h5")
    out = os.path.join(work, "resnet-20-imagenet.h5")
    sd = ckpt2torch.export(src)
    torch2ckpt.convert(sd, src, out, normalize="imagenet")
    with h5py.File(out, "r") as f:
        got = f.attrs["normalize"]
    check("torch2ckpt --normalize imagenet: attribute normalize is %r" % got, got == b"imagenet")
    ev = [run([pstrain, "eval", "--data", ds, "--checkpoint", out, "--split", "train",
               "--quiet"] + x).splitlines()[1] for x in ([], ["--normalize", "imagenet"],
                                                         ["--normalize", "dataset"])]
    check("pstrain eval takes it: %s" % ev[0], ev[0] == ev[1] and ev[0] != ev[2])
    try:
        torch2ckpt.convert(sd, src, os.path.join(work, "bad.h5"), normalize="imagenett")
        check("torch2ckpt --normalize imagenett refused", False)
    except torch2ckpt.ImportError_ as ex:
        check("torch2ckpt --normalize imagenett refused: %s" % ex,
              "--normalize" in str(ex) and not os.path.exists(os.path.join(work, "bad.h5")))


def compare(tag, a, b):
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    rel = d.max() / np.abs(b).max()
    agree = int((a.argmax(1) == b.argmax(1)).sum())
    check("%s: max|a-b|/max|b| = %.3g (max|logit| %.3g, tolerance %g), argmax %d/%d"
          % (tag, rel, np.abs(b).max(), TOL, agree, len(b)), a.shape == b.shape and rel <= TOL)


def trained_resnet20(work, ds):
    pstrain = os.environ["PSTRAIN"]
    ck = os.path.join(work, "ck-trained")
    run([pstrain, "train", "--data", ds, "--model", "resnet-20", "--steps", "20", "--batch", "8",
         "--lr", "0.05", "--moving-average-decay", "0.9", "--checkpoint-dir", ck, "--quiet"])
    path = latest(ck)
    x = normalised_train(ds)
    for averages in (False, True):
        tag = "trained resnet-20, %s" % ("moving averages" if averages else "raw variables")
        out = os.path.join(work, "r20-%d.pth" % averages)
        r = subprocess.run([sys.executable, os.path.join(SRC, "data-tools", "ckpt2torch.py"),
                            path, "-o", out] + (["--averages"] if averages else []),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check("%s: ckpt2torch.py exits 0 (%s)" % (tag, r.stdout.strip()), r.returncode == 0)
        model = resnet_cifar(3, 3, 10)
        model.load_state_dict(torch.load(out), strict=True)
        model.eval()
        lpath = os.path.join(work, "logits-%d.npy" % averages)
        run([pstrain, "eval", "--data", ds, "--checkpoint", path, "--split", "train",
             "--logits", lpath, "--quiet"] + ([] if averages else ["--no-averages"]))
        with torch.no_grad():
            b = model(x).numpy()
        compare(tag, np.load(lpath), b)


def refusals(work, ds):
    tool = os.path.join(SRC, "data-tools", "ckpt2torch.py")
    lenet = template(work, "lenet", ds, "lenet5", 8)
    no_avg = template(work, "noavg", ds, "resnet-20", 8)
    bad = os.path.join(work, "not-a-checkpoint.h5")
    with h5py.File(bad, "w") as f:
        f.attrs["format"] = "something-else"
    cases = [([lenet], "model lenet5 has no PyTorch counterpart"),
             ([no_avg, "--averages"], "group /averages is missing"),
             ([bad], "attribute format is 'something-else'"),
             ([os.path.join(work, "missing.h5")], "missing.h5")]
    for args, want in cases:
        out = os.path.join(work, "refused.pth")
        r = subprocess.run([sys.executable, tool] + args + ["-o", out], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        line = r.stderr.strip()
        check("refused (exit %d, one line, nothing written): %s" % (r.returncode, line),
              r.returncode == 1 and want in line and len(line.splitlines()) == 1
              and not os.path.exists(out))


def main():
    work = sys.argv[1]
    rng = np.random.default_rng(20261206)
    d32 = dataset(work, "d32", 32, 3, 10, 16, rng)
    torch.manual_seed(1)
    round_trip(work, "resnet-20", "resnet-20", resnet_cifar(3, 3, 10), d32, 8, 32, 3)
    imported_normalize(work, d32)
    d224 = dataset(work, "d224", 224, 3, 10, 2, rng)
    torch.manual_seed(2)
    round_trip(work, "resnet-50", "resnet-50",
               torchvision.models.resnet50(weights=None, num_classes=10), d224, 2, 224, 3)
    trained_resnet20(work, d32)
    refusals(work, d32)
    if fails:
        sys.exit("FAIL: %d checks" % len(fails))
    print("PASS")


if __name__ == "__main__":
    main()
