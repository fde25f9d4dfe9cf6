#!/usr/bin/env bash
# test_configure_mpi.sh - meson's -Dmpi: configure refuses an HDF5 built
# with another MPI than the chosen one, and a flavour without its parallel
# HDF5, each with a message naming what to install or choose; the matching
# pair configures. pkg-config sees a private directory of .pc files copied
# from the system's (PKG_CONFIG_LIBDIR), so the mismatch is made without
# touching the machine. Skips (77) where Open MPI's or MPICH's .pc files
# (with their HDF5s) are not installed.
set -u
src=${PSTRAIN_SRC:?}
pcdir=$(pkg-config --variable pc_path pkg-config | tr ':' '\n' |
    while read -r d; do [ -f "$d/hdf5-mpich.pc" ] && echo "$d" && break; done)
for pc in ompi-c ompi mpich hdf5-openmpi hdf5-mpich; do
    [ -n "$pcdir" ] && [ -f "$pcdir/$pc.pc" ] || { echo "SKIP: no $pc.pc (both MPIs and their HDF5s are needed)"; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-configure-mpi.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# setup NAME PCS... -- MESON_OPTIONS...: meson setup with only the listed
# .pc files visible (hdf5=X.pc installs X.pc as hdf5.pc); output in $tmp/NAME.log
setup() {
    local name=$1 d=$tmp/$1-pc
    shift
    mkdir -p "$d"
    while [ "$1" != -- ]; do
        case $1 in
        *=*) cp "$pcdir/${1#*=}" "$d/${1%%=*}.pc" ;;
        *) cp "$pcdir/$1.pc" "$d/" ;;
        esac
        shift
    done
    shift
    for other in libpng libpng16 zlib libdeflate libjpeg blis; do
        [ -f "$pcdir/$other.pc" ] && cp "$pcdir/$other.pc" "$d/"
    done
    PKG_CONFIG_LIBDIR=$d PKG_CONFIG_PATH= timeout 120 meson setup "$tmp/$name" "$src" -Dtests=false "$@" \
        >"$tmp/$name.log" 2>&1
}
expect_error() { # NAME REGEX
    if grep -qE "ERROR: .*$2" "$tmp/$1.log"; then
        echo "  $1: $(grep -m1 -E 'ERROR: ' "$tmp/$1.log" | sed 's/.*ERROR: //')"
    else
        bad "$1: no error matching '$2':"
        tail -5 "$tmp/$1.log"
    fi
}

echo "-Dmpi=auto, mpi.pc Open MPI's, hdf5.pc MPICH's: refused"
setup auto-mismatch ompi-c ompi mpi=ompi-c.pc mpich hdf5=hdf5-mpich.pc -- -Dmpi=auto &&
    bad "auto-mismatch: configured"
expect_error auto-mismatch "the MPI is openmpi but HDF5 was built with mpich"

echo "-Dmpi=mpich without MPICH's HDF5: refused"
setup mpich-nohdf5 mpich ompi hdf5-openmpi -- -Dmpi=mpich && bad "mpich-nohdf5: configured"
expect_error mpich-nohdf5 "no parallel HDF5 for this MPI .*libhdf5-mpich-dev"

echo "-Dmpi=mpich with MPICH's HDF5: configures"
setup mpich-ok mpich hdf5-mpich -- -Dmpi=mpich || { bad "mpich-ok: refused"; tail -5 "$tmp/mpich-ok.log"; }
grep -E "MPI *: mpich" "$tmp/mpich-ok.log" || bad "mpich-ok: the summary does not name mpich"
exit $fail
