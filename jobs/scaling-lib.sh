# shellcheck shell=bash
# scaling-lib.sh - the pieces of the sync step check (docs/scaling.md, "The
# model against measured steps") that jobs/bench-scaling.sh and the
# multinode test's `tbf` scenario share. Source it after the multinode
# harness (test/multinode/hosts.sh, with its hosts up): it uses mn_tbf,
# mn_tbf_in, mn_tbf_clear, mn_hostfile and mn_mpiexec.
#
#   scaling_cap I RATE [BURST [LATENCY]]
#       host I's link capped in both directions by tc tbf (its eth0 and the
#       bridge's end of its veth; BURST default 64kb, LATENCY 50ms: the
#       queue tbf keeps); RATE none: uncapped. 1 when tc fails.
#   scaling_rma BENCH_RMA OUT [OPTION...]
#       bench_rma across hosts 1-3: the target on host 1, an origin on each
#       of hosts 2 and 3; 1 MiB gets and puts (what `scaling_model.py check
#       --rma OUT` reads: B, L and o) and OPTIONs; output in OUT
#   scaling_train PSTRAIN SUMMARY LOG DATA MODEL BATCH STEPS [OPTION...]
#       the sync run, 4 ranks on the current hostfile (`mn_hostfile 2 1 1`:
#       root (rank 0) and one PS (rank 1) on host 1, a worker on each of
#       hosts 2 and 3); momentum, lr 0.01, one thread per rank;
#       --summary-json SUMMARY (what `scaling_model.py check --summary`
#       reads), output in LOG; extra OPTIONs (e.g. --dump-params F)
#
# Then: python3 bench/scaling_model.py check --model MODEL --batch BATCH
# --workers 2 --root-on-ps-host --summary SUMMARY... --rma OUT
# [--tolerance 0.3] --pstrain PSTRAIN.

scaling_cap() {
    local i=$1 rate=$2 burst=${3:-64kb} latency=${4:-50ms}
    mn_tbf_clear "$i"
    [ "$rate" != none ] || return 0
    mn_tbf "$i" "$rate" "$burst" "$latency" && mn_tbf_in "$i" "$rate" "$burst" "$latency"
}

scaling_rma() {
    local bench=$1 out=$2
    shift 2
    mn_hostfile 1 1 1
    mn_mpiexec -np 3 "$bench" --min 1M --max 1M "$@" >"$out"
}

scaling_train() {
    local pstrain=$1 summary=$2 log=$3 data=$4 model=$5 batch=$6 steps=$7
    shift 7
    mn_mpiexec -np 4 "$pstrain" train --data "$data" --model "$model" --batch "$batch" \
        --ps 1 --mode sync --steps "$steps" --optimizer momentum --lr 0.01 --threads 1 \
        --prep-threads 1 --quiet --summary-json "$summary" "$@" >"$log" 2>&1
}
