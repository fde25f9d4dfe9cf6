/*
 * layout.h - the nodes of a run and the roles of its ranks (docs/design.md
 * §1): which world ranks share a node, the classic layout (the first P ranks
 * after the root are the PS), the colocated one (--ps-per-node N: N PS on
 * every node), and the feeder ranks of --feeders F, placed by node.
 *
 * A node is a group of MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): ranks that
 * share memory. Nodes are numbered from 0 in the order of their first
 * (lowest) world rank, so rank 0, the root, is on node 0, and each is named
 * by the host name (MPI_Get_processor_name) of its first rank.
 *
 * Test-only: PSTRAIN_TEST_NODES="I0,I1,..." (one node id per world rank)
 * replaces the shared-memory split, and the host names become "node<I>",
 * so that one machine runs the role logic of several nodes. It is read in
 * one place (test_nodes in layout.c).
 */
#ifndef PSTRAIN_CLUSTER_LAYOUT_H
#define PSTRAIN_CLUSTER_LAYOUT_H

#include <mpi.h>

#include "pstrain/common.h"
#include "pstrain/train.h"

/* The roles (dist.c assigns them from these functions' role arrays). */
enum { ROLE_ROOT, ROLE_PS, ROLE_WORKER, ROLE_FEEDER };

typedef struct dist_nodes {
    int n;        /* nodes */
    int size;     /* world ranks */
    int *of_rank; /* the node of each world rank */
    char *names;  /* n names of MPI_MAX_PROCESSOR_NAME bytes */
} dist_nodes;

/* This rank's host name for messages and the rank -> host -> role map:
 * MPI_Get_processor_name, or "node<I>" under PSTRAIN_TEST_NODES. */
void dist_host_name(char out[MPI_MAX_PROCESSOR_NAME]);

/* Collective over MPI_COMM_WORLD: finds the nodes. Returns -1 with e when
 * PSTRAIN_TEST_NODES is malformed (the same on every rank). */
int dist_nodes_find(dist_nodes *nd, pst_err *e);
void dist_nodes_free(dist_nodes *nd);

/* The colocated layout, pure: on each node, in world-rank order, the first
 * N ranks other than the root (world rank 0) are parameter servers, the
 * rest workers. role[r] (nd->size entries) gets ROLE_ROOT, ROLE_PS or
 * ROLE_WORKER. Returns P = N x nodes, or -1 with e naming the
 * first node with too few ranks for N PS and a worker. */
int layout_ps_per_node(const dist_nodes *nd, int N, int *role, pst_err *e);

/* The classic layout, pure: world rank 0 the root, ranks 1..P the PS, the
 * rest workers, into role[size]. */
void layout_classic(int size, int P, int *role);

/* Feeder placement, pure: feeders 1..F-1 go over the nodes round-robin from
 * node 1 (node 0 holds the root, feeder 0): feeder f on node f mod nodes,
 * as the first rank there, in world-rank order, that role[] has as a
 * worker. On one node they are the F-1 ranks after the PS. role[]
 * (nd->size entries, from layout_classic or layout_ps_per_node) gets
 * ROLE_FEEDER for them; feeder_rank[f] (F entries) the world rank of
 * feeder f, [0] the root's. Returns 0, or -1 with e (role[] unchanged)
 * naming the first node without ranks for its feeders, or when no worker
 * is left. */
int layout_feeders(const dist_nodes *nd, int F, int *role, int *feeder_rank, pst_err *e);

/* Worker attachment, pure (lockstep sync with F > 1 feeders draws each
 * worker's batches from one feeder, feed.h): attach[r] (nd->size entries)
 * for each worker rank r in world-rank order is the next feeder on its
 * node, in turn over the feeders there (by feeder index), or on a node
 * without a feeder, the next of all F feeders in turn; -1 for the other
 * ranks. feeder_rank: F world ranks, [0] the root's. */
void layout_attach(const dist_nodes *nd, int F, const int *role, const int *feeder_rank,
                   int *attach);

/* Collective: the roles of --ps-per-node (c->ps_per_node > 0) on this
 * world: *role (owned, one per world rank) and *P. A --ps given beside it
 * (c->ps > 0) must equal N x nodes. Returns -1 with e, the same on every
 * rank, before any window exists. */
int layout_colocated(const train_cfg *c, int **role, int *P, pst_err *e);

/* Collective: places F > 1 feeders by node (layout_feeders) over the
 * roles in role[] (one per world rank, updated): *feeder_rank gets F world
 * ranks (owned), [0] the root's, and *attach (owned, one per world rank)
 * the workers' feeders (layout_attach). Returns -1 with e, the same on
 * every rank. */
int layout_place_feeders(int F, int *role, int **feeder_rank, int **attach, pst_err *e);

#endif
