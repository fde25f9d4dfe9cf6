# hosts.sh - the multinode test harness: 2-4 emulated hosts on this one
# machine, for MPI jobs that span "nodes". Source it from bash:
#
#   . "$(dirname "$0")/hosts.sh"
#   hosts_up 3                       # hosts 1..3 (skips with 77 when it cannot)
#   mn_hostfile 2 1 1                # slots per host: ranks 0,1 on host 1, ...
#   mn_mpiexec -np 4 prog args...    # the MPI launcher, run on host 1, bounded
#   (cleanup is a trap on EXIT, INT and TERM)
#
# A host is a network namespace "pstmn<PID>-h<I>" (PID: the sourcing
# shell's $$, so parallel and leftover runs never share a name) with its
# own host name "pstmn<PID>-h<I>" (UTS and IPC namespaces per command,
# entered by mn_exec and by the agent: a job's daemon on a host and the
# ranks it starts share them), and one veth whose other end "pstmn<PID>v<I>"
# is a port of the bridge "pstmn<PID>br" in the root namespace. The bridge
# has no address, so the root namespace is not on that network; each host
# has lo and 198.18.R.I/24 (RFC 2544's benchmarking range 198.18.0.0/15;
# R = PID mod 256), no IPv6 and no default route: nothing leaves the hosts. All
# hosts share the file system (like NFS), the PID space and the CPUs.
#
# Contracts:
# - hosts_up installs `trap hosts_down EXIT` and makes INT/TERM exit (so
#   EXIT runs); hosts_down kills every process still in a host
#   (`ip netns pids`, SIGKILL), deletes the veths, namespaces and bridge,
#   and is idempotent. A test that sets its own EXIT trap calls hosts_down
#   from it.
# - Every launch is bounded: mn_mpiexec runs under `timeout -k 5
#   $MN_TIMEOUT` (default 120 s); a timeout returns 124 (137 after the
#   kill), which a test counts as a failure.
# - The bridge's frames pass the root namespace's iptables FORWARD chain
#   when br_netfilter is loaded (net.bridge.bridge-nf-call-iptables=1, as
#   here, policy ACCEPT): a host firewall that drops forwarded traffic
#   (Docker sets FORWARD to DROP) cuts the hosts off; hosts_up checks that
#   host 1 reaches the others and skips (77) if not.
#
# The launcher: MPIEXEC with MPI_FLAVOUR openmpi|mpich and MPIEXEC_ARGS,
# extra flags split on blanks (jobs/mpiexec.sh, which this sources);
# mn_mpi_args holds every flavour-specific flag. Both run on host 1 and
# start the other hosts' daemons through mn-agent.sh (this directory), the
# harness's ssh. What
# each MPI needs, found by experiment (Open MPI 4.1.4, MPICH 4.0.2
# ch4:ucx, Debian 12), is written at mn_mpi_args.

MN_DIR_SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# MPIEXEC, MPI_FLAVOUR and Open MPI's run-as-root variables, as every test
# and job script gets them
# shellcheck source=../../jobs/mpiexec.sh
. "$MN_DIR_SELF/../../jobs/mpiexec.sh"
MN_AGENT=$MN_DIR_SELF/mn-agent.sh
MN_PREFIX=pstmn$$
MN_N=0
MN_TIMEOUT=${MN_TIMEOUT:-120}

mn_skip() {
    echo "SKIP: $*" >&2
    exit 77
}
mn_die() {
    echo "FAIL: $*" >&2
    exit 1
}

mn_ns() { echo "$MN_PREFIX-h$1"; }
mn_name() { echo "$MN_PREFIX-h$1"; }
mn_addr() { echo "$MN_NET.$1"; }
mn_veth() { echo "${MN_PREFIX}v$1"; } # the root namespace's end (a bridge port)

# mn_exec I COMMAND...: run COMMAND on host I (its network namespace and
# host name); no time bound of its own.
mn_exec() {
    local i=$1
    shift
    ip netns exec "$(mn_ns "$i")" unshare --uts --ipc \
        sh -c 'hostname "$0" && exec "$@"' "$(mn_name "$i")" "$@"
}

