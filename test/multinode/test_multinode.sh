#!/usr/bin/env bash
# test_multinode.sh SCENARIO - pstrain across 2-3 emulated hosts (network
# namespaces on one bridge, hosts.sh), launched by the MPI's own launcher
# ($MPIEXEC, Open MPI's mpirun by default; MPI_FLAVOUR openmpi|mpich).
#
# Scenarios:
#   smoke      the harness: an MPI job (mn_hello) with ranks on 3 hosts
#              (2+2+1) prints each rank's host name, in the hostfile's
#              order, and moves data one-sided across hosts; after it, after
#              a deliberately failing step and after a SIGTERM mid-job,
#              nothing of the run is left (namespaces, links, processes)
#   once       exactly once per epoch: test_dist, 3 workers, root and PS
#              on host 1, workers on hosts 2 (2) and 3 (1), --trace checked
#   sync       sync lenet5, root + PS on host 1, workers on hosts 2 and 3:
#              --dump-params bitwise equal to the same run on one host; the
#              root's rank -> host -> role map names the three hosts
#   link-down  the same, with host 2's link down for 3 s mid-run: finishes,
#              bitwise equal to the run on one host
#   loss       the same, with 1% random packet loss in and out of host 2
#              (iptables statistic): finishes, bitwise equal
#   kill-host  every process of host 3 SIGKILLed mid-run: the job ends
#              within 30 s with an error status (no hang); --resume from
#              the last checkpoint on hosts 1 and 2 completes
#   tbf        host 1's link (root + PS) capped at 100 Mbit/s both ways (tc
#              tbf): sync resnet-20 (1.1 MB) on 3 hosts finishes, bitwise
#              equal to the uncapped run on one host, and its mean step is
#              within 30% of bench/scaling_model.py's prediction from the
#              link that bench_rma measures (jobs/scaling-lib.sh, shared
#              with jobs/bench-scaling.sh; TBF_CHECK_ARGS: more options of
#              `scaling_model.py check`, e.g. "--bw-ps 0.3" to see it fail)
#   ps-per-node  7 ranks on hosts 1-3 (3 + 2 + 2), 3 PS and 3 workers, sync
#              lenet5 in the classic layout (ranks 1-3 the PS: two on host 1,
#              one on host 2) and with --ps-per-node 1 (a PS and a worker on
#              every host): both bitwise equal to the same run on one host;
#              the colocated roles are checked in the root's map. Prints each
#              layout's mean step and the bytes through each host's link
#              (its veth's counters, MPI's daemons included): reported, not
#              asserted
#
# Environment: MN_HELLO, TEST_DIST, PSTRAIN, BENCH_RMA (built programs),
# MPIEXEC, MPI_FLAVOUR. Needs root (skips with 77 otherwise). Each MPI job
# is bounded by MN_TIMEOUT seconds; a job that hangs is killed and fails the
# test.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hosts.sh
. "$HERE/hosts.sh"
# shellcheck source=../../jobs/scaling-lib.sh
. "$HERE/../../jobs/scaling-lib.sh"
SCEN=${1:?usage: test_multinode.sh SCENARIO}
fail=0
die() { mn_die "$SCEN: $*"; }
bad() {
    echo "FAIL: $*" >&2
    fail=1
}

# expect_placement WHERE...: mn_hello on the current hostfile puts rank R
# on host WHERE[R] (host numbers); checks the launcher's placement that
# the scenario's roles rely on (rank 0 root, 1..P PS, the rest workers).
expect_placement() {
    local r=0 h out=$MN_DIR/placement.out
    mn_mpiexec -np $# "${MN_HELLO:?}" >"$out" 2>&1 || { cat "$out"; die "mn_hello failed"; }
    for h in "$@"; do
        grep -qx "rank $r on host $(mn_name "$h")" "$out" ||
            { cat "$out"; die "rank $r is not on host $h"; }
        r=$((r + 1))
    done
}

alive() { # PID: running, not a zombie
    local st
    st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ]
}

