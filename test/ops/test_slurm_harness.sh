#!/usr/bin/env bash
# A real one-node Slurm: an sbatch job runs 4 ranks with the launcher of
# pstrain's MPI (jobs/mpiexec.sh) and `srun` over 4 tasks with that MPI's
# plugin (pmix for Open MPI, pmi2 for MPICH), and pstrain --version; the job must
# complete with exit 0 and print what each step printed. An impossible job
# (more nodes than the cluster has) must be refused at submission.
# Skips (77) where slurm-wlm/munge are missing or the daemons cannot start.
set -u
. "$(dirname "$0")/slurm-lib.sh"
PSTRAIN=${PSTRAIN:?PSTRAIN must name the pstrain binary}
. "${PSTRAIN_SRC:?}/jobs/mpiexec.sh"
srun_mpi=pmix
[ "$MPI_FLAVOUR" = mpich ] && srun_mpi=pmi2
slurm_up 16

work=$SLURM_TEST_DIR/jobs
cat >"$work/harness.sh" <<EOF
#!/bin/bash
#SBATCH --ntasks=4
#SBATCH --time=2
echo "tasks=\$SLURM_NTASKS nodes=\$SLURM_JOB_NUM_NODES"
PSTRAIN=$PSTRAIN MPIEXEC=$MPIEXEC MPI_FLAVOUR=$MPI_FLAVOUR . $PSTRAIN_SRC/jobs/mpiexec.sh
"\${MPIEXEC_CMD[@]}" -n 4 sh -c 'echo mpirun-rank \$$MPI_RANK_VAR'
srun --mpi=$srun_mpi -n 4 sh -c 'echo srun-task \$SLURM_PROCID'
"$PSTRAIN" --version | head -1
EOF
fail=0
t0=$SECONDS
jid=$(sbatch --parsable -o "$work/harness.out" "$work/harness.sh") || { echo "FAIL: sbatch"; exit 1; }
slurm_wait_job "$jid" 60 || fail=1
echo "job $jid: $JOB_STATE exit $JOB_EXIT after $((SECONDS - t0)) s"
cat "$work/harness.out"
[ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = 0:0 ] || { echo "FAIL: job did not complete with 0"; fail=1; }
grep -q '^tasks=4 nodes=1$' "$work/harness.out" || { echo "FAIL: allocation"; fail=1; }
n=$(grep -c '^mpirun-rank [0-3]$' "$work/harness.out")
[ "$n" = 4 ] || { echo "FAIL: $n of 4 mpirun ranks printed"; fail=1; }
n=$(grep -c '^srun-task [0-3]$' "$work/harness.out")
[ "$n" = 4 ] || { echo "FAIL: $n of 4 srun tasks printed"; fail=1; }
grep -q '^pstrain ' "$work/harness.out" || { echo "FAIL: pstrain --version"; fail=1; }

# EnforcePartLimits: an impossible job is refused at once, not left pending
if sbatch --parsable -N 2 --wrap true >"$work/impossible.out" 2>&1; then
    echo "FAIL: a 2-node job was accepted by a 1-node cluster"
    fail=1
else
    echo "2-node job refused at submission: $(head -1 "$work/impossible.out")"
fi
[ $fail = 0 ] && echo "slurm harness: all checks passed"
exit $fail
