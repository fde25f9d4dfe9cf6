#!/usr/bin/env bash
# pstrain vs the PyTorch peer (torch_lenet.py, not part of this repository: PEER=path) on the same model,
# batch 64, one compute thread each, side by side and alternating, on
# Fashion-MNIST. Prints images/s of each and the ratio, with the active BLIS
# kernels. Both count only the training step (forward, loss, backward,
# optimizer); data loading is excluded on both sides.
#
#   bash jobs/bench-peer.sh [ROUNDS] [STEPS]     (default 3 rounds, 600 steps)
#   MODELS="lenet5 mlp" PEER=/path/to/torch_lenet.py bash jobs/bench-peer.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
rounds=${1:-3}
steps=${2:-600}
# the peers are reference implementations kept outside this repository
peer=${PEER:-}
models=${MODELS:-lenet5 mlp}
bench_out out/bench
export BLIS_NUM_THREADS=1 OMP_NUM_THREADS=1

bench_build -- pstrain data-tools/pstrain-prep
data=$out/fashion-mnist.h5
bench_fashion_h5 "$build/data-tools/pstrain-prep" "$data"

have_peer=1
if ! [ -f "$peer" ] || ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "bench-peer: PyTorch peer unavailable (needs PEER=<path of torch_lenet.py> and Debian's python3-torch, python3-numpy); pstrain only" >&2
    have_peer=0
fi
arch=$("$build/pstrain" --version | sed -n 's/^BLIS.*kernels: \([a-z0-9]*\).*/\1/p')
echo "BLIS kernels: $arch, batch 64, $steps steps, $rounds rounds (alternating)"

# images/s of the training step alone, from the summary's timing breakdown:
# examples / (compute + optimizer) seconds.
pstrain_rate() { # model
    "$build/pstrain" train --data "$data" --model "$1" --steps "$steps" --batch 64 \
        --optimizer momentum --lr 0.01 --prep-threads 1 --quiet --eval-every 0 \
        --summary-json "$out/s.json" >/dev/null
    python3 -c '
import json,sys
s=json.load(open(sys.argv[1])); w=s["timing"]["workers"][0]
print("%.0f" % (s["examples"]/(w["compute"]+w["push"])))' "$out/s.json"
}
peer_rate() { # model
    local m=$1; [ "$m" = lenet5 ] && m=lenet
    /usr/bin/python3 "$peer" --model "$m" --threads 1 --batch 64 --max-steps "$steps" --json 2>/dev/null |
        python3 -c 'import json,sys; print("%.0f" % json.loads(sys.stdin.read().strip().splitlines()[-1])["images_per_sec"])'
}

for m in $models; do
    ps=() pt=()
    for r in $(seq "$rounds"); do
        ps+=("$(pstrain_rate "$m")")
        [ $have_peer = 1 ] && pt+=("$(peer_rate "$m")")
    done
    p=$(echo "${ps[*]}" | median)
    if [ $have_peer = 1 ]; then
        t=$(echo "${pt[*]}" | median)
        ratio=$(awk -v a="$p" -v b="$t" 'BEGIN {printf "%.2f", a/b}')
        echo "$m: pstrain ${p} img/s (runs: ${ps[*]}), pytorch ${t} img/s (runs: ${pt[*]}), ratio ${ratio}x"
    else
        echo "$m: pstrain ${p} img/s (runs: ${ps[*]})"
    fi
done
