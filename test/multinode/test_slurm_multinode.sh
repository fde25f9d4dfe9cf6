#!/usr/bin/env bash
# test_slurm_multinode.sh MODE - jobs/train.sbatch on a 3-node Slurm of
# namespace hosts (slurm-hosts.sh: slurmctld on host 1, a slurmd on hosts
# 2-4), `sbatch -N 3 --ntasks-per-node=2 --cpus-per-task=2`: 6 ranks (root
# and PS on the first node, a feeder and a worker on each of the others:
# train.sbatch's default of one feeder per node), sync lenet5 on a small
# synthetic set, TRANSPORT=tcp NET_IF=eth0.
#
#   train   LAUNCHER=mpirun (the MPI's own launcher inside the allocation),
#           then LAUNCHER=srun (--mpi=pmix for Open MPI, pmi2 for MPICH):
#           each job completes with 0, its --dump-params is bitwise equal
#           (cmp) to the same training on one host without Slurm, and its
#           log has pstrain's rank -> host -> role map with the three nodes
#           and a feeder on each (FEEDERS defaults to the node count).
#           Also MODULES (a fake `module` on PATH: loaded for the mpirun
#           job; a failing load ends a job with 2 and an error line) and
#           THREADS=3 on --cpus-per-task=2 (a warning, same bits).
#           Then PS_PER_NODE=1 on 3 nodes x 3 tasks of 1 CPU, with each
#           launcher: a PS and a feeder on every node, each worker drawing
#           from its node's (the map), bitwise
#           equal to the classic layout's 3 PS, 3 feeders and 3 workers on
#           one host.
#           MPICH: hydra's mpiexec only (srun --mpi=pmi2: see below)
#   resume  a longer job is signalled with `scancel --signal=USR1 --full`
#           once it has checkpointed (REQUEUE_ON_SIGNAL=0): it checkpoints
#           and exits 0 before the end; meanwhile a worker node's pstrain
#           has TCP connections to the other nodes' 198.18 addresses; a
#           second sbatch (same CKPT_DIR) resumes it to the end, bitwise
#           equal to the run on one host
#
# Environment: PSTRAIN, PSTRAIN_SRC, TEST_DIST (meson sets them), MPIEXEC
# and MPI_FLAVOUR for the reference run (jobs/mpiexec.sh). Skips (77)
# without root, network namespaces, slurm-wlm or munge. Every wait is
# bounded; the cluster and the hosts are removed on every exit.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
MODE=${1:-train}
PSTRAIN=${PSTRAIN:?PSTRAIN must name the pstrain binary}
src=${PSTRAIN_SRC:?PSTRAIN_SRC must name the source tree}
TEST_DIST=${TEST_DIST:?TEST_DIST must name test_dist}
# shellcheck source=slurm-hosts.sh
. "$HERE/slurm-hosts.sh"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
show_log() { echo "---- $1 ----"; cat "$1" 2>/dev/null; echo "----"; }
latest_step() { sed -n 's/^ckpt-\([0-9]*\)\.h5$/\1/p' "$1/latest" 2>/dev/null; }

t_start=$SECONDS
slurm_hosts_up 3 4
work=$SLURM_MN_ROOT/jobs
"$TEST_DIST" mkdata "$work/img.h5" 512 64 28 28 1 10 >/dev/null || { echo "FAIL: mkdata"; exit 1; }
# sbatch runs on host 1 and passes its environment (and working directory)
# to the job
cd "$work" || exit 1

# the job: 3 nodes x 2 tasks of 2 CPUs; the training settings below are the
# reference run's too
export DATA=$work/img.h5 PSTRAIN MODEL=lenet5 PS=1 BATCH=16 SEED=1234 OPTIMIZER=momentum LR=0.01
export TRANSPORT=tcp NET_IF=eth0 OVERSUBSCRIBE=1 CKPT_SECS=0 REQUEUE_ON_SIGNAL=0
RANKS=6
sb=(sbatch --parsable -N 3 --ntasks-per-node=2 --cpus-per-task=2 --time=10)
# (the jobs' default FEEDERS: one per node)
train_args=(--model "$MODEL" --batch "$BATCH" --seed "$SEED" --optimizer "$OPTIMIZER" --lr "$LR"
    --ps "$PS" --feeders 3 --threads 2)

