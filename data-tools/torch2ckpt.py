#!/usr/bin/python3
"""torch2ckpt.py - import PyTorch / torchvision weights into a pstrain checkpoint.

    torch2ckpt.py --template CKPT.h5 -o OUT.h5 WEIGHTS.pth [--rename TORCH=PSTRAIN ...]
                  [--normalize dataset|imagenet|M1,M2,M3/S1,S2,S3]

WEIGHTS.pth is what torch.save wrote: a state_dict (torchvision's downloadable
weights are one) or a whole nn.Module. CKPT.h5 is a checkpoint pstrain wrote for
the same model, image shape and class count (any step; make one with
`pstrain train --data D.h5 --model M --steps 1 --lr 0 --optimizer sgd
--checkpoint-dir DIR`). OUT.h5 is that checkpoint with every variable replaced by
the imported weight: pstrain eval, or train --resume, takes it like any other.

Names (docs/torchvision.md): the torch module path with '/' for '.', then
  Conv2d    weight [K][C][KH][KW] -> kernel [KH][KW][C][K]   bias -> bias
  Linear    weight [out][in]      -> kernel [in][out]        bias -> bias
  BatchNorm weight -> gamma, bias -> beta, running_mean -> moving_mean,
            running_var -> moving_variance (num_batches_tracked is dropped)
e.g. torchvision resnet50 `layer1.0.conv1.weight` -> `layer1/0/conv1/kernel`.
--rename TORCH=PSTRAIN replaces a leading module path first (repeatable).
Every variable of the template must receive exactly one weight of its shape and
every weight must find its variable, or nothing is written (exit 1). Optimizer
slots are zeroed; moving averages (/averages, if present) get the imported
values too. A Linear layer that follows a flatten of a spatial map (not a
global pool) would need its rows reordered from torch's CHW to pstrain's HWC
order: that case is not handled (torchvision's models pool globally first).
--normalize records the input normalisation the weights expect in OUT.h5's
attribute normalize (torchvision's pretrained weights: imagenet), which pstrain
eval and train --resume then use; without it OUT.h5 keeps the template's.

Needs Debian's python3-torch and python3-h5py (run with /usr/bin/python3).
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

import numpy as np

FORMAT = "pstrain-checkpoint"

BN_LEAVES = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean",
             "running_var": "moving_variance"}


class ImportError_(Exception):
    """A mapping or template problem, reported as one line."""


def _apply_renames(module, renames):
    for old, new in renames:
        if module == old or module.startswith(old + "."):
            return new + module[len(old):]
    return module


def mapping(state_dict, renames=()):
    """[(torch key, pstrain variable name, array in pstrain's layout)] for a
    state_dict of tensors or arrays; raises ImportError_ for a key without a
    rule."""
    arrays = {k: (v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v))
              for k, v in state_dict.items()}
    out = []
    for key, a in arrays.items():
        module, _, leaf = key.rpartition(".")
        if leaf == "num_batches_tracked":
            continue
        is_bn = module + ".running_mean" in arrays if module else "running_mean" in arrays
        if is_bn:
            if leaf not in BN_LEAVES:
                raise ImportError_("%s: no rule for batch-norm entry '%s'" % (key, leaf))
            name, value = BN_LEAVES[leaf], a
        elif leaf == "weight" and a.ndim == 4:
            name, value = "kernel", a.transpose(2, 3, 1, 0)  # [K][C][KH][KW] -> [KH][KW][C][K]
        elif leaf == "weight" and a.ndim == 2:
            name, value = "kernel", a.transpose(1, 0)  # [out][in] -> [in][out]
        elif leaf == "bias" and a.ndim == 1:
            name, value = "bias", a
        else:
            raise ImportError_("%s: no rule for a %dD '%s' (expected conv, linear or batch-norm "
                               "parameters)" % (key, a.ndim, leaf))
        path = _apply_renames(module, renames).replace(".", "/")
        # a copy: the arrays of a live model share its tensors' memory
        out.append((key, (path + "/" if path else "") + name,
                    np.array(value, dtype=np.float32, order="C", copy=True)))
    return out


def _datasets(group):
    names = []
    group.visititems(lambda n, o: names.append(n) if hasattr(o, "shape") else None)
    return names


# the spelling --normalize takes (pstrain checks the values when it reads them)
_NUMS = r"[0-9.eE+-]+(,[0-9.eE+-]+){0,3}"
NORMALIZE = re.compile(r"^(dataset|imagenet|%s/%s)$" % (_NUMS, _NUMS))


def convert(state_dict, template, out, renames=(), normalize=None):
    """Writes `out`: `template` with every variable replaced from state_dict
    (and attribute normalize set to `normalize` unless None). Returns the
    number of variables written."""
    import h5py

    if normalize is not None and not NORMALIZE.match(normalize):
        raise ImportError_("--normalize: expected dataset, imagenet or M1,M2,M3/S1,S2,S3, "
                           "got '%s'" % normalize)

    rows = mapping(state_dict, renames)
    by_name = {}
    for key, name, value in rows:
        if name in by_name:
            raise ImportError_("%s and %s both map to variable %s" % (by_name[name][0], key, name))
        by_name[name] = (key, value)
    with h5py.File(template, "r") as t:
        fmt = t.attrs.get("format")
        if isinstance(fmt, bytes):
            fmt = fmt.decode()
        if fmt != FORMAT:
            raise ImportError_("%s: attribute format is %r, expected '%s' (a pstrain checkpoint)"
                               % (template, fmt, FORMAT))
        if "variables" not in t:
            raise ImportError_("%s: group /variables is missing" % template)
        want = {n: tuple(t["variables"][n].shape) for n in _datasets(t["variables"])}
    missing = sorted(set(want) - set(by_name))
    extra = sorted(set(by_name) - set(want))
    if missing:
        raise ImportError_("%s: variable %s of the template has no weight (%d missing%s)"
                           % (template, missing[0], len(missing),
                              ", e.g. " + ", ".join(missing[1:4]) if len(missing) > 1 else ""))
    if extra:
        raise ImportError_("weight %s maps to %s, which is not a variable of %s (%d such)"
                           % (by_name[extra[0]][0], extra[0], template, len(extra)))
    for name, shape in sorted(want.items()):
        got = by_name[name][1].shape
        if got != shape:
            raise ImportError_("weight %s has shape %s in pstrain's layout, variable %s of %s "
                               "has %s" % (by_name[name][0], list(got), name, template, list(shape)))
    d = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(out) + ".tmp.", dir=d)
    os.close(fd)
    try:
        shutil.copyfile(template, tmp)
        with h5py.File(tmp, "r+") as f:
            for group in ("variables", "averages"):
                if group in f:
                    for name in _datasets(f[group]):
                        if name in by_name:
                            f[group][name][...] = by_name[name][1]
            if "slots" in f:
                for name in _datasets(f["slots"]):
                    f["slots"][name][...] = 0
            if normalize is not None:
                f.attrs["normalize"] = np.bytes_(normalize)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(want)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("weights", help="torch.save file: a state_dict or an nn.Module")
    ap.add_argument("--template", required=True, help="a pstrain checkpoint of the same model")
    ap.add_argument("-o", "--output", required=True, help="the checkpoint to write")
    ap.add_argument("--rename", action="append", default=[], metavar="TORCH=PSTRAIN",
                    help="replace a leading torch module path (repeatable)")
    ap.add_argument("--normalize", metavar="N",
                    help="the input normalisation the weights expect (dataset, imagenet or "
                         "M1,M2,M3/S1,S2,S3), recorded in the output")
    a = ap.parse_args(argv)
    renames = []
    for r in a.rename:
        old, sep, new = r.partition("=")
        if not sep or not old:
            ap.error("--rename: expected TORCH=PSTRAIN, got '%s'" % r)
        renames.append((old, new))
    prog = "torch2ckpt.py"
    try:
        import torch

        sd = torch.load(a.weights, map_location="cpu")
        if hasattr(sd, "state_dict"):
            sd = sd.state_dict()
        if not isinstance(sd, dict):
            raise ImportError_("%s: expected a state_dict or an nn.Module, got %s"
                               % (a.weights, type(sd).__name__))
        n = convert(sd, a.template, a.output, renames, a.normalize)
    except ImportError_ as ex:
        print("%s: %s" % (prog, ex), file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as ex:
        print("%s: %s" % (prog, ex), file=sys.stderr)
        return 1
    print("%s: %d variables from %s -> %s" % (prog, n, a.weights, a.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
