#!/usr/bin/env bash
# test_version.sh PROG NAME VERSION HDF5_VERSION PNG_VERSION [COMPONENT...]
#
# `PROG --version` prints what README.md and include/pstrain/version.h say:
# first "NAME VERSION" (the meson project version), then one line per
# component, with the versions the build found (meson's dependency
# versions for HDF5 and libpng), exit 0, nothing on stderr. COMPONENTS
# (default: HDF5 libpng) are the lines that must be there; with BLIS, the
# kernel set named on its line follows PSTRAIN_BLIS_ARCH when pstrain chose
# the kernels, and the slow `generic` set (and only it) adds a warning line.
set -u
prog=${1:?PROG} name=${2:?NAME} version=${3:?VERSION} hdf5=${4:?HDF5_VERSION} png=${5:?PNG_VERSION}
shift 5
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(HDF5 libpng)
export LC_ALL=C
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# run [ENV=VALUE...]: PROG --version into $tmp/out, $tmp/err, $rc
run() {
    env "$@" "$prog" --version >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc = 0 ] || bad "$* $prog --version: exit $rc, expected 0"
    [ ! -s "$tmp/err" ] || bad "$* $prog --version wrote to stderr: $(head -3 "$tmp/err")"
}
line() { grep -E "$1" "$tmp/out"; } # the output's lines matching an ERE

run
cat "$tmp/out"
first=$(head -1 "$tmp/out")
[ "$first" = "$name $version" ] || bad "first line '$first', expected '$name $version'"
for c in "${components[@]}"; do
    case $c in
    HDF5) [ "$(line '^HDF5 ')" = "HDF5     $hdf5" ] || bad "HDF5 line '$(line '^HDF5 ')', expected 'HDF5     $hdf5'" ;;
    libpng) [ "$(line '^libpng ')" = "libpng   $png" ] || bad "libpng line '$(line '^libpng ')', expected 'libpng   $png'" ;;
    MPI) line '^MPI      .+ \(MPI [0-9]+\.[0-9]+\)$' >/dev/null || bad "no 'MPI      <library> (MPI x.y)' line"
        # the library's own string names the version meson found (Open MPI
        # "Open MPI v4.1.4", MPICH "MPICH Version: 4.0.2, device ch4:ucx")
        [ -z "${MPI_LIB_VERSION:-}" ] || line "^MPI      .*[^0-9.]${MPI_LIB_VERSION//./\\.}[^0-9]" >/dev/null ||
            bad "the MPI line '$(line '^MPI ')' does not name the library's version $MPI_LIB_VERSION" ;;
    BLIS) line '^BLIS     [0-9]+\.[0-9]+(\.[0-9]+)?, kernels: [a-z0-9]+ \(chosen by (pstrain from cpuid|BLIS)\)$' >/dev/null ||
        bad "no 'BLIS     <version>, kernels: <set> (chosen by ...)' line" ;;
    *) bad "unknown component $c" ;;
    esac
done
n=$(wc -l <"$tmp/out")
nwarn=$(grep -c '^warning: ' "$tmp/out")
[ "$n" = $((1 + ${#components[@]} + nwarn)) ] ||
    bad "$n lines, expected $((1 + ${#components[@]} + nwarn)): the name line, one per component (${components[*]}), $nwarn warning(s)"

# BLIS: the kernel set on the line is the one in use, and generic warns
if [[ " ${components[*]} " == *" BLIS "* ]]; then
    kernels=$(line '^BLIS ' | sed -E 's/.*kernels: ([a-z0-9]+) .*/\1/')
    if [ "$kernels" = generic ]; then
        line '^warning: BLIS runs its slow generic reference kernels' >/dev/null ||
            bad "generic kernels without the warning line"
    else
        [ -z "$(line '^warning: ')" ] || bad "a warning with $kernels kernels: $(line '^warning: ')"
    fi
    if line 'chosen by pstrain' >/dev/null; then
        for want in haswell generic; do
            run PSTRAIN_BLIS_ARCH=$want
            got=$(line '^BLIS ' | sed -E 's/.*kernels: ([a-z0-9]+) .*/\1/')
            [ "$got" = "$want" ] || bad "PSTRAIN_BLIS_ARCH=$want: the BLIS line names '$got'"
            if [ $want = generic ]; then
                line '^warning: BLIS runs its slow generic reference kernels' >/dev/null ||
                    bad "PSTRAIN_BLIS_ARCH=generic: no warning line"
            else
                [ -z "$(line '^warning: ')" ] || bad "PSTRAIN_BLIS_ARCH=$want: unexpected warning"
            fi
        done
    fi
fi
[ $fail = 0 ] && echo PASS
exit $fail