# the hosts of one run are gone: namespaces, links and the processes
# listed in FILE (one pid a word)
gone() { # RUN_PID [FILE]
    local p=$1 q ok=0
    if ip netns list | grep -q "^pstmn$p-"; then
        echo "namespaces of run $p left: $(ip netns list | grep "^pstmn$p-" | tr '\n' ' ')"
        ok=1
    fi
    if ip -o link show | grep -q "pstmn${p}[vb]"; then
        echo "links of run $p left: $(ip -o link show | grep -o "pstmn${p}[vb][a-z0-9]*" | tr '\n' ' ')"
        ok=1
    fi
    # (a zombie is dead: this machine's init may not reap the orphans; a
    # killed process leaves its namespaces before it is a zombie: 5 s)
    for q in $(cat "${2:-/dev/null}" 2>/dev/null); do
        t=$SECONDS
        while alive "$q" && [ $((SECONDS - t)) -lt 5 ]; do sleep 0.1; done
        alive "$q" && { echo "process $q of run $p is still alive: $(ps -o args= -p "$q")"; ok=1; }
    done
    return $ok
}

# pids_of_hosts: every process now in a host
pids_of_hosts() {
    local i
    for i in $(seq "$MN_N"); do ip netns pids "$(mn_ns "$i")"; done | tr '\n' ' '
}

# count_comm NAME: how many processes in the hosts run NAME
count_comm() {
    local q n=0
    for q in $(pids_of_hosts); do
        [ "$(cat "/proc/$q/comm" 2>/dev/null)" = "$1" ] && n=$((n + 1))
    done
    echo $n
}

# wait_for FILE SECONDS: until FILE exists and is not empty
wait_for() {
    local t=$SECONDS
    while ! [ -s "$1" ] && [ $((SECONDS - t)) -lt "$2" ]; do sleep 0.05; done
    [ -s "$1" ]
}

data() { # the small 28x28 set: 512 training, 64 test examples
    "${TEST_DIST:?}" mkdata "$MN_DIR/img.h5" 512 64 28 28 1 10 >/dev/null || die "mkdata"
}

# lenet5, sync, 1 PS, 2 workers, batch 16: 16 steps an epoch
TRAIN_ARGS=(--model lenet5 --batch 16 --ps 1 --log-every 0.1)

# ref EPOCHS: the run on one host (4 ranks on host 1) -> $MN_DIR/ref.bin
ref() {
    mn_hostfile 4
    mn_mpiexec -np 4 "${PSTRAIN:?}" train --data "$MN_DIR/img.h5" "${TRAIN_ARGS[@]}" \
        --epochs "$1" --quiet --dump-params "$MN_DIR/ref.bin" >"$MN_DIR/ref.log" 2>&1 ||
        { cat "$MN_DIR/ref.log"; die "the run on one host failed"; }
}

# spread: root + PS on host 1, worker 0 on host 2, worker 1 on host 3
spread() {
    mn_hostfile 2 1 1
    expect_placement 1 1 2 3
}

# fault_run EPOCHS FAULT: the spread run in the background; once it has
# logged a step, FAULT (a function) runs; then the run must end with 0,
# bitwise equal to ref.
fault_run() {
    local t0=$SECONDS rc
    mn_mpiexec_bg -np 4 "$PSTRAIN" train --data "$MN_DIR/img.h5" "${TRAIN_ARGS[@]}" --epochs "$1" \
        --metrics "$MN_DIR/m.jsonl" --dump-params "$MN_DIR/run.bin" >"$MN_DIR/run.log" 2>&1
    wait_for "$MN_DIR/m.jsonl" 60 || { cat "$MN_DIR/run.log"; die "no step logged in 60 s"; }
    "$2"
    wait "$MN_JOB"
    rc=$?
    echo "run with the fault: exit $rc after $((SECONDS - t0)) s"
    grep -E "^trained|error|rank [0-9]" "$MN_DIR/run.log"
    [ $rc = 0 ] || { tail -20 "$MN_DIR/run.log"; die "the run with the fault exited $rc"; }
    cmp "$MN_DIR/ref.bin" "$MN_DIR/run.bin" || bad "parameters differ from the run on one host"
}

