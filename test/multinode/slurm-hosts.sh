# shellcheck shell=bash
# slurm-hosts.sh - a multi-node Slurm on the namespace hosts of hosts.sh,
# for tests. Source it from bash:
#
#   . "$(dirname "$0")/slurm-hosts.sh"
#   slurm_hosts_up 3 4      # 3 compute nodes of 4 CPUs each (skips with 77)
#   jid=$(sbatch --parsable -N 3 ... job.sh)   # sbatch & co. run on host 1
#   slurm_wait_job "$jid" 120 && echo "$JOB_STATE $JOB_EXIT"
#   (everything is stopped by a trap on EXIT, INT and TERM)
#
# Hosts (hosts.sh): host 1 runs slurmctld and is the login node: the client
# commands sbatch, squeue, scontrol, scancel, sinfo and srun are shell
# functions here that run them there (mn_exec 1, bounded by timeout). Hosts
# 2..N+1 are the compute nodes, each with a slurmd: NodeName = the host's
# name (pstmn<PID>-h<I>, its UTS host name too), NodeAddr = its 198.18.R.I.
# One munged, in the root namespace as the munge user: its socket is a file,
# which every network namespace reaches through the shared file system.
# slurm.conf is test/ops/slurm-cluster.sh's (slurm_conf_common) with the
# slurmds' spool, pid and log files per node (-%n), in a private temporary
# directory, $SLURM_MN_ROOT:
#   cluster/   munge/, slurm.conf, state/, spool-<node>/, log/, run/
#   jobs/      scratch for the test's jobs (mode 1777)
# Each compute node advertises CPUS CPUs whatever the machine has
# (config_overrides) and the partition allows at most N nodes
# (EnforcePartLimits=ALL: an impossible job fails at submission).
#
# Cleanup (slurm_hosts_down, the EXIT trap): hosts_down kills every process
# of the hosts (slurmctld, the slurmds, their job steps and ranks) and
# removes them; then munged is stopped by its pid file; the temporary
# directory goes, but stays (with the daemons' logs' tails shown) when the
# test failed. Every wait is bounded: the daemons' start (20 s), each client
# command (SLURM_MN_CLIENT_TIMEOUT, 30 s), the jobs (slurm_wait_job).

SLURM_MN_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hosts.sh
. "$SLURM_MN_HERE/hosts.sh"
# the one-node cluster's pieces (functions only when sourced)
# shellcheck source=../ops/slurm-cluster.sh
. "$SLURM_MN_HERE/../ops/slurm-cluster.sh"
SLURM_MN_CLIENT_TIMEOUT=${SLURM_MN_CLIENT_TIMEOUT:-30}
SLURM_MN_NODES=()
# slurm_mn_mounts NODE: the mounts a slurmd needs in its mount namespace
# (`ip netns exec` gives each command its own), as a shell command:
# - `ip netns exec` mounts a sysfs of the host's own, without
#   /sys/fs/cgroup's mounts, and slurmd 22.05 will not start without them
#   (its cgroup plugin: "No filesystem mounted on /sys/fs/cgroup", then
#   "can't stat /sys/fs/cgroup/systemd/"): a tmpfs there and the
#   name=systemd hierarchy (the same one as outside), as on a cgroup v1
#   machine. Jobs use neither (proctrack/linuxproc, task/none).
# - A node-local TmpFS: Slurm's PMIx plugin makes TmpFS/spmix_appdir_<uid>_<job>.<step>
#   on every node of a step, and fails ("File exists") where the nodes share
#   it. TmpFS is $SLURM_CLUSTER_DIR/tmp on every node, and each slurmd sees
#   its own directory there (tmp-NODE bound over it), like a node's /tmp.
slurm_mn_mounts() {
    echo "mount -t tmpfs cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd &&
        mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd &&
        mount --bind '$SLURM_CLUSTER_DIR/tmp-$1' '$SLURM_CLUSTER_DIR/tmp'"
}

# the client commands, on host 1 (the root namespace is not on the hosts'
# network), each bounded
slurm_mn_client() {
    mn_exec 1 timeout -k 2 "$SLURM_MN_CLIENT_TIMEOUT" "$@"
}
sbatch() { slurm_mn_client sbatch "$@"; }
squeue() { slurm_mn_client squeue "$@"; }
scontrol() { slurm_mn_client scontrol "$@"; }
scancel() { slurm_mn_client scancel "$@"; }
sinfo() { slurm_mn_client sinfo "$@"; }
srun() { slurm_mn_client srun "$@"; }

