#!/usr/bin/env bash
# test_install.sh - pstrain installed like HPC software, used with the source
# and build trees out of reach.
#
#   test_install.sh BUILD_DIR SOURCE_DIR
#
# `meson install --destdir` stages the build's installation, which is then
# moved to another prefix (the modulefile finds the tree where it lies). In
# an environment without the build's paths (env -i: no PSTRAIN* variables,
# PATH of the system only) and, where a private mount namespace can be had
# (root), with the source tree hidden under an empty tmpfs:
#   - `module use PREFIX/share/modulefiles && module load pstrain` (Lmod) puts
#     the programs on PATH, the man pages on MANPATH, the completion on
#     XDG_DATA_DIRS, and sets PSTRAIN_ROOT
#   - `man pstrain-train` (through MANPATH) and `man -l` of every page
#   - the bash completion, sourced and called with COMP_WORDS/COMP_CWORD
#   - the installed prep.sbatch makes a small data set from idx files with the
#     installed pstrain-prep; the installed train.sbatch trains on it under
#     the MPI launcher (root, 1 PS, 2 workers); pstrain eval reads the
#     checkpoint; plot-metrics, timeline-summary and torch2ckpt.py are on PATH
# Skips (77) without Lmod or man-db; fails when the build has no man pages.
set -u
build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)
lmod_init=
for f in /usr/share/lmod/lmod/init/bash /etc/profile.d/lmod.sh; do
    [ -r "$f" ] && { lmod_init=$f; break; }
