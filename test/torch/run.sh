#!/usr/bin/env bash
# Runs a Python test of this directory with Debian's interpreter, which has
# python3-torch, python3-torchvision and python3-h5py (CI installs them; the
# first python3 on PATH may be another one). Skips (77) where they are
# missing.  run.sh SCRIPT.py ARGS...  (a fresh work directory is appended)
set -u
py=/usr/bin/python3
if ! "$py" -c 'import torch, torchvision, h5py, numpy' 2>/dev/null; then
    echo "SKIP: $py cannot import torch, torchvision, h5py and numpy (Debian packages" \
        "python3-torchvision python3-h5py)"
    exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/test-torch.XXXXXX")
trap 'rm -rf "$work"' EXIT
script=$1
shift
# one thread: the reference's speed is irrelevant here and the machine is shared
OMP_NUM_THREADS=1 "$py" "$script" "$@" "$work"