hosts_down() {
    local i pids="" ns
    [ "${MN_N:-0}" -gt 0 ] || return 0
    # every host's processes at once, then wait for them to go: fast, as
    # meson gives a timed-out test 0.5 s between SIGTERM and SIGKILL
    for _ in $(seq 100); do
        pids=""
        for i in $(seq "$MN_N"); do
            pids="$pids $(ip netns pids "$(mn_ns "$i")" 2>/dev/null)"
        done
        [ -n "${pids// /}" ] || break
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null
        sleep 0.05
    done
    [ -z "${pids// /}" ] || echo "hosts_down: processes left in the hosts:$pids" >&2
    for i in $(seq "$MN_N"); do
        ip link del "$(mn_veth "$i")" 2>/dev/null
        ip netns del "$(mn_ns "$i")" 2>/dev/null
    done
    ip link del "${MN_PREFIX}br" 2>/dev/null
    [ -z "${MN_DIR:-}" ] || rm -rf "$MN_DIR"
    MN_N=0
    return 0
}

# hosts_sweep: remove the hosts of runs whose shell is gone (a SIGKILLed
# test cannot clean up); never touches a live run's hosts.
hosts_sweep() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E '^pstmn[0-9]+-h[0-9]+$'); do
        pid=${ns#pstmn}
        pid=${pid%%-*}
        kill -0 "$pid" 2>/dev/null && continue
        # shellcheck disable=SC2046
        kill -KILL $(ip netns pids "$ns") 2>/dev/null
        ip link del "pstmn${pid}v${ns##*-h}" 2>/dev/null
        ip netns del "$ns" 2>/dev/null
        ip link del "pstmn${pid}br" 2>/dev/null
        echo "hosts_sweep: removed $ns (run $pid is gone)" >&2
    done
}

# mn_require: skip (77) with the reason unless this can make hosts
mn_require() {
    [ "$(id -u)" = 0 ] || mn_skip "multinode tests need root (network namespaces)"
    if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
        mn_skip "no 'ip netns' (iproute2)"
    fi
    command -v unshare >/dev/null || mn_skip "no unshare (util-linux)"
}

# hosts_up N: hosts 1..N (N from 1 to 250). Skips (77) when not root, when
# ip netns or unshare is missing or fails, or when the hosts cannot reach
# each other; exports MN_HOSTS, the agent's host table.
hosts_up() {
    local n=$1 i ns
    mn_require
    hosts_sweep
    MN_NET=198.18.$(($$ % 256))
    MN_SUBNET=$MN_NET.0/24
    MN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-mn.XXXXXX")
    export MN_HOSTS=$MN_DIR/hosts
    : >"$MN_HOSTS"
    trap hosts_down EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    # a leftover of a dead run with this PID (names would clash)
    for ns in $(ip netns list | awk '{ print $1 }' | grep -E "^$MN_PREFIX-h[0-9]+$"); do
        # shellcheck disable=SC2046
        kill -KILL $(ip netns pids "$ns") 2>/dev/null
        ip netns del "$ns"
    done
    ip link del "${MN_PREFIX}br" 2>/dev/null
    MN_N=$n
    ip link add "${MN_PREFIX}br" type bridge || mn_skip "cannot create a bridge"
    # no STP, forward at once
    ip link set "${MN_PREFIX}br" type bridge stp_state 0 forward_delay 0 2>/dev/null
    ip link set "${MN_PREFIX}br" up
    for i in $(seq "$n"); do
        ns=$(mn_ns "$i")
        ip link del "$(mn_veth "$i")" 2>/dev/null
        ip netns add "$ns" || mn_skip "ip netns add $ns failed"
        ip link add "$(mn_veth "$i")" type veth peer name eth0 netns "$ns" ||
            mn_skip "cannot create a veth pair"
        ip link set "$(mn_veth "$i")" master "${MN_PREFIX}br" up
        # IPv4 only: no IPv6 link-local addresses for the MPIs to find
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
            net.ipv6.conf.default.disable_ipv6=1 2>/dev/null
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$(mn_addr "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        echo "$i $(mn_addr "$i") $(mn_name "$i") $ns" >>"$MN_HOSTS"
    done
    mn_exec 1 true || mn_skip "cannot run a command in a host (ip netns exec + unshare --uts)"
    mn_check_reach || mn_skip "the hosts cannot reach each other over ${MN_PREFIX}br (a FORWARD firewall?)"
    echo "hosts_up: $n hosts $(mn_name 1)..$(mn_name "$n") on $MN_SUBNET (bridge ${MN_PREFIX}br)" >&2
}

# mn_check_reach: host 1 reaches every other host: a TCP connection to a
# closed port is refused (a RST came back) rather than timing out. No
# listener is needed. 0 when all answer.
mn_check_reach() {
    local i out
    for i in $(seq 2 "$MN_N"); do
        out=$(mn_exec 1 timeout 5 bash -c "exec 3<>/dev/tcp/$(mn_addr "$i")/9" 2>&1)
        case $out in
        *refused*) ;;
        *)
            echo "hosts_up: host 1 -> $(mn_addr "$i"):9: ${out:-timed out}" >&2
            return 1
            ;;
        esac
    done
}

