#!/usr/bin/env bash
# slurm-cluster.sh - a real one-node Slurm (slurmctld + slurmd + munged) on
# localhost, for tests, following docs/platform.md, "A real one-node Slurm for tests".
#
#   slurm-cluster.sh start DIR [CPUS]   start it; DIR/env holds the client
#                                       environment (source it: SLURM_CONF)
#   slurm-cluster.sh stop DIR           stop the daemons (by their pid files)
#
# Sourced (by test/multinode/slurm-hosts.sh, the multi-node cluster), it only
# defines the pieces both clusters share: slurm_check_tools, munge_start,
# slurm_conf_common, slurm_wait_idle, stop_pidfile, free_port, die_skip, and
# the tests' bounded waits on jobs: slurm_state, slurm_wait_job,
# slurm_wait_running.
#
# The node is this host by its short name (so that mpirun in a job knows
# the allocation is local and starts its ranks itself, not through srun).
# Everything lives in DIR (created, must be empty or missing): munge key,
# socket, slurm.conf, state, spool, logs, pid files. The node advertises
# CPUS (default 16) CPUs whatever the machine has (config_overrides), so
# oversubscribed MPI test jobs are not left PENDING; EnforcePartLimits=ALL
# with MaxNodes=1 makes impossible jobs fail at submission instead.
# Must run as root (SlurmUser=root, munged started as the munge user).
# `start` exits 77 (the test-skip status) with a message when Slurm or munge
# are not installed or the daemons do not come up; the logs stay in DIR.

die_skip() {
    echo "slurm-cluster: SKIP: $*" >&2
    exit 77
}

# A TCP port nobody listens on (ss from iproute2, or /proc/net/tcp).
free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 20000))
        if ! (ss -Htln 2>/dev/null || true) | awk '{print $4}' | grep -q ":$p\$"; then
            echo "$p"
            return
        fi
    done
    echo 0
}

stop_pidfile() { # pidfile name
    local f=$1 pid
    [ -s "$f" ] || return 0
    pid=$(cat "$f")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "slurm-cluster: $2 (pid $pid) did not stop on SIGTERM: SIGKILL" >&2
    kill -9 "$pid" 2>/dev/null || true
}

