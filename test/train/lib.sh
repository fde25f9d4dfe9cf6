# lib.sh - shared by the end-to-end scripts of test/train (sourced).
# Arguments of every script (test/train/meson.build): FM_H5 MKDATA CKPT_CHECK
#   FM_H5       Fashion-MNIST converted by pstrain-prep idx ('' when absent)
#   MKDATA      mkdata OUT.h5 NTRAIN NTEST H W C K [label-range]
#   CKPT_CHECK  ckpt_check FILE.h5: exit 0 (and print the step) if it verifies
# Environment (test_env): PSTRAIN, PSTRAIN_PREP; MPIEXEC and MPI_FLAVOUR for
# jobs/mpiexec.sh, which this sources: "${MPIEXEC_CMD[@]}" -n N launches.
set -u
FM=${1:-}
MKDATA=${2:?mkdata path}
CKPT_CHECK=${3:?ckpt_check path}
: "${PSTRAIN:?PSTRAIN not set (run through meson test)}"
: "${PSTRAIN_PREP:?PSTRAIN_PREP not set}"
. "$(dirname "${BASH_SOURCE[0]}")/../../jobs/mpiexec.sh"
export LC_ALL=C

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-train.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
t_start=$(date +%s.%N)

say() { echo "[$(awk -v s="$t_start" -v n="$(date +%s.%N)" 'BEGIN {printf "%6.1f", n - s}')s] $*"; }
bad() { echo "FAIL: $*"; fail=1; }
check() { # message, command...
    local msg=$1
    shift
    if ! "$@"; then bad "$msg"; fi
}
finish() {
    if [ "$fail" = 0 ]; then say "PASS"; else say "FAILED"; fi
    exit "$fail"
}
need_fm() {
    if [ -z "$FM" ] || [ ! -s "$FM" ]; then
        echo "SKIP: Fashion-MNIST not prepared (Debian package dataset-fashion-mnist missing?)"
        exit 77
    fi
}
need_h5diff() {
    command -v h5diff >/dev/null || {
        echo "SKIP: h5diff not installed (Debian package hdf5-tools)"
        exit 77
    }
}

# jget FILE EXPR: python3 expression over the JSON object `j` of FILE, printed
# (floats with repr, so that equal strings mean equal numbers).
jget() {
    python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(repr(v) if isinstance(v, float) else v)' "$1" "$2"
}

# pyok MESSAGE PYTHON-CODE ARGS...: the code (argv in sys.argv[1:]) must exit
# 0; whatever it prints is shown on failure.
pyok() {
    local msg=$1 code=$2 out
    shift 2
    if ! out=$(python3 -c "$code" "$@" 2>&1); then
        bad "$msg"
        printf '%s\n' "$out" | sed 's/^/    /' | head -20
    fi
}

# train LOG ARGS...: pstrain train with ARGS, stdout+stderr to LOG; returns
# its exit status and shows the log's tail when it fails.
train() {
    local log=$1 rc
    shift
    nice "$PSTRAIN" train "$@" >"$log" 2>&1
    rc=$?
    if [ $rc != 0 ]; then
        echo "pstrain train $* exited $rc:"
        tail -5 "$log" | sed 's/^/    /'
    fi
    return $rc
}

# run LOG ARGS...: "${launch[@]}" ARGS (the caller's launcher array: pstrain
# itself, or the MPI launcher ... pstrain), output to LOG, tail on failure
run() {
    local log=$1 rc
    shift
    nice "${launch[@]}" "$@" >"$log" 2>&1
    rc=$?
    if [ $rc != 0 ]; then
        echo "pstrain $* exited $rc:"
        tail -5 "$log" | sed 's/^/    /'
    fi
    return $rc
}

# same_vars A.h5 B.h5: /variables and /slots (when either has optimizer
# slots) of two checkpoints are bitwise equal (h5diff without tolerance: 0
# differences). Prints h5diff's report when they are not.
same_vars() {
    local g out rc=0 groups=/variables
    if has_slots "$1" || has_slots "$2"; then groups="/variables /slots"; fi
    for g in $groups; do
        if ! out=$(h5diff -r "$1" "$2" "$g" "$g" 2>&1); then
            echo "    h5diff $1 $2 $g:"
            printf '%s\n' "$out" | grep -v '^$' | tail -8 | sed 's/^/      /'
            rc=1
        fi
    done
    return $rc
}

# has_slots FILE: the checkpoint has an optimizer slot group with datasets
has_slots() { h5ls -r "$1/slots" 2>/dev/null | grep -q Dataset; }

# crash_free FILE: no sign of a crash or a sanitizer report in FILE
crash_free() {
    ! grep -Eqi 'segmentation|sanitizer|runtime error|core dumped|aborted|assert|double free|stack smashing|internal error' "$1"
}
