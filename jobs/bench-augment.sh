#!/usr/bin/env bash
# Decode + Inception preprocessing per core: pstrain's aug_from_jpeg
# (bench/bench_augment.c) against PIL + torchvision's transforms on PIL
# images (jobs/bench_augment_peer.py, one torch thread), on the same JPEGs,
# alternating, both timed by CPU time (thread CPU time for pstrain, process CPU
# time for the peer), so a busy machine skews both alike. Prints images/s per
# core of each and the ratio for decode + inception train. The peer runs twice:
# with PIL's defaults, and with PILLOW_BLOCKS_MAX=64 (PIL keeps freed image
# blocks instead of returning them: fewer page faults, which cost much on a
# VM); the ratio is taken against the faster of the two.
#
#   bash jobs/bench-augment.sh [ROUNDS] [SIZE]      (default 3 rounds, 299)
#   JPEG_DIR=DIR bash jobs/bench-augment.sh          (your own .jpg/.JPEG files)
# Without JPEG_DIR, 64 photo-like 500x375 quality-90 JPEGs are written once to
# out/bench/augment-jpeg by the peer script (--make).
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
rounds=${1:-3}
size=${2:-299}
bench_out out/bench
dir=${JPEG_DIR:-$out/augment-jpeg}
py=/usr/bin/python3
bench_build -Dbuildtype=release -- bench/bench_augment
if [ -z "${JPEG_DIR:-}" ] && ! [ -d "$dir" ]; then
    $py jobs/bench_augment_peer.py --make "$dir" --count 64
fi
have_peer=1
if ! $py -c 'import torch, torchvision, PIL, numpy' 2>/dev/null; then
    echo "bench-augment: the peer needs Debian's python3-torch, python3-torchvision, python3-pil; pstrain only" >&2
    have_peer=0
fi
ours=() theirs=() tuned=()
for r in $(seq 1 "$rounds"); do
    echo "== round $r"
    "$build/bench/bench_augment" "$dir" "$size" 3 | tee "$out/augment-ours.txt"
    ours+=("$(sed -n 's/^decode + inception train *\([0-9.]*\).*/\1/p' "$out/augment-ours.txt")")
    if [ $have_peer = 1 ]; then
        $py jobs/bench_augment_peer.py "$dir" --size "$size" --reps 1 | tee "$out/augment-peer.txt"
        theirs+=("$(sed -n 's/^peer decode + inception train[^:]*: *\([0-9.]*\).*/\1/p' "$out/augment-peer.txt")")
        echo "(peer with PILLOW_BLOCKS_MAX=64)"
        PILLOW_BLOCKS_MAX=64 $py jobs/bench_augment_peer.py "$dir" --size "$size" --reps 1 | tee "$out/augment-peer.txt"
        tuned+=("$(sed -n 's/^peer decode + inception train[^:]*: *\([0-9.]*\).*/\1/p' "$out/augment-peer.txt")")
    fi
done
m_ours=$(echo "${ours[*]}" | median)
echo "pstrain decode + inception train ${size}x${size}: median $m_ours images/s per core"
if [ $have_peer = 1 ]; then
    m_def=$(echo "${theirs[*]}" | median) m_tuned=$(echo "${tuned[*]}" | median)
    echo "peer    decode + inception train ${size}x${size}: median $m_def images/s per core (PILLOW_BLOCKS_MAX=64: $m_tuned)"
    m_peer=$(printf '%s\n' "$m_def" "$m_tuned" | sort -g | tail -1)
    awk -v a="$m_ours" -v b="$m_peer" 'BEGIN {printf "ratio: %.2fx per core\n", a / b}'
fi
