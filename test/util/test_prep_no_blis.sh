#!/bin/bash
# test_prep_no_blis.sh - pstrain-prep never multiplies a matrix, so it must not
# link BLIS (10 MB of kernels when BLIS is static): no BLIS symbol in the
# binary (defined, or undefined when BLIS is a shared library), no BLIS line
# in its --version. pstrain itself must keep both, which
# also shows that the symbol check can see BLIS when it is there.
set -u
command -v nm >/dev/null || { echo "SKIP: nm not found"; exit 77; }
fail=0
count_blis() { nm "$1" 2>/dev/null | grep -c ' [TtDdBbRrU] bli_'; }
n_prep=$(count_blis "$PSTRAIN_PREP")
n_train=$(count_blis "$PSTRAIN")
echo "BLIS symbols: pstrain-prep $n_prep, pstrain $n_train"
if [ "$n_prep" -ne 0 ]; then
    echo "FAIL: pstrain-prep links BLIS ($n_prep bli_* symbols), e.g.:"
    nm "$PSTRAIN_PREP" | grep ' [TtDdBbRrU] bli_' | head -3
    fail=1
fi
if [ "$n_train" -eq 0 ]; then
    echo "FAIL: no bli_* symbol in pstrain: the check cannot see BLIS (stripped binary?)"
    fail=1
fi
if "$PSTRAIN_PREP" --version | grep -q '^BLIS'; then
    echo "FAIL: pstrain-prep --version prints a BLIS line"
    fail=1
fi
if ! "$PSTRAIN" --version | grep -q '^BLIS .*kernels: '; then
    echo "FAIL: pstrain --version prints no 'BLIS ... kernels:' line"
    fail=1
fi
exit $fail
