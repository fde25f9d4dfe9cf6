# mlp_runs.sh (sourced) - the set-up the layout tests share: a temporary
# directory with a small 8x8x1 data set, the mlp arguments, and
#   train NAME NP ARGS...  one run under the MPI launcher -> NAME.bin
#                          (parameters), NAME.log (output), NAME.json
#                          (summary), NAME.jsonl (example trace)
#   same NAME REF          NAME's parameters bitwise equal to REF's
#   refuse NAME NP TEXT ARGS...  the run exits 1 within 60 s with one error
#                          line on the root containing TEXT
#   map NAME LINE...       the root's rank -> host -> role map in NAME.log has
#                          exactly these host lines
#   bad MESSAGE            report a failure (the test exits 1 at its end)
# Environment (test_env): PSTRAIN, TEST_DIST (mkdata), PSTRAIN_SRC, MPIEXEC,
# MPI_FLAVOUR. Sets TMP, ARGS, fail.
: "${PSTRAIN:?}" "${TEST_DIST:?}" "${PSTRAIN_SRC:?}"
. "$PSTRAIN_SRC/jobs/mpiexec.sh"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-layout.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail=0
bad() {
    echo "FAIL: $*"
    fail=1
}
"$TEST_DIST" mkdata "$TMP/small.h5" 600 100 8 8 1 4 >/dev/null || {
    echo "FAIL: mkdata"
    exit 1
}
ARGS=(--data "$TMP/small.h5" --model mlp --batch 16 --epochs 2 --lr 0.05 --log-every 100
    --prep-threads 1)
train() {
    local name=$1 np=$2
    shift 2
    timeout 120 "${MPIEXEC_CMD[@]}" -n "$np" "$PSTRAIN" train "${ARGS[@]}" "$@" \
        --dump-params "$TMP/$name.bin" --summary-json "$TMP/$name.json" \
        --trace-examples "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 ||
        { tail -5 "$TMP/$name.log"; bad "$name: exit $?"; }
}
same() {
    cmp "$TMP/$2.bin" "$TMP/$1.bin" || bad "$1: parameters differ from $2"
}
refuse() {
    local name=$1 np=$2 text=$3 rc
    shift 3
    timeout 60 "${MPIEXEC_CMD[@]}" -n "$np" "$PSTRAIN" train "${ARGS[@]}" "$@" >"$TMP/$name.log" 2>&1
    rc=$?
    [ $rc = 1 ] || bad "$name: exit $rc, expected 1"
    [ "$(grep -c '^pstrain train: ' "$TMP/$name.log")" = 1 ] || bad "$name: not one error line"
    grep -qF "pstrain train: $text" "$TMP/$name.log" || { cat "$TMP/$name.log"; bad "$name: no '$text'"; }
}
map() {
    local name=$1
    shift
    printf '%s\n' "$@" >"$TMP/want.map"
    sed -n 's/^\[ *[0-9.]*s\] \(host .*\)$/\1/p' "$TMP/$name.log" >"$TMP/got.map"
    cmp -s "$TMP/want.map" "$TMP/got.map" ||
        { echo "expected:"; cat "$TMP/want.map"; echo "got:"; cat "$TMP/got.map"; bad "$name: the map"; }
}