case $SCEN in
smoke)
    # the harness in child shells (their own hosts), each checked from here
    # after it ended
    mn_require
    T=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-mn-smoke.XXXXXX")
    trap 'rm -rf "$T"' EXIT
    export MN_T=$T
    bash "$0" smoke-ok &
    p=$!
    wait $p
    rc=$?
    [ $rc != 77 ] || exit 77
    [ $rc = 0 ] || bad "the MPI job on 3 hosts failed"
    gone $p || bad "hosts left after a passing run"
    bash "$0" smoke-fail >"$T/fail.log" 2>&1 &
    p=$!
    wait $p
    rc=$?
    cat "$T/fail.log"
    [ $rc = 1 ] || bad "the deliberately failing run exited $rc, not 1"
    grep -q "deliberate failure" "$T/fail.log" || bad "the failing run did not reach its failure"
    [ -s "$T/pids.$p" ] || bad "the failing run recorded no processes"
    gone $p "$T/pids.$p" || bad "hosts or processes left after a failing run"
    bash "$0" smoke-term >"$T/term.log" 2>&1 &
    p=$!
    wait_for "$T/pids.$p" 60 || { cat "$T/term.log"; die "the MPI job of the SIGTERM case did not start"; }
    kill -TERM $p
    wait $p
    rc=$?
    cat "$T/term.log"
    [ $rc = 143 ] || bad "the run sent SIGTERM exited $rc, not 143"
    gone $p "$T/pids.$p" || bad "hosts or processes left after a SIGTERM"
    ;;
smoke-ok)
    hosts_up 3
    [ -z "$(ip -4 -o addr show | grep ' 198\.1[89]\.')" ] || bad "the root namespace has a 198.18/15 address"
    for i in 1 2 3; do
        [ -z "$(ip -n "$(mn_ns "$i")" route show default)" ] || bad "host $i has a default route"
        [ "$(mn_exec "$i" hostname)" = "$(mn_name "$i")" ] || bad "host $i's host name"
    done
    mn_hostfile 2 2 1
    mn_mpiexec -np 5 "$MN_HELLO" 3 >"$MN_DIR/hello.out" 2>&1 || bad "mn_hello exited $?"
    cat "$MN_DIR/hello.out"
    r=0
    for h in 1 1 2 2 3; do
        grep -qx "rank $r on host $(mn_name $h)" "$MN_DIR/hello.out" || bad "rank $r not on host $h"
        r=$((r + 1))
    done
    grep -qx "5 ranks on 3 hosts, one-sided ok" "$MN_DIR/hello.out" || bad "mn_hello's summary"
    ;;
smoke-fail)
    # processes left in two hosts, then a failing step: the trap cleans up
    hosts_up 3
    mn_exec 2 sleep 300 &
    mn_exec 3 sleep 300 &
    t=$SECONDS
    while [ "$(count_comm sleep)" -lt 2 ] && [ $((SECONDS - t)) -lt 30 ]; do sleep 0.1; done
    pids_of_hosts >"$MN_T/pids.$$"
    echo "processes in the hosts: $(cat "$MN_T/pids.$$")"
    false || die "deliberate failure"
    ;;
smoke-term)
    # an MPI job on 3 hosts, then SIGTERM (from the smoke scenario)
    hosts_up 3
    mn_hostfile 1 1 1
    mn_mpiexec_bg -np 3 sleep 300
    # until the 3 ranks run
    t=$SECONDS
    while [ "$(count_comm sleep)" -lt 3 ] && [ $((SECONDS - t)) -lt 30 ]; do sleep 0.1; done
    pids_of_hosts >"$MN_T/pids.tmp"
    mv "$MN_T/pids.tmp" "$MN_T/pids.$$"
    wait "$MN_JOB"
    ;;
