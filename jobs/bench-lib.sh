# bench-lib.sh - what the jobs/bench-*.sh scripts share. Each sources it
# first:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
#
# It sets -euo pipefail, changes to the repository root ($top) and sets
# build=${BUILD_DIR:-build}. Then:
#   bench_out DEFAULT      out=${OUT:-DEFAULT}, the directory created
#   bench_build [MESON_OPTION...] -- TARGET...
#                          configures $build when it is not yet (with the
#                          options) and builds the targets; on failure shows
#                          ninja's output and exits 1
#   median                 the median of the numbers on stdin (any number per
#                          line, blanks ignored), or n/a when there are none
#   bench_fashion_h5 PREP OUT.h5
#                          Debian's Fashion-MNIST ($FASHION_MNIST) converted by
#                          the pstrain-prep PREP into OUT.h5, unless it exists;
#                          exits 1 when the idx files are missing
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
build=${BUILD_DIR:-build}
bench_name=$(basename "$0" .sh)

bench_out() {
    out=${OUT:-$1}
    mkdir -p "$out"
}

bench_build() {
    local opts=() log
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        opts+=("$1")
        shift
    done
    [ $# -gt 0 ] && shift
    [ -f "$build/build.ninja" ] || meson setup "$build" "${opts[@]}" >/dev/null
    if ! log=$(ninja -C "$build" "$@" 2>&1); then
        printf '%s\n' "$log" >&2
        echo "$bench_name: build failed" >&2
        exit 1
    fi
}

bench_fashion_h5() {
    local prep=$1 h5=$2 fm=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
    [ -f "$h5" ] && return 0
    [ -f "$fm/train-images-idx3-ubyte.gz" ] || { echo "$bench_name: $fm missing" >&2; exit 1; }
    "$prep" idx --train-images "$fm/train-images-idx3-ubyte.gz" \
        --train-labels "$fm/train-labels-idx1-ubyte.gz" \
        --test-images "$fm/t10k-images-idx3-ubyte.gz" \
        --test-labels "$fm/t10k-labels-idx1-ubyte.gz" -o "$h5" >/dev/null ||
        { echo "$bench_name: pstrain-prep idx failed" >&2; exit 1; }
}

median() {
    tr ' \t' '\n\n' | sort -g | awk 'NF { v[++n] = $1 } END { print (n ? v[int((n + 1) / 2)] : "n/a") }'
}
