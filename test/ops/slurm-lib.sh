# shellcheck shell=bash
# slurm-lib.sh - sourced by the Slurm tests: a private one-node cluster for
# the test's lifetime, and bounded waits on jobs.
#
#   . slurm-lib.sh
#   slurm_up            # starts the cluster in $SLURM_TEST_DIR or exits 77;
#                       # $SLURM_TEST_DIR/jobs is a scratch dir all users can write
#   jid=$(sbatch --parsable ...)
#   slurm_wait_job $jid 60 && echo "$JOB_STATE $JOB_EXIT"
# The cluster is stopped when the test exits; on failure its logs are shown.

ops_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# the functions shared with the multi-node cluster: slurm_state,
# slurm_wait_job, slurm_wait_running
# shellcheck source=slurm-cluster.sh
. "$ops_dir/slurm-cluster.sh"
slurm_test_root=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-slurm.XXXXXX")
chmod 0755 "$slurm_test_root" # munged (user munge) must reach its socket below
SLURM_TEST_DIR=$slurm_test_root/cluster
export SLURM_TEST_DIR

slurm_down() {
    local rc=$?
    trap '' TERM INT # finish stopping the cluster whatever comes
    bash "$ops_dir/slurm-cluster.sh" stop "$SLURM_TEST_DIR" || true
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        echo "---- slurmctld.log (tail) ----"
        tail -20 "$SLURM_TEST_DIR/log/slurmctld.log" 2>/dev/null
        echo "---- slurmd.log (tail) ----"
        tail -20 "$SLURM_TEST_DIR/log/slurmd.log" 2>/dev/null
        echo "(test files kept in $slurm_test_root)"
    else
        rm -rf "$slurm_test_root"
    fi
    exit "$rc"
}

slurm_up() {
    trap slurm_down EXIT
    trap 'exit 143' TERM # meson's timeout: stop the cluster on the way out
    trap 'exit 130' INT
    bash "$ops_dir/slurm-cluster.sh" start "$SLURM_TEST_DIR" "${1:-16}"
    local rc=$?
    if [ $rc = 77 ]; then
        echo "SKIP: a one-node Slurm could not start here (see the message above)"
        exit 77
    fi
    [ $rc = 0 ] || { echo "FAIL: slurm-cluster.sh start exited with $rc"; exit 1; }
    # shellcheck disable=SC1091
    . "$SLURM_TEST_DIR/env"
}
