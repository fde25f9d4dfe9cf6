#!/usr/bin/env bash
# RMA latency and bandwidth as pstrain uses it (bench/bench_rma.c; prints
# numbers, not a test; docs/scaling.md). Rank 0 is the target (a parameter
# server), the other ranks origins (workers).
#
#   bash jobs/bench-rma.sh [ROUNDS] [-- BENCH_RMA_OPTIONS...]
#
# WHERE (default local) chooses the ranks' placement and transport:
#   local   NP ranks (default 3) on this host, the MPI's default transport
#           (Open MPI: osc rdma over shared memory)
#   tcp     the same with every rank on TCP (MPIEXEC_TCP of jobs/mpiexec.sh:
#           Open MPI btl tcp + osc pt2pt)
#   hosts   emulated hosts (network namespaces over veth and a bridge, the
#           harness MN_HARNESS, default test/multinode/hosts.sh): the target
#           on host 1, one origin on each of hosts 2..NP; RATE (e.g. 1gbit,
#           200mbit; empty: uncapped) caps host 1's link in both directions
#           with tc tbf (BURST, default 64kb; TBF_LATENCY, default 50ms)
# Each configuration runs ROUNDS times (default 3); each run's output goes to
# $OUT/WHERE-RATE-N.txt and a summary prints, per measurement, the median of
# the runs' medians and the range over the runs.
#
#   bash jobs/bench-rma.sh 5
#   WHERE=tcp bash jobs/bench-rma.sh 3 -- --max 16M
#   WHERE=hosts NP=3 RATE=200mbit bash jobs/bench-rma.sh 3 -- --max 4M --seconds 0.5
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
set +e # hosts.sh's cleanup runs commands that may fail
bench_out out/bench-rma
rounds=${1:-3}
[ $# -gt 0 ] && shift
[ "${1:-}" = -- ] && shift
where=${WHERE:-local}
np=${NP:-3}
rate=${RATE:-}
case $rounds in '' | *[!0-9]*) echo "bench-rma: ROUNDS must be a number, not '$rounds'" >&2; exit 2 ;; esac
case $where in local | tcp | hosts) ;; *) echo "bench-rma: WHERE must be local, tcp or hosts" >&2; exit 2 ;; esac
bench_build -- bench/bench_rma || exit 1
bench=$top/$build/bench/bench_rma
# shellcheck source=mpiexec.sh
source "$top/jobs/mpiexec.sh"

tag=$where${rate:+-$rate}
if [ "$where" = hosts ]; then
    harness=${MN_HARNESS:-$top/test/multinode/hosts.sh}
    [ -f "$harness" ] || { echo "bench-rma: no multinode harness at $harness (MN_HARNESS)" >&2; exit 1; }
    # shellcheck disable=SC1090
    . "$harness"
    MN_TIMEOUT=${MN_TIMEOUT:-1800}
    hosts_up "$np" || exit 1
    slots=()
    for _ in $(seq "$np"); do slots+=(1); done
    mn_hostfile "${slots[@]}"
    if [ -n "$rate" ]; then
        mn_tbf 1 "$rate" "${BURST:-64kb}" "${TBF_LATENCY:-50ms}" &&
            mn_tbf_in 1 "$rate" "${BURST:-64kb}" "${TBF_LATENCY:-50ms}" ||
            { echo "bench-rma: tc tbf on host 1 failed" >&2; exit 1; }
        echo "host 1 capped: $(tc -n "$(mn_ns 1)" qdisc show dev eth0 | head -1)"
    fi
fi

for r in $(seq "$rounds"); do
    f=$out/$tag-$r.txt
    case $where in
    local) "${MPIEXEC_CMD[@]}" -n "$np" "$bench" "$@" >"$f" ;;
    tcp) "${MPIEXEC_CMD[@]}" "${MPIEXEC_TCP[@]}" -n "$np" "$bench" "$@" >"$f" ;;
    hosts) mn_mpiexec -np "$np" "$bench" "$@" >"$f" ;;
    esac
    rc=$?
    [ $rc = 0 ] || { echo "bench-rma: run $r failed (status $rc), output in $f" >&2; exit 1; }
    echo "run $r: $(head -1 "$f")"
done

python3 - "$out" "$tag" "$rounds" <<'EOF'
import re, statistics, sys
out, tag, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = {}
for r in range(1, rounds + 1):
    for line in open("%s/%s-%d.txt" % (out, tag, r)):
        m = re.match(r"latency\s+(\w+)\s+(\d+) B\s+median\s+([\d.]+) us\s+p10\s+([\d.]+)\s+p90\s+([\d.]+)", line)
        if m:
            rows.setdefault(("latency", m[1], m[2] + " B", ""), []).append(
                (float(m[3]), float(m[4]), float(m[5])))
            continue
        m = re.match(r"per-msg\s+(\w+)\s+(\d+) B\s+median\s+([\d.]+) us\s+p10\s+([\d.]+)\s+p90\s+([\d.]+)", line)
        if m:
            rows.setdefault(("per-msg", m[1], m[2] + " B", ""), []).append(
                (float(m[3]), float(m[4]), float(m[5])))
            continue
        m = re.match(r"bandwidth\s+(\w+)\s+(\d+ \w+)\s+origins\s+(\d+)\s+([\d.]+) GB/s", line)
        if m:
            rows.setdefault(("bandwidth", m[1], m[2], m[3]), []).append((float(m[4]),))
print("== %s: %d run(s); median of the runs' medians [min-max over runs]" % (tag, rounds))
for (kind, op, size, k), v in rows.items():
    med = [x[0] for x in v]
    if kind in ("latency", "per-msg"):
        print("%-10s %-3s %9s             %8.1f us [%.1f-%.1f]  p10 %.1f  p90 %.1f" % (
            kind, op, size, statistics.median(med), min(med), max(med),
            statistics.median(x[1] for x in v), statistics.median(x[2] for x in v)))
    else:
        g = statistics.median(med)
        print("bandwidth  %-3s %9s  origins %2s  %8.3f GB/s %7.2f Gbit/s [%.3f-%.3f GB/s]" % (
            op, size, k, g, 8 * g, min(med), max(med)))
EOF
