#!/usr/bin/env bash
# test_ps_per_node.sh - the colocated layout (pstrain train --ps-per-node N,
# docs/design.md §1) on one machine: the roles in the root's rank -> host ->
# role map, sync results bitwise equal to the classic layout with the same
# number of PS and workers, feeders (--feeders) placed one per node in both
# layouts (exactly once, bitwise equal), and the refusals (one line on the
# root, exit 1, no hang).
#
# One machine is one node (MPI_COMM_TYPE_SHARED), where N PS per node are
# the first N ranks after the root, as in the classic layout. The role logic
# of several nodes runs under the test-only override PSTRAIN_TEST_NODES
# (one node id per world rank; src/cluster/layout.h), in blocks of ranks and
# with the ranks interleaved.
#
# Environment (test_env): PSTRAIN, TEST_DIST (mkdata), PSTRAIN_SRC, MPIEXEC,
# MPI_FLAVOUR.
set -u
. "$(dirname "$0")/mlp_runs.sh"

host=$(hostname)
# the classic layouts: 1 and 2 PS, 3 workers
train classic1 5 --ps 1
train classic2 6 --ps 2
# without --ps or --ps-per-node: one PS, as --help says
train default 5
same default classic1
grep -q '"ps": 1,' "$TMP/default.json" || bad "default: the summary lacks ps 1"

# one node: N = 1 and N = 2 are the first N ranks after the root
train node-n1 5 --ps-per-node 1
H=$(sed -n 's/^\[ *[0-9.]*s\] host \([^:]*\): rank 0 root.*/\1/p' "$TMP/node-n1.log")
[ -n "$H" ] || H=$host
map node-n1 "host $H: rank 0 root, rank 1 ps 1, rank 2 worker 0, rank 3 worker 1, rank 4 worker 2"
same node-n1 classic1
grep -q '"ps_per_node": 1,' "$TMP/node-n1.json" && grep -q '"nodes": 1,' "$TMP/node-n1.json" ||
    bad "node-n1: the summary lacks ps_per_node 1 and nodes 1"
train node-n2 6 --ps-per-node 2 --ps 2
map node-n2 "host $H: rank 0 root, rank 1 ps 1, rank 2 ps 2, rank 3 worker 0, rank 4 worker 1, rank 5 worker 2"
same node-n2 classic2

# two nodes (the override), ranks in blocks: ps 1 on node0, ps 2 on node1
export PSTRAIN_TEST_NODES=0,0,0,1,1,1
train block 6 --ps-per-node 1
map block "host node0: rank 0 root, rank 1 ps 1, rank 2 worker 0" \
    "host node1: rank 3 ps 2, rank 4 worker 1, rank 5 worker 2"
same block classic2
grep -q '"nodes": 2,' "$TMP/block.json" || bad "block: the summary lacks nodes 2"
# ranks interleaved over the nodes: the PS and worker indices follow the
# world ranks; the greedy placement over that PS set
export PSTRAIN_TEST_NODES=0,1,1,0,0,1
train interleaved 6 --ps-per-node 1 --placement greedy
map interleaved "host node0: rank 0 root, rank 3 ps 2, rank 4 worker 1" \
    "host node1: rank 1 ps 1, rank 2 worker 0, rank 5 worker 2"
same interleaved classic2

# with --feeders: one feeder per node beside its PS, round-robin from node 1
# (feeder f on node f mod nodes, the node's first rank that is neither PS nor
# root), each worker drawing from its node's feeder (sync and async);
# exactly once, sync bitwise equal to the classic F = 1 run
CHECK_TRACE="$(dirname "$0")/check_trace.py"
once() { # NAME WORKERS
    python3 "$CHECK_TRACE" "$TMP/$1.jsonl" "$2" 1200 >/dev/null || bad "$1: not exactly once"
}
export PSTRAIN_TEST_NODES=0,0,0,1,1,1,2,2,2
train feed3 9 --ps-per-node 1 --feeders 3
map feed3 "host node0: rank 0 root, rank 1 ps 1, rank 2 worker 0 (from feeder 0)" \
    "host node1: rank 3 ps 2, rank 4 feeder 1, rank 5 worker 1 (from feeder 1)" \
    "host node2: rank 6 ps 3, rank 7 feeder 2, rank 8 worker 2 (from feeder 2)"
once feed3 3
same feed3 classic1
grep -q '"feeders": 3,' "$TMP/feed3.json" && grep -q '"nodes": 3,' "$TMP/feed3.json" ||
    bad "feed3: the summary lacks feeders 3 and nodes 3"
# interleaved ranks, 2 nodes, 3 feeders: feeder 2 back on the root's node,
# serving no worker (async: the root's worker draws from the root)
export PSTRAIN_TEST_NODES=0,1,0,1,0,1,0,1
train feed-interleaved 8 --ps-per-node 1 --feeders 3 --mode async
map feed-interleaved "host node0: rank 0 root, rank 2 ps 2, rank 4 feeder 2, rank 6 worker 1 (from feeder 0)" \
    "host node1: rank 1 ps 1, rank 3 feeder 1, rank 5 worker 0 (from feeder 1), rank 7 worker 2 (from feeder 1)"
once feed-interleaved 3
# the classic layout's feeders go by node too (feeder 1 on node 1 after
# feeder 2 in rank order); worker 0 draws from the root (the first feeder
# on its node), workers 1 and 2 from feeder 1, none from feeder 2
export PSTRAIN_TEST_NODES=0,0,0,0,1,1,1
train feed-classic 7 --ps 1 --feeders 3
map feed-classic "host node0: rank 0 root, rank 1 ps 1, rank 2 feeder 2, rank 3 worker 0 (from feeder 0)" \
    "host node1: rank 4 feeder 1, rank 5 worker 1 (from feeder 1), rank 6 worker 2 (from feeder 1)"
once feed-classic 3
same feed-classic classic1

# refusals
export PSTRAIN_TEST_NODES=0,0,0,0,0,1,1
refuse feeders-node 7 "--feeders 4: node 2 of 2 (host node1) has 2 ranks, but needs at least 3 (1 PS + 2 feeders; one per node round-robin from the root's next node)" \
    --ps-per-node 1 --feeders 4
export PSTRAIN_TEST_NODES=0,0,0,1
refuse no-worker 4 "--ps-per-node 1: node 2 of 2 (host node1) has 1 rank, but needs at least 2 (1 PS + 1 worker)" \
    --ps-per-node 1
export PSTRAIN_TEST_NODES=0,0,0,1,1,1
refuse ps-mismatch 6 "--ps 3 with --ps-per-node 1 on 2 nodes: expected --ps 2" --ps 3 --ps-per-node 1
export PSTRAIN_TEST_NODES=0,0,x
refuse bad-override 3 "PSTRAIN_TEST_NODES (a test-only override): expected 3" --ps-per-node 1
unset PSTRAIN_TEST_NODES
refuse root-node 3 "--ps-per-node 2: node 1 of 1 (host $H) has 3 ranks, but needs at least 4 (the root + 2 PS + 1 worker)" \
    --ps-per-node 2
[ $fail = 0 ] || exit 1
echo "ps-per-node: OK"