cmd_stop() {
    local d=$1
    [ -d "$d" ] || return 0
    # Jobs first: a job step outlives slurmd (slurmstepd is on its own), so
    # cancel everything and let slurmd reap it before the daemons go.
    if [ -s "$d/run/slurmctld.pid" ] && [ -f "$d/slurm.conf" ]; then
        export SLURM_CONF=$d/slurm.conf PATH=$PATH:/usr/sbin
        scancel --quiet --user=root 2>/dev/null || true
        for _ in $(seq 100); do
            [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
        [ -z "$(squeue -h -o %i 2>/dev/null)" ] ||
            echo "slurm-cluster: jobs still there after 10 s: $(squeue -h -o '%i %T' | tr '\n' ' ')" >&2
        # and any step processes slurmd has not reaped yet
        local pids
        pids=$(scontrol listpids 2>/dev/null | awk 'NR > 1 && $1 ~ /^[0-9]+$/ { print $1 }' || true)
        [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    fi
    stop_pidfile "$d/run/slurmd.pid" slurmd
    stop_pidfile "$d/run/slurmctld.pid" slurmctld
    stop_pidfile "$d/munge/munged.pid" munged
}

# slurm_check_tools: root, the daemons, the clients and the munge user, or
# skip (77)
slurm_check_tools() {
    [ "$(id -u)" = 0 ] || die_skip "needs root (SlurmUser=root, munged as the munge user)"
    local b
    for b in munged mungekey slurmctld slurmd sbatch squeue sinfo scancel scontrol; do
        command -v "$b" >/dev/null || PATH=$PATH:/usr/sbin command -v "$b" >/dev/null ||
            die_skip "$b not found: apt-get install -y slurm-wlm munge"
    done
    export PATH=$PATH:/usr/sbin
    id munge >/dev/null 2>&1 || die_skip "no 'munge' user (install the munge package)"
}

# munge_start DIR: munged as the munge user with DIR/munge/{munge.key,
# munge.socket,munged.pid,munged.log} (a file-system socket: network
# namespaces on the same file system reach it too); skips (77) when it
# cannot. DIR: an absolute path.
munge_start() {
    local d=$1
    # munged runs as the munge user: every directory above DIR must let it in
    local up=$d
    while up=$(dirname "$up") && [ "$up" != / ]; do
        [ "$(stat -c %A "$up" | cut -c10)" = x ] || [ "$(stat -c %A "$up" | cut -c10)" = t ] ||
            die_skip "$up is not searchable by others (o+x): munged (user munge) cannot reach $d"
    done
    mkdir -p "$d/munge"
    # munge: its own key, socket, pid and log; munged refuses a socket
    # directory that is not o+x, and key/log files not owned by it.
    mungekey --create --keyfile="$d/munge/munge.key" >/dev/null 2>&1 ||
        die_skip "mungekey --create failed"
    chown -R munge:munge "$d/munge"
    chmod 0755 "$d/munge"
    chmod 0600 "$d/munge/munge.key"
    local sock=$d/munge/munge.socket
    if ! runuser -u munge -- munged --socket="$sock" --key-file="$d/munge/munge.key" \
        --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" \
        --seed-file="$d/munge/munged.seed" >/dev/null 2>&1; then
        die_skip "munged did not start (see $d/munge/munged.log)"
    fi
    for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || die_skip "munged socket $sock did not appear"
}

# slurm_conf_common DIR CTL_NAME CTL_ADDR CTL_PORT D_PORT [SLURMD_TAG]: the
# slurm.conf of a test cluster in DIR (munge socket DIR/munge/munge.socket;
# state, spool, logs and pid files under DIR), all but its nodes and
# partition. SLURMD_TAG (e.g. "-%n", the node name, for several slurmds
# sharing DIR) is appended to slurmd's spool, pid and log file names.
slurm_conf_common() {
    local d=$1 host=$2 addr=$3 ctl_port=$4 d_port=$5 tag=${6:-}
    cat <<EOF
ClusterName=pstest
SlurmctldHost=$host($addr)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket,cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# schedule within a second (tests wait on jobs; defaults are 30-60 s cycles)
SchedulerParameters=bf_interval=1,sched_interval=1,sched_min_interval=100000
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
MailProg=/bin/true
KillWait=5
InactiveLimit=0
MinJobAge=600
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool$tag
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd$tag.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd$tag.log
SlurmctldDebug=info
SlurmdDebug=info
EOF
}

# slurm_wait_idle SECONDS NODE...: until sinfo says every NODE is idle;
# 1 (with the logs' tails) when one is not after SECONDS
slurm_wait_idle() {
    local limit=$1 t0=$SECONDS n state=""
    shift
    for n in "$@"; do
        while :; do
            state=$(sinfo -h -n "$n" -o %T 2>/dev/null || true)
            [ "$state" = idle ] && break
            if [ $((SECONDS - t0)) -ge "$limit" ]; then
                tail -5 "$SLURM_CLUSTER_DIR"/log/*.log >&2 || true
                echo "slurm-cluster: node $n is '${state:-unreachable}', not idle, after $limit s" >&2
                return 1
            fi
            sleep 0.2
        done
    done
}

cmd_start() {
    local d=$1 cpus=${2:-16}
    slurm_check_tools
    mkdir -p "$d"
    d=$(cd "$d" && pwd)
    chmod 0755 "$d"
    munge_start "$d"
    mkdir -p "$d/state" "$d/spool" "$d/log" "$d/run" "$d/jobs"
    chmod 1777 "$d/jobs"

    local host ctl_port d_port
    host=$(hostname -s)
    ctl_port=$(free_port)
    d_port=$(free_port)
    [ "$ctl_port" != 0 ] && [ "$d_port" != 0 ] && [ "$ctl_port" != "$d_port" ] ||
        die_skip "no free TCP port"

    {
        echo "# generated by slurm-cluster.sh: a one-node test cluster on 127.0.0.1"
        slurm_conf_common "$d" "$host" 127.0.0.1 "$ctl_port" "$d_port"
        echo "NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN"
        echo "PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE MaxNodes=1 State=UP OverSubscribe=NO"
    } >"$d/slurm.conf"
    printf 'export SLURM_CONF=%q\nexport SLURM_CLUSTER_DIR=%q\nexport PATH=$PATH:/usr/sbin\n' \
        "$d/slurm.conf" "$d" >"$d/env"
    export SLURM_CONF=$d/slurm.conf SLURM_CLUSTER_DIR=$d

    slurmctld -f "$d/slurm.conf" >"$d/log/slurmctld.out" 2>&1 ||
        die_skip "slurmctld did not start (see $d/log/slurmctld.log)"
    slurmd -f "$d/slurm.conf" -N "$host" >"$d/log/slurmd.out" 2>&1 ||
        die_skip "slurmd did not start (see $d/log/slurmd.log)"
    slurm_wait_idle 20 "$host" || die_skip "node $host is not idle after 20 s (logs in $d/log)"
    echo "slurm-cluster: up in $d (node $host, $cpus CPUs, ports $ctl_port/$d_port)" >&2
}

# slurm_state JOB -> "STATE EXITCODE" (e.g. "COMPLETED 0:0")
slurm_state() {
    scontrol show job -o "$1" 2>/dev/null |
        sed -n 's/.*JobState=\([A-Z_]*\).*ExitCode=\([0-9:]*\).*/\1 \2/p'
}

# Waits up to $2 seconds for job $1 to end; sets JOB_STATE and JOB_EXIT.
# Returns 0 when it ended, 1 on timeout (the job is cancelled then).
slurm_wait_job() {
    local jid=$1 limit=$2 t0=$SECONDS s
    while [ $((SECONDS - t0)) -lt "$limit" ]; do
        s=$(slurm_state "$jid")
        JOB_STATE=${s%% *} JOB_EXIT=${s#* }
        case "$JOB_STATE" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
            return 0 ;;
        esac
        sleep 0.3
    done
    echo "job $jid still $JOB_STATE after $limit s: cancelling it"
    scancel "$jid" 2>/dev/null
    return 1
}

# Waits up to $2 seconds for job $1 to be RUNNING.
slurm_wait_running() {
    local jid=$1 limit=$2 t0=$SECONDS s
    while [ $((SECONDS - t0)) -lt "$limit" ]; do
        s=$(slurm_state "$jid")
        [ "${s%% *}" = RUNNING ] && return 0
        sleep 0.2
    done
    return 1
}

# sourced: the functions only
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0
set -euo pipefail
case "${1:-}" in
start) [ $# -ge 2 ] || { echo "usage: $0 start DIR [CPUS]" >&2; exit 2; }
    # a failed start leaves nothing running behind
    cluster_dir=$2
    trap 'rc=$?; [ $rc = 0 ] || cmd_stop "$cluster_dir"; exit $rc' EXIT
    cmd_start "$2" "${3:-16}" ;;
stop) [ $# -ge 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }
    cmd_stop "$2" ;;
*) echo "usage: $0 start DIR [CPUS] | stop DIR" >&2; exit 2 ;;
esac
