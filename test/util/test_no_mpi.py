#!/usr/bin/env python3
"""test_no_mpi.py BUILD_DIR LIBRARY... - the layers below the cluster compile
without MPI: every source of the given static libraries (pstrain-util,
-nn, -data, -train) is run through the preprocessor with the build's own
command (compile_commands.json) and -H, which lists every header it opens
and who opened it. <mpi.h> may be opened only by HDF5's own headers (the
parallel HDF5 of hdf5.h includes it); any other path to it, a pstrain
header or a source including it, fails with the chain of includes.
src/util/version.c, which prints the MPI library's version, is the one
source allowed to include it (test_layering.sh: --mpi-file)."""
import json
import os
import re
import shlex
import subprocess
import sys

build, libs = sys.argv[1], sys.argv[2:]
allowed_sources = {"src/util/version.c"}
entries = json.load(open(os.path.join(build, "compile_commands.json")))
fail = checked = 0
for e in entries:
    lib = re.match(r"lib(pstrain-\w+)\.a\.p/", e["output"])
    if not lib or lib.group(1) not in libs:
        continue
    src = os.path.relpath(os.path.join(e["directory"], e["file"]), os.environ["PSTRAIN_SRC"])
    if src in allowed_sources:
        continue
    argv, skip = [], False
    for a in shlex.split(e["command"]):
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MQ", "-MT"):
            skip = True
        elif a not in ("-MD", "-MMD", "-c") and not a.endswith("ccache"):
            argv.append(a)
    r = subprocess.run(argv + ["-E", "-H", "-o", os.devnull], cwd=e["directory"],
                       capture_output=True, text=True)
    if r.returncode:
        print("FAIL: %s: the preprocessor failed:\n%s" % (src, r.stderr))
        fail = 1
        continue
    checked += 1
    chain = [src]
    for line in r.stderr.splitlines():
        m = re.match(r"^(\.+) (\S+)$", line)
        if not m:
            continue
        depth = len(m.group(1))
        chain = chain[:depth] + [m.group(2)]
        if os.path.basename(m.group(2)) != "mpi.h":
            continue
        opener = os.path.basename(chain[-2])
        if not re.match(r"^(H5\w*|hdf5)\.h$", opener):
            print("FAIL: %s (%s) reaches <mpi.h>: %s" % (src, lib.group(1), " -> ".join(chain)))
            fail = 1
            break
if not checked:
    sys.exit("FAIL: no source of %s in %s/compile_commands.json" % (", ".join(libs), build))
print("%d sources of %s compile without <mpi.h> (but HDF5's)" % (checked, ", ".join(libs)))
sys.exit(fail)