slurm_hosts_down() {
    local rc=$?
    trap '' TERM INT # finish the cleanup whatever comes
    hosts_down
    [ -z "${SLURM_CLUSTER_DIR:-}" ] || stop_pidfile "$SLURM_CLUSTER_DIR/munge/munged.pid" munged
    if [ -n "${SLURM_MN_ROOT:-}" ] && [ -d "$SLURM_MN_ROOT" ]; then
        if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
            local f
            for f in "$SLURM_CLUSTER_DIR"/log/*.log; do
                [ -s "$f" ] || continue
                echo "---- $(basename "$f") (tail) ----"
                tail -15 "$f"
            done
            echo "(test files kept in $SLURM_MN_ROOT)"
        else
            rm -rf "$SLURM_MN_ROOT"
        fi
    fi
    exit "$rc"
}

# slurm_hosts_up NODES [CPUS]: hosts 1..NODES+1, slurmctld on host 1, a
# slurmd of CPUS (default 4) CPUs on each of hosts 2..NODES+1, all idle;
# exports SLURM_CONF, SLURM_CLUSTER_DIR, SLURM_MN_ROOT and sets
# SLURM_MN_NODES (the node names). Skips (77) where the hosts or the daemons
# cannot start.
slurm_hosts_up() {
    local n=$1 cpus=${2:-4} i d node nodes=""
    slurm_check_tools
    hosts_up $((n + 1))
    trap slurm_hosts_down EXIT
    SLURM_MN_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-slurm-mn.XXXXXX")
    chmod 0755 "$SLURM_MN_ROOT" # munged (user munge) must reach its socket below
    export SLURM_MN_ROOT
    d=$SLURM_MN_ROOT/cluster
    mkdir -p "$d" "$SLURM_MN_ROOT/jobs"
    chmod 1777 "$SLURM_MN_ROOT/jobs"
    export SLURM_CLUSTER_DIR=$d SLURM_CONF=$d/slurm.conf
    munge_start "$d"
    mkdir -p "$d/state" "$d/log" "$d/run" "$d/tmp"
    SLURM_MN_NODES=()
    for i in $(seq 2 $((n + 1))); do
        SLURM_MN_NODES+=("$(mn_name "$i")")
        mkdir -p "$d/spool-$(mn_name "$i")" "$d/tmp-$(mn_name "$i")"
    done
    nodes=$(
        IFS=,
        echo "${SLURM_MN_NODES[*]}"
    )
    {
        echo "# generated by slurm-hosts.sh: slurmctld on $(mn_name 1), $n compute nodes"
        # every host has its own ports: the default ones
        slurm_conf_common "$d" "$(mn_name 1)" "$(mn_addr 1)" 6817 6818 -%n
        echo "TmpFS=$d/tmp"
        for i in $(seq 2 $((n + 1))); do
            echo "NodeName=$(mn_name "$i") NodeAddr=$(mn_addr "$i") CPUs=$cpus State=UNKNOWN"
        done
        echo "PartitionName=test Nodes=$nodes Default=YES MaxTime=INFINITE MaxNodes=$n State=UP OverSubscribe=NO"
    } >"$SLURM_CONF"
    mn_exec 1 slurmctld -f "$SLURM_CONF" >"$d/log/slurmctld.out" 2>&1 ||
        die_skip "slurmctld did not start on $(mn_name 1): $(tail -n 3 "$d/log/slurmctld.out" \
            "$d/log/slurmctld.log" 2>&1)"
    for i in $(seq 2 $((n + 1))); do
        node=$(mn_name "$i")
        mn_exec "$i" sh -c "$(slurm_mn_mounts "$node")"' && exec "$@"' slurmd \
            slurmd -f "$SLURM_CONF" -N "$node" >"$d/log/slurmd-$node.out" 2>&1 ||
            die_skip "slurmd did not start on $node: $(tail -n 3 "$d/log/slurmd-$node.out" \
                "$d/log/slurmd-$node.log" 2>&1)"
    done
    slurm_wait_idle 20 "${SLURM_MN_NODES[@]}" || die_skip "the nodes are not idle after 20 s"
    echo "slurm-hosts: up in $d: slurmctld on $(mn_name 1) ($(mn_addr 1)), nodes $nodes ($cpus CPUs each)" >&2
}