# ref STEPS FILE: the training on one host, no Slurm, no namespaces
ref() {
    local t0=$SECONDS
    # shellcheck source=../../jobs/mpiexec.sh
    . "$src/jobs/mpiexec.sh"
    timeout -k 5 300 "${MPIEXEC_CMD[@]}" -n $RANKS "$PSTRAIN" train --data "$DATA" "${train_args[@]}" \
        --steps "$1" --quiet --dump-params "$2" >"$2.log" 2>&1 ||
        { show_log "$2.log"; echo "FAIL: the run on one host"; exit 1; }
    echo "reference: $1 steps on one host in $((SECONDS - t0)) s"
}

# check_map LOG: pstrain's rank -> host -> role map, block placement: root
# and PS on node 1, feeder 1 and worker 0 on node 2, feeder 2 and worker 1
# on node 3, each worker drawing from the feeder on its node (lockstep)
check_map() {
    local n=("${SLURM_MN_NODES[@]}")
    grep -q "host ${n[0]}: rank 0 root, rank 1 ps 1$" "$1" &&
        grep -q "host ${n[1]}: rank 2 feeder 1, rank 3 worker 0 (from feeder 1)$" "$1" &&
        grep -q "host ${n[2]}: rank 4 feeder 2, rank 5 worker 1 (from feeder 2)$" "$1" ||
        { show_log "$1"; bad "$1: no rank -> host -> role map over the 3 nodes"; }
}

# job_ok NAME JID LIMIT: the job ends COMPLETED 0:0 within LIMIT s
# job_ok NAME JOBID LIMIT [first]: waits for the job; 0 if it completed with
# 0. With "first", a job that failed at MPI start-up on Open MPI 4.1.4's
# btl/tcp connect defect (docs/platform.md, "Open MPI one-sided
# communication": a connect() still in progress is taken for an error, and
# a rank may crash) returns 2 without failing the test, for one more try:
# the job never reached pstrain's set-up, so the second try tests the same.
job_ok() {
    local t0=$SECONDS
    slurm_wait_job "$2" "$3"
    echo "$1: job $2 $JOB_STATE $JOB_EXIT after $((SECONDS - t0)) s"
    [ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = 0:0 ] && return 0
    if [ "${4:-}" = first ] && grep -q "Open MPI failed to TCP connect to a peer MPI process" "$work/$1.out" &&
        ! grep -q "host .*: rank 0 root" "$work/$1.out"; then
        echo "$1: Open MPI's TCP connect defect at start-up; the job once more"
        mv "$work/$1.out" "$work/$1.try1.out"
        return 2
    fi
    show_log "$work/$1.out"
    bad "$1: the job did not complete with 0"
    return 1
}

