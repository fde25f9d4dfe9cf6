#!/usr/bin/env bash
# PNG-tree conversion: `pstrain-prep png` vs the PIL + h5py peer
# (prep_peer.py, not part of this repository: PEER=path), on Fashion-MNIST written out as PNG trees by
# test/png/make_png_tree:
#   - 10,000 gray 28x28 PNGs, kept at 28x28x1
#   - 5,000 RGB 32x32 PNGs, shrunk to 24x24x3 (area averaging / PIL BOX)
# Same output layout on both sides: chunks of 1024 images, shuffle + deflate 4,
# per-channel mean/std. Runs alternate; prints the median images/s of ROUNDS
# runs each (time inside each tool: listing, decoding, HDF5 writing).
#
#   bash jobs/bench-png.sh [ROUNDS]          (default 3)
#   BUILD_DIR=build-x OUT=out/bench-png PEER=/path/prep_peer.py bash jobs/bench-png.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
rounds=${1:-3}
bench_out out/bench-png
# the peers are reference implementations kept outside this repository
peer=${PEER:-}

bench_build -- data-tools/pstrain-prep test/png/make_png_tree
prep=$build/data-tools/pstrain-prep
gray=$out/fm-png-gray-10k
rgb=$out/fm-png-rgb-5k
[ -d "$gray" ] || "$build/test/png/make_png_tree" "$gray" --limit 10000
[ -d "$rgb" ] || "$build/test/png/make_png_tree" "$rgb" --limit 5000 --rgb

have_peer=1
if ! [ -f "$peer" ] || ! /usr/bin/python3 -c 'import PIL, h5py, numpy' 2>/dev/null; then
    echo "bench-png: peer unavailable (needs PEER=<path of prep_peer.py> and Debian's python3-pil, python3-h5py," \
        "python3-numpy); pstrain-prep only" >&2
    have_peer=0
fi


# images/s from pstrain-prep's summary line "  0.42 s, 23810 images/s, 0.40 CPU s, ..."
run_prep() {
    local tree=$1
    shift
    rm -f "$out/prep.h5"
    if ! "$prep" png "$tree" --chunk-images 1024 --compression 4 "$@" -o "$out/prep.h5" \
        >"$out/prep.log" 2>&1; then
        cat "$out/prep.log" >&2
        echo "bench-png: pstrain-prep png $tree $* failed" >&2
        exit 1
    fi
    sed -n 's/^ *[0-9.]* s, \([0-9.]*\) images\/s.*$/\1/p' "$out/prep.log"
}

# images_per_sec from the peer's last stdout line (JSON)
run_peer() {
    local tree=$1 workers=$2
    shift 2
    rm -f "$out/peer.h5"
    /usr/bin/python3 "$peer" png "$tree" --out "$out/peer.h5" --workers "$workers" "$@" |
        tail -1 | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["images_per_sec"])'
}

declare -A res
cases=("gray28:$gray:--size 28x28 --channels 1" "rgb24:$rgb:--size 24x24 --channels 3")
for ((r = 1; r <= rounds; r++)); do
    for c in "${cases[@]}"; do
        name=${c%%:*} rest=${c#*:}
        tree=${rest%%:*} args=${rest#*:}
        # shellcheck disable=SC2086
        res[$name.prep1]+="$(run_prep "$tree" $args --threads 1) "
        # shellcheck disable=SC2086
        res[$name.prepN]+="$(run_prep "$tree" $args) "
        if [ $have_peer = 1 ]; then
            for w in 0 1 2; do
                # shellcheck disable=SC2086
                res[$name.peer$w]+="$(run_peer "$tree" $w $args) "
            done
        fi
    done
done

cores=$(nproc)
echo "PNG tree -> HDF5, images/s, median of $rounds (all runs: in brackets)"
printf '%-34s %12s %12s\n' "tool" "gray 28x28" "RGB 32->24"
row() {
    local label=$1 key=$2 a b
    a=$(echo "${res[gray28.$key]:-}" | median)
    b=$(echo "${res[rgb24.$key]:-}" | median)
    printf '%-34s %12s %12s   [%s| %s]\n' "$label" "$a" "$b" "${res[gray28.$key]:-}" \
        "${res[rgb24.$key]:-}"
}
row "pstrain-prep png, 1 thread" prep1
row "pstrain-prep png, $cores threads" prepN
if [ $have_peer = 1 ]; then
    row "peer (PIL+h5py), in-process" peer0
    row "peer, 1 worker" peer1
    row "peer, 2 workers" peer2
fi