once)
    # root + PS on host 1, workers 0, 1 on host 2, worker 2 on host 3
    hosts_up 3
    "${TEST_DIST:?}" mkdata "$MN_DIR/small.h5" 600 100 8 8 1 4 >/dev/null || die "mkdata"
    mn_hostfile 2 2 1
    expect_placement 1 1 2 2 3
    mn_mpiexec -np 5 "$TEST_DIST" train --data "$MN_DIR/small.h5" --ps 1 --epochs 2 --expect-once \
        --trace "$MN_DIR/trace.jsonl" || die "test_dist train exited $?"
    python3 "$HERE/../dist/check_trace.py" "$MN_DIR/trace.jsonl" 3 1200 || bad "the trace"
    ;;
sync)
    hosts_up 3
    data
    ref 4
    spread
    mn_mpiexec -np 4 "$PSTRAIN" train --data "$MN_DIR/img.h5" "${TRAIN_ARGS[@]}" --epochs 4 \
        --dump-params "$MN_DIR/run.bin" >"$MN_DIR/run.log" 2>&1 ||
        { cat "$MN_DIR/run.log"; die "the run on 3 hosts exited $?"; }
    cmp "$MN_DIR/ref.bin" "$MN_DIR/run.bin" || bad "parameters differ from the run on one host"
    # the root's rank -> host -> role map names each host's ranks and roles
    for want in "host $(mn_name 1): rank 0 root, rank 1 ps 1" "host $(mn_name 2): rank 2 worker 0" \
        "host $(mn_name 3): rank 3 worker 1"; do
        grep -q "] $want\$" "$MN_DIR/run.log" || { grep 'host ' "$MN_DIR/run.log"; bad "no line '$want'"; }
    done
    ;;
link-down)
    # The outage starts at the first logged step; a sync step needs both
    # workers, so the run cannot end during it (checked: the test fails if
    # it did). 6 epochs, 96 steps: about 1.2 s on idle cores.
    hosts_up 3
    data
    ref 6
    spread
    outage() {
        mn_link_down 2
        echo "host 2's link down at step $(tail -1 "$MN_DIR/m.jsonl" | grep -o '"step":[0-9]*')"
        sleep 3
        kill -0 "$MN_JOB" 2>/dev/null || die "the run ended during the outage: make it longer"
        mn_link_up 2
        echo "host 2's link up at step $(tail -1 "$MN_DIR/m.jsonl" | grep -o '"step":[0-9]*')"
    }
    fault_run 6 outage
    ;;
loss)
    # Each lost packet of a request/response exchange costs a TCP
    # retransmission timeout (>= 200 ms): 4 epochs, 64 steps (about 50
    # packets lost, 10-20 s)
    hosts_up 3
    data
    ref 4
    spread
    lossy() { mn_loss 2 0.01 || die "iptables in host 2"; }
    fault_run 4 lossy
    # the rules did drop packets (their counters)
    dropped=$(ip netns exec "$(mn_ns 2)" iptables -nvxL | awk '$3 == "DROP" { n += $1 } END { print n + 0 }')
    echo "packets dropped in host 2: $dropped"
    [ "$dropped" -gt 0 ] || bad "no packet was dropped: the loss did not apply"
    ;;
