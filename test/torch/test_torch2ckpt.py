#!/usr/bin/python3
"""data-tools/torch2ckpt.py: the name mapping and layouts, a round trip through
a checkpoint pstrain reads, and the refusals (nothing written on any of them).

    test_torch2ckpt.py WORKDIR   (PSTRAIN, PSTRAIN_PREP, PSTRAIN_SRC in the environment)
"""
import contextlib
import io
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn

SRC = os.environ["PSTRAIN_SRC"]
sys.path.insert(0, os.path.join(SRC, "data-tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch2ckpt  # noqa: E402
from xcheck import write_png  # noqa: E402

fails = []


def check(msg, ok):
    print(("ok   " if ok else "FAIL ") + msg)
    if not ok:
        fails.append(msg)


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main():
    work = sys.argv[1]
    pstrain, prep = os.environ["PSTRAIN"], os.environ["PSTRAIN_PREP"]

    # ---- the mapping rules on a module with every kind of parameter ----
    torch.manual_seed(1)
    m = nn.Module()
    m.block = nn.Module()
    m.block.conv = nn.Conv2d(3, 5, (2, 4), bias=True)
    m.block.bn = nn.BatchNorm2d(5)
    m.fc = nn.Linear(7, 4)
    sd = m.state_dict()
    rows = {name: (key, v) for key, name, v in torch2ckpt.mapping(sd)}
    check("names: %s" % sorted(rows), sorted(rows) == sorted([
        "block/conv/kernel", "block/conv/bias", "block/bn/gamma", "block/bn/beta",
        "block/bn/moving_mean", "block/bn/moving_variance", "fc/kernel", "fc/bias"]))
    w = sd["block.conv.weight"].numpy()
    k = rows["block/conv/kernel"][1]
    check("conv kernel [KH][KW][C][K] = %s" % (k.shape,), k.shape == (2, 4, 3, 5))
    check("conv kernel[kh][kw][c][k] == weight[k][c][kh][kw]",
          all(k[1, 3, 2, 4] == w[4, 2, 1, 3] for _ in [0]) and np.array_equal(k, w.transpose(2, 3, 1, 0)))
    check("dense kernel [in][out]", np.array_equal(rows["fc/kernel"][1], sd["fc.weight"].numpy().T))
    check("bn running_var -> moving_variance",
          rows["block/bn/moving_variance"][0] == "block.bn.running_var")
    check("float32 and contiguous", all(v.dtype == np.float32 and v.flags.c_contiguous
                                        for _, v in rows.values()))
    live = {n: v for _, n, v in torch2ckpt.mapping(m.state_dict())}
    with torch.no_grad():
        m.block.bn.running_mean.add_(1.0)
        m.fc.bias.add_(1.0)
    check("mapping returns copies, not views of the live model's tensors",
          not live["block/bn/moving_mean"].any() and
          np.array_equal(live["fc/bias"], rows["fc/bias"][1]))
    ren = {n for _, n, _ in torch2ckpt.mapping(sd, [("block", "tower/0")])}
    check("--rename block=tower/0", "tower/0/conv/kernel" in ren and "fc/bias" in ren)
    try:
        torch2ckpt.mapping({"x.weight": torch.zeros(2, 2, 2)})
        check("a 3-D weight is refused", False)
    except torch2ckpt.ImportError_ as ex:
        check("a 3-D weight is refused: %s" % ex, "x.weight" in str(ex))

    # ---- a round trip through an mlp checkpoint pstrain wrote ----
    tree = os.path.join(work, "png")
    rng = np.random.default_rng(3)
    for c in range(3):
        os.makedirs(os.path.join(tree, "k%d" % c))
        write_png(os.path.join(tree, "k%d" % c, "a.png"),
                  rng.integers(0, 256, size=(6, 5, 1), dtype=np.uint8))
    ds = os.path.join(work, "d.h5")
    r = run([prep, "png", tree, "--channels", "1", "-o", ds])
    if r.returncode:
        sys.exit("pstrain-prep: " + r.stdout)
    ck = os.path.join(work, "ck")
    r = run([pstrain, "train", "--data", ds, "--model", "mlp", "--steps", "1", "--batch", "3",
             "--optimizer", "momentum", "--checkpoint-dir", ck, "--quiet"])
    if r.returncode:
        sys.exit("pstrain train: " + r.stdout)
    template = os.path.join(ck, "ckpt-1.h5")

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.logits = nn.Linear(30, 256), nn.Linear(256, 256), nn.Linear(256, 3)

    net = MLP()
    wfile = os.path.join(work, "w.pth")
    torch.save(net.state_dict(), wfile)
    out = os.path.join(work, "imported.h5")
    tool = os.path.join(SRC, "data-tools", "torch2ckpt.py")
    r = run([sys.executable, tool, wfile, "--template", template, "-o", out])
    check("torch2ckpt.py exits 0: %s" % r.stdout.strip(), r.returncode == 0)
    with h5py.File(out, "r") as f:
        check("fc2/kernel is fc2.weight transposed",
              np.array_equal(f["variables/fc2/kernel"][:], net.fc2.weight.detach().numpy().T))
        check("logits/bias", np.array_equal(f["variables/logits/bias"][:], net.logits.bias.detach().numpy()))
        slots = []
        f["slots"].visititems(lambda n, o: slots.append(o[...]) if hasattr(o, "shape") else None)
        check("%d optimizer slots, all zero" % len(slots), slots and all(not s.any() for s in slots))
        check("the template's attributes are kept", f.attrs["model_name"] in ("mlp", b"mlp"))
    r = run([pstrain, "eval", "--data", ds, "--checkpoint", out, "--split", "train", "--quiet"])
    check("pstrain eval reads the imported checkpoint: %s" % r.stdout.strip().split("\n")[-1],
          r.returncode == 0)

    # ---- refusals: one line, exit 1, nothing written (main() in this
    # process: one torch import instead of one per case) ----
    def refused(what, args, expect):
        o = os.path.join(work, "refused.h5")
        err, out_ = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out_):
            rc = torch2ckpt.main(args + ["-o", o])
        lines = (out_.getvalue() + err.getvalue()).strip().split("\n")
        left = [n for n in os.listdir(work) if n.startswith("refused") or n.startswith(".refused")]
        check("%s: exit %d, %r" % (what, rc, lines[-1]),
              rc == 1 and len(lines) == 1 and expect in lines[0] and not left)

    net2 = MLP()
    net2.fc2 = nn.Linear(256, 128)
    torch.save(net2.state_dict(), os.path.join(work, "shape.pth"))
    refused("a shape mismatch", [os.path.join(work, "shape.pth"), "--template", template],
            "weight fc2.bias has shape [128] in pstrain's layout, variable fc2/bias of")
    sd = net.state_dict()
    del sd["fc1.bias"]
    torch.save(sd, os.path.join(work, "missing.pth"))
    refused("a missing weight", [os.path.join(work, "missing.pth"), "--template", template],
            "variable fc1/bias of the template has no weight")
    sd = net.state_dict()
    sd["extra.weight"] = torch.zeros(2, 2)
    torch.save(sd, os.path.join(work, "extra.pth"))
    refused("an extra weight", [os.path.join(work, "extra.pth"), "--template", template],
            "weight extra.weight maps to extra/kernel, which is not a variable")
    refused("a data set as the template", [wfile, "--template", ds],
            "expected 'pstrain-checkpoint'")
    refused("two weights for one variable", [wfile, "--template", template, "--rename", "fc2=fc1"],
            "both map to variable fc1/")
    if fails:
        sys.exit("%d checks failed" % len(fails))
    print("PASS")


if __name__ == "__main__":
    main()