# --- faults -----------------------------------------------------------

# mn_link_down I / mn_link_up I: unplug / replug host I's cable (the
# bridge end of its veth; the host's eth0 loses carrier, keeps its address
# and routes, and TCP retransmits until it is back).
mn_link_down() { ip link set "$(mn_veth "$1")" down; }
mn_link_up() { ip link set "$(mn_veth "$1")" up; }

# mn_loss I PROB: drop each packet host I receives or sends with
# probability PROB (iptables statistic, in the host's namespace; the
# kernel has no netem). mn_loss_clear I removes it.
mn_loss() {
    local ns
    ns=$(mn_ns "$1")
    ip netns exec "$ns" iptables -A INPUT -m statistic --mode random --probability "$2" -j DROP &&
        ip netns exec "$ns" iptables -A OUTPUT -m statistic --mode random --probability "$2" -j DROP
}
mn_loss_clear() {
    ip netns exec "$(mn_ns "$1")" iptables -F INPUT
    ip netns exec "$(mn_ns "$1")" iptables -F OUTPUT
}

# mn_tbf I RATE [BURST [LATENCY]]: cap host I's sending rate (tc tbf on
# its eth0, e.g. RATE 100mbit); mn_tbf_clear I removes it. Traffic to the
# host is shaped with the same call on the bridge end: mn_tbf_in.
mn_tbf() {
    tc -n "$(mn_ns "$1")" qdisc replace dev eth0 root tbf rate "$2" burst "${3:-32kb}" \
        latency "${4:-50ms}"
}
mn_tbf_in() {
    tc qdisc replace dev "$(mn_veth "$1")" root tbf rate "$2" burst "${3:-32kb}" \
        latency "${4:-50ms}"
}
mn_tbf_clear() {
    tc -n "$(mn_ns "$1")" qdisc del dev eth0 root 2>/dev/null
    tc qdisc del dev "$(mn_veth "$1")" root 2>/dev/null
    return 0
}

# mn_kill_host I: SIGKILL every process of host I (its ranks and its MPI
# daemon), as if the machine had died. Prints how many were killed.
mn_kill_host() {
    local pids
    pids=$(ip netns pids "$(mn_ns "$1")")
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids
    echo "$pids" | wc -w
}

# --- the MPI launcher ----------------------------------------------------

mn_flavour() { echo "$MPI_FLAVOUR"; }

# mn_hostfile S1 S2 ...: the hostfile, S_I slots on host I (0: none), in
# host order, so that ranks fill host 1's slots first, then host 2's...
# (rank 0 is on the first host with a slot). Sets MN_HOSTFILE.
mn_hostfile() {
    local i=0 s
    MN_HOSTFILE=$MN_DIR/hostfile
    : >"$MN_HOSTFILE"
    for s in "$@"; do
        i=$((i + 1))
        [ "$s" -gt 0 ] || continue
        case $(mn_flavour) in
        mpich) echo "$(mn_addr "$i"):$s" >>"$MN_HOSTFILE" ;;
        *) echo "$(mn_addr "$i") slots=$s" >>"$MN_HOSTFILE" ;;
        esac
    done
}