done
[ -n "$lmod_init" ] || { echo "SKIP: Lmod not installed (Debian package lmod)"; exit 77; }
command -v man >/dev/null || { echo "SKIP: man not installed (Debian package man-db)"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
case $tmp/ in
"$src"/* | "$build"/*) echo "FAIL: the temporary directory $tmp lies in the tree"; exit 1 ;;
esac

# ---- install: stage, then move to the prefix it is used from -----------------
if ! meson install -C "$build" --destdir "$tmp/stage" --no-rebuild --quiet >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "FAIL: meson install"
    exit 1
fi
module=$(find "$tmp/stage" -path '*/modulefiles/pstrain/*.lua' | head -1)
[ -n "$module" ] || { echo "FAIL: no modulefile share/modulefiles/pstrain/VERSION.lua installed"; exit 1; }
staged=${module%/share/modulefiles/pstrain/*}
prefix=$tmp/prefix
mv "$staged" "$prefix"
echo "installed into $prefix:"
(cd "$prefix" && find . -type f | sort | sed 's/^\.\//  /')

# no installed script or text names the build or source tree
if grep -rIl -e "$src" -e "$build" "$prefix" >"$tmp/refs"; then
    echo "FAIL: installed files name the build or source tree:"
    cat "$tmp/refs"
    exit 1
fi

# ---- the checks, run in the installed world ------------------------------------
cp "$(dirname "$0")/check_completion.sh" "$tmp/"
cat >"$tmp/check.sh" <<'EOF'
set -u
prefix=$1 lmod_init=$2 tmp=$3
fail=0
bad() { echo "FAIL: $*"; fail=1; }
say() { echo "== $*"; }

say "module load pstrain"
. "$lmod_init"
module use "$prefix/share/modulefiles"
module load pstrain || bad "module load pstrain failed"
[ "$(command -v pstrain)" = "$prefix/bin/pstrain" ] || bad "pstrain on PATH is '$(command -v pstrain)'"
[ "$(command -v pstrain-prep)" = "$prefix/bin/pstrain-prep" ] || bad "pstrain-prep: '$(command -v pstrain-prep)'"
command -v plot-metrics >/dev/null || bad "plot-metrics not on PATH"
command -v timeline-summary >/dev/null || bad "timeline-summary not on PATH"
command -v torch2ckpt.py >/dev/null || bad "torch2ckpt.py not on PATH"
[ "${PSTRAIN_ROOT:-}" = "$prefix" ] || bad "PSTRAIN_ROOT is '${PSTRAIN_ROOT:-}', expected $prefix"
case :${MANPATH:-}: in *":$prefix/share/man:"*) ;; *) bad "MANPATH '${MANPATH:-}' lacks $prefix/share/man" ;; esac
case :${XDG_DATA_DIRS:-}: in *":$prefix/share:"*) ;; *) bad "XDG_DATA_DIRS '${XDG_DATA_DIRS:-}' lacks $prefix/share" ;; esac
pstrain --version | head -1

say "man pages"
for p in pstrain pstrain-train pstrain-eval pstrain-plan pstrain-prep; do
    f=$prefix/share/man/man1/$p.1
    [ -s "$f" ] || { bad "no man page $f"; continue; }
    man -l "$f" 2>/dev/null | grep -q "^NAME" || bad "man -l $f shows no NAME section"
done
[ "$(man -w pstrain-train 2>/dev/null)" = "$prefix/share/man/man1/pstrain-train.1" ] ||
    bad "man -w pstrain-train: '$(man -w pstrain-train 2>&1)'"
MANWIDTH=200 man pstrain-train 2>/dev/null | grep -q -- "--moving-average-decay D" ||
    bad "man pstrain-train lacks --moving-average-decay"
man -w ls >/dev/null 2>&1 || [ ! -e /usr/share/man/man1/ls.1.gz ] ||
    bad "with the module loaded, man no longer finds the system's pages (MANPATH '$MANPATH')"

say "bash completion"
bash "$tmp/check_completion.sh" "$prefix/share/bash-completion/completions/pstrain" ||
    bad "the installed bash completion"

say "prep.sbatch (installed): a data set from idx files"
mkdir -p "$tmp/idx" "$tmp/work"
python3 - "$tmp/idx" <<'PY' || bad "could not write the idx files"
import gzip, random, struct, sys
# 10 classes of 16x16 images: class k lights a band of rows, plus noise
rnd = random.Random(7)
def write(stem, n):
    labels = [i % 10 for i in range(n)]
    px = bytearray()
    for k in labels:
        for r in range(16):
            for c in range(16):
                px.append(min(255, (200 if r // 2 == k % 8 else 20) + rnd.randrange(40)))
    with gzip.open("%s/%s-images-idx3-ubyte.gz" % (sys.argv[1], stem), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 16, 16) + bytes(px))
    with gzip.open("%s/%s-labels-idx1-ubyte.gz" % (sys.argv[1], stem), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
write("train", 640)
write("t10k", 160)
PY
cd "$tmp/work"
KIND=idx SRC="$tmp/idx" OUT="$tmp/work/small.h5" bash "$prefix/share/pstrain/jobs/prep.sbatch" \
    >"$tmp/prep.log" 2>&1 || { cat "$tmp/prep.log"; bad "prep.sbatch failed"; }
grep -q "small.h5: ok" "$tmp/prep.log" || bad "prep.sbatch: no 'ok' from pstrain-prep verify"

say "train.sbatch (installed): root, 1 PS, 2 workers"
# no PSTRAIN: the script finds the pstrain next to it (PREFIX/bin)
module unload pstrain
[ -z "$(command -v pstrain)" ] || bad "pstrain still on PATH after module unload"
SLURM_NTASKS=4 OVERSUBSCRIBE=1 DATA="$tmp/work/small.h5" MODEL=mlp EPOCHS=2 BATCH=32 \
    OUT="$tmp/work/run" bash "$prefix/share/pstrain/jobs/train.sbatch" >"$tmp/train.log" 2>&1 ||
    { cat "$tmp/train.log"; bad "train.sbatch failed"; }
grep -q "$prefix/bin/pstrain train" "$tmp/train.log" || bad "train.sbatch did not run the installed pstrain"
python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
assert j["workers"] == 2 and j["ps"] == 1, j
assert j["eval_accuracy"] > 0.5, j["eval_accuracy"]
print("summary: %d workers, %d PS, test accuracy %.3f" % (j["workers"], j["ps"], j["eval_accuracy"]))' \
    "$tmp/work/run/summary.json" || bad "summary.json of the run"
module load pstrain
pstrain eval --data "$tmp/work/small.h5" --checkpoint "$tmp/work/run/ckpt" --quiet ||
    bad "pstrain eval of the run's checkpoint"
exit $fail
EOF

# a fresh environment: the system's PATH minus anything of the build, no
# PSTRAIN* variables (env -i); Open MPI's root permission comes from mpiexec.sh
path=$(printf '%s' "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin" | tr ':' '\n' |
    grep -v -e "^$src" -e "^$build" | paste -sd:)
run=(env -i HOME="$tmp" PATH="$path" TERM=dumb LC_ALL=C.UTF-8 TMPDIR="$tmp" bash --norc --noprofile
    "$tmp/check.sh" "$prefix" "$lmod_init" "$tmp")
# with the source tree (and the build in it) hidden, where a mount
# namespace can be had
if unshare --mount --propagation private true 2>/dev/null; then
    echo "(source tree $src hidden under an empty tmpfs)"
    outside=$build
    [ "${build#"$src"/}" = "$build" ] || outside=
    # shellcheck disable=SC2016 # the script's own $1, $2
    unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=1m none "$1" &&
        { [ -z "$2" ] || mount -t tmpfs -o size=1m none "$2"; } && shift 2 && exec "$@"' \
        sh "$src" "$outside" "${run[@]}"
else
    echo "(no mount namespace: the source tree stays visible, only unnamed)"
    "${run[@]}"
fi
rc=$?
[ $rc = 0 ] && echo PASS || echo FAILED
exit $rc
