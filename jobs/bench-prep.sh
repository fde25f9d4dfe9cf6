#!/usr/bin/env bash
# Data preparation benchmark (prints numbers; not a timed test).
#
#  1. idx -> HDF5 of Fashion-MNIST (70,000 images, Debian's dataset-fashion-mnist):
#     `pstrain-prep idx` with its defaults, with one compression thread, and
#     with the peer's layout (chunks of 1024 images, deflate 4); the PIL + h5py peer (prep_peer.py, not part of this repository: PEER=path)
#     when Debian's python3-h5py is installed. Seconds and images/s, median of
#     ROUNDS runs, alternating. pstrain-prep's time runs from reading the
#     input to the renamed output (its summary line); wall time includes
#     process start-up. The peer's time excludes interpreter start-up.
#  2. Reading the result back through h5ds (bench/bench_h5ds): whole
#     chunks in order and shuffled, single images at random.
#  3. PNG tree -> HDF5: jobs/bench-png.sh (pstrain-prep png vs the peer), when
#     `pstrain-prep png` is built.
#
#   bash jobs/bench-prep.sh [ROUNDS]         (default 3)
#   BUILD_DIR=build-x OUT=out/bench-prep PEER=/path/prep_peer.py bash jobs/bench-prep.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
rounds=${1:-3}
bench_out out/bench-prep
# the peers are reference implementations kept outside this repository
peer=${PEER:-}
fm=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
classes="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"

if ! [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
    echo "bench-prep: $fm missing (install Debian's dataset-fashion-mnist)" >&2
    exit 1
fi
bench_build -- data-tools/pstrain-prep
prep=$build/data-tools/pstrain-prep

have_peer=1
if ! [ -f "$peer" ] || ! /usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null; then
    echo "bench-prep: peer unavailable (needs PEER=<path of prep_peer.py> and Debian's python3-h5py," \
        "python3-numpy); pstrain-prep only" >&2
    have_peer=0
fi

now() { date +%s.%N; }

# prints "seconds wall_seconds" of one pstrain-prep idx run
run_prep() {
    local t0 t1 line
    rm -f "$out/prep.h5"
    t0=$(now)
    line=$("$prep" idx --train-images "$fm/train-images-idx3-ubyte.gz" \
        --train-labels "$fm/train-labels-idx1-ubyte.gz" \
        --test-images "$fm/t10k-images-idx3-ubyte.gz" --test-labels "$fm/t10k-labels-idx1-ubyte.gz" \
        --classes "$classes" "$@" -o "$out/prep.h5" 2>/dev/null)
    t1=$(now)
    # summary: "...: train 60000, test 10000 images of ..., 1.23 s (56911 images/s)"
    echo "$(echo "$line" | sed -n 's/.*, \([0-9.]*\) s (.*/\1/p') $(echo "$t1 - $t0" | bc -l)"
}

# prints "seconds wall_seconds" of one peer run
run_peer() {
    local t0 t1 secs
    rm -f "$out/peer.h5"
    t0=$(now)
    secs=$(/usr/bin/python3 "$peer" idx --out "$out/peer.h5" --data "$fm" | tail -1 |
        /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["seconds"])')
    t1=$(now)
    echo "$secs $(echo "$t1 - $t0" | bc -l)"
}

declare -A secs wall
keys=(default onethread peerlayout)
[ $have_peer = 1 ] && keys+=(peer)
for ((r = 1; r <= rounds; r++)); do
    for k in "${keys[@]}"; do
        case $k in
        default) res=$(run_prep) ;;
        onethread) res=$(run_prep --threads 1) ;;
        peerlayout) res=$(run_prep --chunk-images 1024 --compression 4) ;;
        peer) res=$(run_peer) ;;
        esac
        secs[$k]+="${res%% *} "
        wall[$k]+="${res##* } "
    done
done

images=70000
echo "Fashion-MNIST idx -> HDF5 ($images images), median of $rounds runs"
printf '%-44s %9s %11s %9s   %s\n' "tool" "seconds" "images/s" "wall s" "[all runs, s]"
row() {
    local label=$1 k=$2 s w
    s=$(echo "${secs[$k]}" | median)
    w=$(echo "${wall[$k]}" | median)
    printf '%-44s %9.3f %11.0f %9.3f   [%s]\n' "$label" "$s" "$(echo "$images / $s" | bc -l)" "$w" \
        "${secs[$k]% }"
}
row "pstrain-prep idx (defaults, $(nproc) CPUs)" default
row "pstrain-prep idx --threads 1" onethread
row "pstrain-prep idx --chunk-images 1024 -z 4" peerlayout
[ $have_peer = 1 ] && row "peer (numpy + h5py)" peer
run_prep >/dev/null # leave the defaults layout in prep.h5
ls -l "$out/prep.h5" | awk '{ printf "output size (defaults): %.1f MB\n", $5 / 1e6 }'

echo
if ninja -C "$build" bench/bench_h5ds >/dev/null 2>&1; then
    echo "Reading $out/prep.h5 (defaults layout) through h5ds:"
    "$build/bench/bench_h5ds" "$out/prep.h5"
else
    echo "bench-prep: bench/bench_h5ds did not build; read benchmark skipped"
fi

echo
if "$prep" png --help >/dev/null 2>&1 && [ -f "$top/jobs/bench-png.sh" ]; then
    BUILD_DIR=$build bash "$top/jobs/bench-png.sh" "$rounds"
else
    echo "bench-prep: \`pstrain-prep png\` or jobs/bench-png.sh not available; PNG tree part skipped"
fi