# mn_mpi_args: MN_MPI_ARGS, the flavour's flags for the hosts. What each
# MPI needs, and why:
# - Open MPI 4.1.4 (mpirun): `--mca plm_rsh_agent AGENT` (rsh launcher:
#   it runs `AGENT ADDR orted ...` for every other host of the hostfile;
#   the hostfile's address of host 1 is mpirun's own, so host 1's ranks
#   are started by mpirun itself); oob_tcp_if_include and
#   btl_tcp_if_include on the hosts' subnet, so that the daemons and the
#   ranks pick eth0; `--mca btl self,vader,tcp --mca pml ob1`: shared
#   memory inside a host (a host's ranks are children of one daemon: one
#   node), TCP between hosts; `--mca osc pt2pt`: Debian's
#   openmpi-mca-params.conf leaves osc rdma and sm, and MPI_Win_allocate
#   fails with MPI_ERR_WIN across nodes over TCP without pt2pt
#   (docs/platform.md, "Open MPI"). Run as root: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM),
#   inherited through the agent.
# - MPICH 4.0.2 (mpiexec.mpich, hydra, ch4:ucx): `-launcher rsh
#   -launcher-exec AGENT` (hydra runs `AGENT ADDR hydra_pmi_proxy ...`),
#   `-iface eth0` for hydra's own connections, and UCX_NET_DEVICES=eth0,
#   UCX_TLS=tcp,sm,self for the ranks (no rdmacm/ib probing); with the IPC
#   namespace per host (the agent) UCX uses sysv/cma inside a host and
#   tcp/eth0 between hosts (seen with UCX_LOG_LEVEL=info: ep_cfg lines).
#   The hostfile is ADDR:SLOTS. Known defect, not the harness's: with UCX's
#   tcp transport MPI_Finalize hangs now and then (Debian's MPICH 4.0.2,
#   UCX 1.13.1): one rank spins in ucp_worker_progress inside Finalize
#   while the others wait in the PMI barrier. On one host without
#   namespaces, `mpiexec.mpich -np 5 -genv UCX_TLS tcp,self` of a program
#   that only calls MPI_Allreduce hung in 2 of 8 runs, 6 of 8 with a
#   window; MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1 and UCX_PROTO_ENABLE=y did
#   not help. MN_TIMEOUT bounds such a run; it fails.
mn_mpi_args() {
    # shellcheck disable=SC2054 # commas inside flags' values
    case $(mn_flavour) in
    openmpi)
        MN_MPI_ARGS=(--hostfile "$MN_HOSTFILE" --mca plm_rsh_agent "$MN_AGENT"
            --mca oob_tcp_if_include "$MN_SUBNET" --mca btl_tcp_if_include "$MN_SUBNET"
            --mca btl self,vader,tcp --mca pml ob1 --mca osc pt2pt)
        ;;
    mpich)
        MN_MPI_ARGS=(-f "$MN_HOSTFILE" -launcher rsh -launcher-exec "$MN_AGENT" -iface eth0
            -genv UCX_NET_DEVICES eth0 -genv UCX_TLS tcp,sm,self)
        ;;
    *) mn_die "MPI_FLAVOUR must be openmpi or mpich, not $(mn_flavour)" ;;
    esac
}

# mn_mpiexec_bg ARGS...: $MPIEXEC with the flavour's flags and ARGS (-np
# N PROGRAM ...), started in the background on host 1 under timeout -k 5
# $MN_TIMEOUT; MN_JOB is its pid (wait for it: 124/137 mean timed out).
# Needs mn_hostfile first.
mn_mpiexec_bg() {
    [ -n "${MN_HOSTFILE:-}" ] || mn_die "mn_mpiexec before mn_hostfile"
    mn_mpi_args
    # shellcheck disable=SC2086 # MPIEXEC_ARGS: flags split on blanks
    timeout -k 5 "$MN_TIMEOUT" ip netns exec "$(mn_ns 1)" unshare --uts --ipc \
        sh -c 'hostname "$0" && exec "$@"' "$(mn_name 1)" \
        "$MPIEXEC" "${MN_MPI_ARGS[@]}" ${MPIEXEC_ARGS:-} "$@" &
    MN_JOB=$!
}

# mn_mpiexec ARGS...: the same in the foreground; returns its status.
# (Started in the background and waited for, so that a SIGTERM or SIGINT
# to the test runs the cleanup at once: bash runs a trap only after the
# foreground command ends, and timeout's process group is not the test's.
# A job killed on purpose makes bash print "PID Killed timeout ...": timeout
# re-raises its child's signal.)
mn_mpiexec() {
    mn_mpiexec_bg "$@"
    wait "$MN_JOB"
}