kill-host)
    # root + PS on host 1, a worker on hosts 2 and 3; checkpoints every 20
    # steps; host 3 dies after the first. The run is planned for 40 epochs
    # (it never gets there); the resumed one goes on to 3 epochs past its
    # checkpoint.
    hosts_up 3
    data
    spread
    ck=$MN_DIR/ck
    mn_mpiexec_bg -np 4 "$PSTRAIN" train --data "$MN_DIR/img.h5" "${TRAIN_ARGS[@]}" --epochs 40 \
        --checkpoint-dir "$ck" --checkpoint-every 20 >"$MN_DIR/run.log" 2>&1
    wait_for "$ck/latest" 60 || { cat "$MN_DIR/run.log"; die "no checkpoint in 60 s"; }
    kill -0 "$MN_JOB" 2>/dev/null || { cat "$MN_DIR/run.log"; die "the run ended before the kill"; }
    n=$(mn_kill_host 3)
    t0=$(date +%s%N)
    echo "host 3: $n processes killed after $(cat "$ck/latest")"
    [ "$n" -ge 2 ] || bad "host 3 had $n processes, expected a daemon and a rank"
    while kill -0 "$MN_JOB" 2>/dev/null && [ $((($(date +%s%N) - t0) / 1000000)) -lt 30000 ]; do
        sleep 0.1
    done
    dt=$((($(date +%s%N) - t0) / 1000000))
    if kill -0 "$MN_JOB" 2>/dev/null; then
        tail -20 "$MN_DIR/run.log"
        die "the job still runs 30 s after host 3 died (hang)"
    fi
    wait "$MN_JOB"
    rc=$?
    echo "the job ended $dt ms after the kill, exit $rc"
    grep -v '^\[' "$MN_DIR/run.log" | head -5
    [ $rc != 0 ] || bad "the job exited 0 with a dead host"
    [ $rc != 124 ] && [ $rc != 137 ] || bad "the job timed out (exit $rc)"
    last=$(cat "$ck/latest")
    step=${last#ckpt-}
    step=${step%.h5}
    # 32 examples a step, 512 an epoch
    epochs=$((step / 16 + 3))
    # the same checkpoint directory, one host fewer: root + PS on host 1,
    # one worker on host 2
    mn_hostfile 2 1
    mn_mpiexec -np 3 "$PSTRAIN" train --data "$MN_DIR/img.h5" "${TRAIN_ARGS[@]}" \
        --epochs $epochs --checkpoint-dir "$ck" --resume >"$MN_DIR/resume.log" 2>&1
    rc=$?
    grep -v '\] step ' "$MN_DIR/resume.log"
    [ $rc = 0 ] || die "the resumed run exited $rc"
    grep -q "resumed from $ck/$last at step $step " "$MN_DIR/resume.log" ||
        bad "not resumed from $last"
    grep -qE "^trained lenet5: step ([0-9]+)/\1, epoch $epochs/$epochs" "$MN_DIR/resume.log" ||
        bad "the resumed run did not finish its $epochs epochs"
    ;;
tbf)
    # resnet-20, batch 16 per worker, 30 sync steps: at 100 Mbit/s a step
    # moves 2 x 1.1 MB each way through host 1's link (~270 ms of its ~400;
    # docs/scaling.md, "The model against measured steps").
    hosts_up 3
    data
    steps=30
    run() { # NAME: the run on the current hostfile -> NAME.json, .log, .bin (parameters)
        scaling_train "${PSTRAIN:?}" "$MN_DIR/$1.json" "$MN_DIR/$1.log" "$MN_DIR/img.h5" resnet-20 16 \
            $steps --dump-params "$MN_DIR/$1.bin"
        local rc=$?
        [ $rc = 0 ] || { tail -20 "$MN_DIR/$1.log"; die "the $1 run exited $rc"; }
    }
    mn_hostfile 4
    run ref
    spread
    scaling_cap 1 100mbit || die "tc tbf on host 1"
    tc -n "$(mn_ns 1)" qdisc show dev eth0
    tc qdisc show dev "$(mn_veth 1)"
    # the capped link as the model sees it: B (2 origins, 1 MiB), L and o
    scaling_rma "${BENCH_RMA:?}" "$MN_DIR/rma.txt" --origins 2 --lat-reps 100 --reps 3 --seconds 0.2 ||
        { cat "$MN_DIR/rma.txt"; die "bench_rma failed"; }
    grep -E "^(latency +fop|bandwidth)" "$MN_DIR/rma.txt"
    mn_hostfile 2 1 1
    t0=$SECONDS
    run capped
    echo "the capped run: exit 0 after $((SECONDS - t0)) s"
    cmp "$MN_DIR/ref.bin" "$MN_DIR/capped.bin" || bad "parameters differ from the uncapped run on one host"
    # shellcheck disable=SC2086 # options split on blanks
    python3 "$HERE/../../bench/scaling_model.py" check --model resnet-20 --ps 1 --batch 16 \
        --workers 2 --root-on-ps-host --rma "$MN_DIR/rma.txt" --summary "$MN_DIR/capped.json" \
        --pstrain "$PSTRAIN" --tolerance 0.3 ${TBF_CHECK_ARGS:-} ||
        bad "the measured step is not within 30% of the model's"
    ;;
