#!/usr/bin/env bash
# JPEG-tree preparation: `pstrain-prep images` vs the PIL + h5py peer
# (prep_peer.py png, not part of this repository), on an ImageNet-style tree of
# photo-like 256x256 JPEGs written by the peers' make_jpeg_tree.py:
#   - pixels:  decode, resize to 224x224x3 (area / PIL BOX), deflate 4; pstrain-prep in
#              its own layout (chunks of about 512 KiB, deflated in parallel), the
#              peer in its own (chunks of 1024 images): each tool as users run it
#   - encoded: the JPEG bytes themselves (every file still decoded, DCT-scaled
#              to 1/8, for the checks and the mean/std); pstrain-prep only, the
#              peer has no such mode
# with 1 and 2 threads (peer: in-process, 1 and 2 workers). Runs alternate;
# prints the median of ROUNDS runs each: images/s (wall, inside the tool) and
# CPU seconds per image (user+sys of the process and its children, from
# /usr/bin/time: the figure to trust on a shared machine).
#
#   bash jobs/bench-jpeg.sh [PEER_DIR] [ROUNDS]   (PEER_DIR: where make_jpeg_tree.py and
#                                                  prep_peer.py are; default $PEER_DIR)
#   BUILD_DIR=build-x OUT=out/bench-jpeg IMAGES=2000 bash jobs/bench-jpeg.sh /path/peers 3
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
peer_dir=${1:-${PEER_DIR:-}}
rounds=${2:-3}
bench_out out/bench-jpeg
images=${IMAGES:-2000}
py=/usr/bin/python3

if [ -z "$peer_dir" ] || ! [ -f "$peer_dir/make_jpeg_tree.py" ]; then
    echo "bench-jpeg: give the directory of make_jpeg_tree.py and prep_peer.py (PEER_DIR or the first" \
        "argument)" >&2
    exit 2
fi
bench_build -- data-tools/pstrain-prep
prep=$build/data-tools/pstrain-prep
tree=$out/jpeg-tree-$images
if ! [ -d "$tree" ]; then
    $py "$peer_dir/make_jpeg_tree.py" "$tree.part" --limit "$images" --size 256
    mv "$tree.part" "$tree"
fi
have_peer=1
if ! [ -f "$peer_dir/prep_peer.py" ] || ! $py -c 'import PIL, h5py, numpy' 2>/dev/null; then
    echo "bench-jpeg: peer unavailable (needs prep_peer.py and Debian's python3-pil, python3-h5py," \
        "python3-numpy); pstrain-prep only" >&2
    have_peer=0
fi


# "<images/s> <CPU ms per image>" of one run
run_prep() {
    rm -f "$out/prep.h5"
    if ! /usr/bin/time -f '%U %S' -o "$out/time.txt" "$prep" images "$tree" "$@" -o "$out/prep.h5" \
        >"$out/prep.log" 2>&1; then
        cat "$out/prep.log" >&2
        echo "bench-jpeg: pstrain-prep images $tree $* failed" >&2
        exit 1
    fi
    local ips
    ips=$(sed -n 's/^ *[0-9.]* s, \([0-9.]*\) images\/s.*$/\1/p' "$out/prep.log")
    awk -v ips="$ips" -v n="$images" '{ printf "%s %.3f\n", ips, 1000 * ($1 + $2) / n }' "$out/time.txt"
}

run_peer() {
    local workers=$1
    rm -f "$out/peer.h5"
    /usr/bin/time -f '%U %S' -o "$out/time.txt" $py "$peer_dir/prep_peer.py" png "$tree" \
        --out "$out/peer.h5" --workers "$workers" --size 224x224 --channels 3 >"$out/peer.log"
    local ips
    ips=$(tail -1 "$out/peer.log" | $py -c 'import json, sys; print(json.load(sys.stdin)["images_per_sec"])')
    awk -v ips="$ips" -v n="$images" '{ printf "%s %.3f\n", ips, 1000 * ($1 + $2) / n }' "$out/time.txt"
}

declare -A ips cpu
add() { # key "ips cpu"
    ips[$1]+="${2% *} "
    cpu[$1]+="${2#* } "
}
for ((r = 1; r <= rounds; r++)); do
    for t in 1 2; do
        add "pixels$t" "$(run_prep --size 224x224 --channels 3 --compression 4 --threads $t)"
        add "encoded$t" "$(run_prep --store encoded --channels 3 --threads $t)"
    done
    if [ $have_peer = 1 ]; then
        for w in 0 1 2; do add "peer$w" "$(run_peer $w)"; done
    fi
done
enc_mb=$(sed -n 's/.*encoded JPEG.*, \([0-9.]*\) MB.*/\1/p' "$out/prep.log")

echo "$images JPEGs 256x256 -> HDF5; median of $rounds (all runs in brackets); CPU = user+sys"
printf '%-44s %10s %14s\n' "tool" "images/s" "CPU ms/image"
row() {
    local label=$1 key=$2 a b
    a=$(echo "${ips[$key]:-}" | median)
    b=$(echo "${cpu[$key]:-}" | median)
    printf '%-44s %10s %14s   [%s| %s]\n' "$label" "$a" "$b" "${ips[$key]:-}" "${cpu[$key]:-}"
}
row "pstrain-prep images, pixels 224x224x3, 1 thr" pixels1
row "pstrain-prep images, pixels 224x224x3, 2 thr" pixels2
row "pstrain-prep images, encoded, 1 thread" encoded1
row "pstrain-prep images, encoded, 2 threads" encoded2
if [ $have_peer = 1 ]; then
    row "peer (PIL+h5py) 224x224x3, in-process" peer0
    row "peer, 1 worker" peer1
    row "peer, 2 workers" peer2
fi
echo "encoded data set: ${enc_mb:-?} MB of JPEG bytes for $images images"