case $MODE in
train)
    steps=24
    ref $steps "$work/ref.bin"
    # MODULES: a `module` command of the test's, on the jobs' PATH, that
    # fails for "missing"; a failed load ends the job before MPI starts
    mkdir -p "$work/bin"
    printf '#!/bin/sh\necho "module $*"\nfor m; do [ "$m" != missing ] || exit 1; done\n' >"$work/bin/module"
    chmod +x "$work/bin/module"
    export PATH=$work/bin:$PATH
    jid=$(MODULES="mpi/missing missing" "${sb[@]}" -o "$work/modules.out" "$src/jobs/train.sbatch") ||
        { echo "FAIL: sbatch (modules)"; exit 1; }
    slurm_wait_job "$jid" 60
    echo "MODULES=missing: job $jid $JOB_STATE $JOB_EXIT"
    [ "$JOB_STATE" = FAILED ] && [ "$JOB_EXIT" = 2:0 ] &&
        grep -q "error: module load mpi/missing missing failed" "$work/modules.out" ||
        { show_log "$work/modules.out"; bad "a failed module load did not end the job with an error line"; }
    # mpirun with a module loaded; srun with THREADS above --cpus-per-task (a
    # warning; the threads do not change the results)
    launchers="mpirun srun"
    if [ "$MPI_FLAVOUR" = mpich ]; then
        # pstrain under MPICH 4.0.2 + Slurm 22.05's srun --mpi=pmi2 trains
        # to the end, then hangs in MPI_Finalize (ranks read their PMI
        # socket or spin in UCX progress until the job is killed); an MPI
        # program that only moves data (mn_hello) finishes. Not tested
        # until that is fixed.
        echo "srun --mpi=pmi2 with MPICH: not tested (pstrain hangs in MPI_Finalize there)"
        launchers=mpirun
    fi
    for launcher in $launchers; do
        out=$work/run-$launcher
        settings=(MODULES=)
        [ $launcher = mpirun ] && settings=("MODULES=mpi/test hdf5/test")
        [ $launcher = srun ] && settings+=(THREADS=3)
        try=first
        while :; do
            jid=$(export "${settings[@]}" && OUT=$out STEPS=$steps CKPT_EVERY=0 LAUNCHER=$launcher \
                EXTRA_ARGS="--log-every 0.5 --dump-params $out/params.bin" \
                "${sb[@]}" -o "$work/$launcher.out" "$src/jobs/train.sbatch") ||
                { echo "FAIL: sbatch ($launcher)"; exit 1; }
            job_ok "$launcher" "$jid" 120 $try
            rc=$? try=
            [ $rc = 2 ] || break
        done
        [ $rc = 0 ] || continue
        case $launcher in
        mpirun) grep -q "modules loaded: mpi/test hdf5/test" "$work/$launcher.out" ||
            bad "mpirun: MODULES not loaded" ;;
        srun) grep -q "warning: THREADS=3 compute threads on 2 CPUs per task" "$work/$launcher.out" ||
            bad "srun: no warning for THREADS=3 on --cpus-per-task=2" ;;
        esac
        grep -q "$RANKS ranks on 3 node(s), $PS PS, 3 feeders, transport tcp, launcher $launcher, MPI $MPI_FLAVOUR, interface eth0" \
            "$work/$launcher.out" || bad "$launcher: the job log's launch line"
        grep '^\[train.sbatch.*\] \(srun\|/\)' "$work/$launcher.out"
        check_map "$work/$launcher.out"
        grep "host .*: rank" "$work/$launcher.out"
        cmp "$work/ref.bin" "$out/params.bin" && echo "$launcher: parameters bitwise equal to the run on one host" ||
            bad "$launcher: parameters differ from the run on one host"
    done
    # PS_PER_NODE=1 on 3 nodes x 3 tasks: a PS and (the default FEEDERS)
    # a feeder on every node but the root's, 3 PS and 3 workers, bitwise
    # equal to the classic layout's 3 PS and 3 feeders on one host
    RANKS=9
    train_args=(--model "$MODEL" --batch "$BATCH" --seed "$SEED" --optimizer "$OPTIMIZER" --lr "$LR"
        --ps 3 --feeders 3)
    ref $steps "$work/ref9.bin"
    n=("${SLURM_MN_NODES[@]}")
    for launcher in $launchers; do
        out=$work/run-ppn-$launcher
        try=first
        while :; do
            jid=$(OUT=$out STEPS=$steps CKPT_EVERY=0 LAUNCHER=$launcher PS_PER_NODE=1 MODULES= \
                EXTRA_ARGS="--log-every 0.5 --dump-params $out/params.bin" \
                sbatch --parsable -N 3 --ntasks-per-node=3 --cpus-per-task=1 --time=10 \
                -o "$work/ppn-$launcher.out" "$src/jobs/train.sbatch") ||
                { echo "FAIL: sbatch (PS_PER_NODE, $launcher)"; exit 1; }
            job_ok "ppn-$launcher" "$jid" 120 $try
            rc=$? try=
            [ $rc = 2 ] || break
        done
        [ $rc = 0 ] || continue
        grep -q "9 ranks on 3 node(s), 1 PS per node, 3 feeders," "$work/ppn-$launcher.out" ||
            bad "PS_PER_NODE $launcher: the job log's launch line"
        for want in "host ${n[0]}: rank 0 root, rank 1 ps 1, rank 2 worker 0 (from feeder 0)" \
            "host ${n[1]}: rank 3 ps 2, rank 4 feeder 1, rank 5 worker 1 (from feeder 1)" \
            "host ${n[2]}: rank 6 ps 3, rank 7 feeder 2, rank 8 worker 2 (from feeder 2)"; do
            grep -q "$want\$" "$work/ppn-$launcher.out" ||
                { grep "host .*: rank" "$work/ppn-$launcher.out"; bad "PS_PER_NODE $launcher: no line '$want'"; }
        done
        cmp "$work/ref9.bin" "$out/params.bin" &&
            echo "PS_PER_NODE=1, $launcher: parameters bitwise equal to the classic layout on one host" ||
            bad "PS_PER_NODE=1, $launcher: parameters differ from the classic layout on one host"
    done
    ;;