ps-per-node)
    hosts_up 3
    data
    PPN_ARGS=(--model lenet5 --batch 16 --epochs 2 --log-every 0.1)
    mn_hostfile 7
    mn_mpiexec -np 7 "${PSTRAIN:?}" train --data "$MN_DIR/img.h5" "${PPN_ARGS[@]}" --ps 3 --quiet \
        --dump-params "$MN_DIR/ref.bin" >"$MN_DIR/ref.log" 2>&1 ||
        { cat "$MN_DIR/ref.log"; die "the run on one host failed"; }
    mn_hostfile 3 2 2
    expect_placement 1 1 1 2 2 3 3
    # link_bytes: "OUT IN" of each host's link (the bridge end's rx and tx)
    link_bytes() {
        local i d
        for i in 1 2 3; do
            d=/sys/class/net/$(mn_veth "$i")/statistics
            echo "$(cat "$d/rx_bytes") $(cat "$d/tx_bytes")"
        done
    }
    for layout in classic colocated; do
        flags=(--ps 3)
        [ $layout = colocated ] && flags=(--ps-per-node 1)
        link_bytes >"$MN_DIR/$layout.before"
        mn_mpiexec -np 7 "$PSTRAIN" train --data "$MN_DIR/img.h5" "${PPN_ARGS[@]}" "${flags[@]}" \
            --summary-json "$MN_DIR/$layout.json" --dump-params "$MN_DIR/$layout.bin" \
            >"$MN_DIR/$layout.log" 2>&1
        rc=$?
        [ $rc = 0 ] || { tail -20 "$MN_DIR/$layout.log"; die "the $layout run exited $rc"; }
        link_bytes >"$MN_DIR/$layout.after"
        cmp "$MN_DIR/ref.bin" "$MN_DIR/$layout.bin" || bad "$layout: parameters differ from the run on one host"
        grep "] host " "$MN_DIR/$layout.log"
    done
    for want in "host $(mn_name 1): rank 0 root, rank 1 ps 1, rank 2 worker 0" \
        "host $(mn_name 2): rank 3 ps 2, rank 4 worker 1" "host $(mn_name 3): rank 5 ps 3, rank 6 worker 2"; do
        grep -q "] $want\$" "$MN_DIR/colocated.log" || bad "colocated: no line '$want'"
    done
    # the comparison: mean step (train_seconds / steps) and MB out/in per link
    python3 - "$MN_DIR" <<'PY'
import json, sys
d = sys.argv[1]
print("layout     step ms   bytes out/in of each host's link, MB (KB per step)")
for layout in ("classic", "colocated"):
    s = json.load(open(f"{d}/{layout}.json"))
    before = [list(map(int, l.split())) for l in open(f"{d}/{layout}.before")]
    after = [list(map(int, l.split())) for l in open(f"{d}/{layout}.after")]
    n = max(s["steps"], 1)
    links = []
    for h, (a, b) in enumerate(zip(after, before), 1):
        o, i = a[0] - b[0], a[1] - b[1]
        links.append(f"host {h} {o / 1e6:.2f}/{i / 1e6:.2f} ({o / 1e3 / n:.0f}/{i / 1e3 / n:.0f})")
    print(f"{layout:10} {1e3 * s['train_seconds'] / n:7.1f}   " + ", ".join(links))
PY
    ;;
*)
    die "unknown scenario"
    ;;
esac
[ $fail = 0 ] || die "failed"
echo "$SCEN: OK"
