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

median() {
    tr ' \t' '\n\n' | sort -g | awk 'NF { v[++n] = $1 } END { print (n ? v[int((n + 1) / 2)] : "n/a") }'
}