resume)
    total=160
    ref $total "$work/ref.bin"
    out=$work/run-resume
    ck=$out/ckpt
    # (sbatch is a function here: the settings are exported in a subshell)
    job_env=(OUT=$out CKPT_DIR=$ck STEPS=$total CKPT_EVERY=10 LAUNCHER=mpirun
        "EXTRA_ARGS=--log-every 0.5 --dump-params $out/params.bin")
    jid=$(export "${job_env[@]}" && "${sb[@]}" -o "$work/first.out" "$src/jobs/train.sbatch") ||
        { echo "FAIL: sbatch"; exit 1; }
    t0=$SECONDS
    until [ -s "$ck/latest" ] || [ $((SECONDS - t0)) -ge 120 ]; do
        case $(slurm_state "$jid") in COMPLETED* | FAILED* | CANCELLED*) break ;; esac
        sleep 0.2
    done
    [ -s "$ck/latest" ] || { show_log "$work/first.out"; bad "no checkpoint within 120 s"; exit 1; }
    # a worker node's ranks talk TCP to the other nodes (eth0's 198.18 addresses)
    conns=$(ip netns exec "$(mn_ns 3)" ss -Htnp state established 2>/dev/null | grep pstrain)
    echo "$conns" | awk '{ print $3, $4 }' | grep -q "^$MN_NET\.3:[0-9]* $MN_NET\.2:" ||
        { echo "$conns"; bad "no TCP connection from node 2's pstrain to node 1"; }
    echo "$conns" | awk '{ print $3, $4 }' | grep -q "^$MN_NET\.3:[0-9]* $MN_NET\.4:\|^$MN_NET\.4:[0-9]* $MN_NET\.3:" ||
        echo "$conns" | grep -q "$MN_NET\.[24]:" || { echo "$conns"; bad "no TCP connection between the nodes"; }
    echo "node 2's pstrain: $(echo "$conns" | grep -c .) TCP connections to $(echo "$conns" | awk '{ print $4 }' | sed 's/:[0-9]*$//' | sort -u | tr '\n' ' ')"
    scancel --signal=USR1 --full "$jid"
    echo "signalled job $jid after checkpoint step $(latest_step "$ck")"
    job_ok first "$jid" 120
    grep -q 'got SIGUSR1' "$work/first.out" || bad "the batch script did not see SIGUSR1"
    grep -q 'pstrain exited with status 0' "$work/first.out" || bad "pstrain did not exit 0 after the signal"
    stopped=$(latest_step "$ck")
    [ -n "$stopped" ] && [ "$stopped" -lt "$total" ] ||
        { show_log "$work/first.out"; bad "stopped at '$stopped', not before the end ($total): make the run longer"; exit 1; }
    # (pstrain dumps the parameters where it stopped: not the end's)
    ! cmp -s "$work/ref.bin" "$out/params.bin" || bad "the stopped run's parameters are the end's"
    rm -f "$out/params.bin"
    check_map "$work/first.out"
    jid=$(export "${job_env[@]}" && "${sb[@]}" -o "$work/second.out" "$src/jobs/train.sbatch") ||
        { echo "FAIL: sbatch (second)"; exit 1; }
    job_ok second "$jid" 120
    grep -q "resumed from $ck/ckpt-$stopped.h5 at step $stopped" "$work/second.out" ||
        { show_log "$work/second.out"; bad "the second job did not resume from ckpt-$stopped.h5"; }
    [ "$(latest_step "$ck")" = $total ] || bad "latest checkpoint $(latest_step "$ck"), expected $total"
    cmp "$work/ref.bin" "$out/params.bin" &&
        echo "stopped at $stopped, resumed to $total: parameters bitwise equal to the run on one host" ||
        bad "the resumed run's parameters differ from the run on one host"
    ;;
*)
    echo "usage: $0 train|resume"
    exit 2
    ;;
esac
echo "slurm multinode $MODE: $((SECONDS - t_start)) s"
[ $fail = 0 ] && echo "slurm multinode $MODE ($MPI_FLAVOUR): all checks passed"
exit $fail
