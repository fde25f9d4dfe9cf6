#!/usr/bin/python3
"""ckpt2torch.py - export a pstrain checkpoint as a PyTorch state_dict.

    ckpt2torch.py CKPT.h5 -o OUT.pth [--averages] [--rename PSTRAIN=TORCH ...]

CKPT.h5 is a checkpoint of a model with a PyTorch counterpart (resnet-20 and
resnet-56: the peer's resnet_cifar; resnet-50: torchvision's resnet50;
inception-v3: torchvision's inception_v3 without auxiliary logits;
inception-mini: test/torch/torch_ref.py). OUT.pth is what torch.save writes of
an OrderedDict of tensors: `model.load_state_dict(torch.load("OUT.pth"))`.
--averages exports the checkpoint's moving averages (/averages, written under
--moving-average-decay: what pstrain eval uses by default) instead of the raw
variables; a checkpoint without them is refused.

The rule is torch2ckpt.py's read backwards (docs/torchvision.md): a variable
`MODULE/PATH/leaf` becomes `MODULE.PATH.leaf'` with
  kernel [KH][KW][C][K] -> weight [K][C][KH][KW]     bias -> bias
  kernel [in][out]      -> weight [out][in]
  gamma -> weight, beta -> bias, moving_mean -> running_mean,
  moving_variance -> running_var, and num_batches_tracked (int64) = the
  checkpoint's global_step for every batch norm.
--rename PSTRAIN=TORCH replaces a leading module path (with '/') first. The
file is written to a temporary in OUT's directory and renamed; on an error one
line names it, the exit status is 1 and nothing is written.

Needs Debian's python3-torch and python3-h5py (run with /usr/bin/python3).
"""
import argparse
import collections
import os
import sys
import tempfile

import numpy as np

FORMAT = "pstrain-checkpoint"
# models whose variables carry their PyTorch counterpart's module paths and
# whose layouts differ only by the transposes above (lenet5 and mlp flatten a
# spatial map into a dense layer: their rows would need reordering)
MODELS = ("resnet-20", "resnet-56", "resnet-50", "inception-v3", "inception-mini")
BN_LEAVES = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
             "moving_variance": "running_var"}


class ExportError(Exception):
    """A checkpoint problem, reported as one line."""


def _str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def _datasets(group):
    names = []
    group.visititems(lambda n, o: names.append(n) if hasattr(o, "shape") else None)
    return names


def _apply_renames(path, renames):
    for old, new in renames:
        if path == old or path.startswith(old + "/"):
            return new + path[len(old):]
    return path


def torch_entry(name, a):
    """(torch key, array in torch's layout) of pstrain variable `name`."""
    path, _, leaf = name.rpartition("/")
    prefix = path.replace("/", ".") + "." if path else ""
    if leaf in BN_LEAVES:
        return prefix + BN_LEAVES[leaf], a
    if leaf == "kernel" and a.ndim == 4:
        return prefix + "weight", a.transpose(3, 2, 0, 1)  # [KH][KW][C][K] -> [K][C][KH][KW]
    if leaf == "kernel" and a.ndim == 2:
        return prefix + "weight", a.transpose(1, 0)  # [in][out] -> [out][in]
    if leaf == "bias" and a.ndim == 1:
        return prefix + "bias", a
    raise ExportError("variable %s: no rule for a %dD '%s' (expected kernel, bias, gamma, beta, "
                      "moving_mean or moving_variance)" % (name, a.ndim, leaf))


def export(ckpt, averages=False, renames=()):
    """The state_dict (an OrderedDict of tensors, in the checkpoint's order of
    variables) of checkpoint `ckpt`."""
    import h5py
    import torch

    try:
        f = h5py.File(ckpt, "r")
    except OSError as ex:
        raise ExportError("%s: %s" % (ckpt, ex))
    with f:
        fmt = _str(f.attrs.get("format", ""))
        if fmt != FORMAT:
            raise ExportError("%s: attribute format is %r, expected '%s' (a pstrain checkpoint)"
                              % (ckpt, fmt, FORMAT))
        model = _str(f.attrs.get("model_name", ""))
        if model not in MODELS:
            raise ExportError("%s: model %s has no PyTorch counterpart, expected one of %s"
                              % (ckpt, model, ", ".join(MODELS)))
        group = "averages" if averages else "variables"
        if group not in f:
            raise ExportError("%s: group /%s is missing%s" % (
                ckpt, group, " (the run had no --moving-average-decay)" if averages else ""))
        step = int(f.attrs.get("global_step", 0))
        sd = collections.OrderedDict()
        bn = []
        for name in _datasets(f[group]):
            a = np.asarray(f[group][name][...])
            if a.dtype != np.float32:
                raise ExportError("%s: /%s/%s is %s, expected float32" % (ckpt, group, name,
                                                                          a.dtype))
            key, value = torch_entry(_apply_renames(name, renames), a)
            if key in sd:
                raise ExportError("%s: two variables map to %s" % (ckpt, key))
            sd[key] = torch.from_numpy(np.ascontiguousarray(value))
            if name.endswith("/moving_variance") or name == "moving_variance":
                bn.append(key[:-len("running_var")])
    for prefix in bn:
        sd[prefix + "num_batches_tracked"] = torch.tensor(step, dtype=torch.int64)
    return sd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("checkpoint", help="a pstrain checkpoint file")
    ap.add_argument("-o", "--output", required=True, help="the .pth file to write")
    ap.add_argument("--averages", action="store_true",
                    help="export the moving averages instead of the raw variables")
    ap.add_argument("--rename", action="append", default=[], metavar="PSTRAIN=TORCH",
                    help="replace a leading pstrain module path (repeatable)")
    a = ap.parse_args(argv)
    renames = []
    for r in a.rename:
        old, sep, new = r.partition("=")
        if not sep or not old:
            ap.error("--rename: expected PSTRAIN=TORCH, got '%s'" % r)
        renames.append((old, new))
    prog = "ckpt2torch.py"
    try:
        import torch

        sd = export(a.checkpoint, a.averages, renames)
        d = os.path.dirname(os.path.abspath(a.output))
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(a.output) + ".tmp.", dir=d)
        os.close(fd)
        try:
            torch.save(sd, tmp)
            os.replace(tmp, a.output)
        except BaseException:
            os.unlink(tmp)
            raise
    except ExportError as ex:
        print("%s: %s" % (prog, ex), file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as ex:
        print("%s: %s" % (prog, ex), file=sys.stderr)
        return 1
    print("%s: %d tensors from %s%s -> %s" % (prog, len(sd), a.checkpoint,
                                             " (moving averages)" if a.averages else "",
                                             a.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
