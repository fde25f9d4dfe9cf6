/* layout.c - the nodes of a run and the roles of its ranks (layout.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"
#include "layout.h"

/* PSTRAIN_TEST_NODES (test-only, layout.h): ids[r] = the node id of world
 * rank r. Returns 0 when unset, 1 when set, -1 with e when it does not
 * hold `size` comma-separated non-negative integers. */
static int test_nodes(int size, int *ids, pst_err *e)
{
    const char *v = getenv("PSTRAIN_TEST_NODES");
    if (!v) return 0;
    const char *p = v;
    for (int r = 0; r < size; r++) {
        char *end = NULL;
        const long id = strtol(p, &end, 10);
        if (end == p || id < 0 || id > 1 << 20 || (*end != ',' && *end != 0) ||
            (*end == 0) != (r == size - 1))
            return pst_fail(
                e,
                "PSTRAIN_TEST_NODES (a test-only override): expected %d comma-separated "
                "node ids, one per rank, got '%s'",
                size, v);
        ids[r] = (int)id;
        p = end + 1;
    }
    return 1;
}

void dist_host_name(char out[MPI_MAX_PROCESSOR_NAME])
{
    int rank = 0, size = 1, len = 0;
    MPI_OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int *ids = pst_malloc(sizeof *ids * (size_t)size);
    pst_err e;
    if (test_nodes(size, ids, &e) == 1)
        snprintf(out, MPI_MAX_PROCESSOR_NAME, "node%d", ids[rank]);
    else
        MPI_OK(MPI_Get_processor_name(out, &len));
    free(ids);
}

int dist_nodes_find(dist_nodes *nd, pst_err *e)
{
    enum { NAME = MPI_MAX_PROCESSOR_NAME };
    memset(nd, 0, sizeof *nd);
    int rank = 0, size = 1;
    MPI_OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int *key = pst_malloc(sizeof *key * (size_t)size);
    const int t = test_nodes(size, key, e);
    if (t < 0) {
        free(key);
        return -1;
    }
    if (t == 0) { /* a node's key: its first world rank */
        MPI_Comm node;
        MPI_OK(
            MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
        int first = rank;
        MPI_OK(MPI_Allreduce(&rank, &first, 1, MPI_INT, MPI_MIN, node));
        MPI_OK(MPI_Comm_free(&node));
        MPI_OK(MPI_Allgather(&first, 1, MPI_INT, key, 1, MPI_INT, MPI_COMM_WORLD));
    }
    char mine[NAME] = "";
    dist_host_name(mine);
    char *names = pst_malloc((size_t)NAME * (size_t)size);
    MPI_OK(MPI_Allgather(mine, NAME, MPI_CHAR, names, NAME, MPI_CHAR, MPI_COMM_WORLD));
    /* nodes numbered in the order of their first rank, named after it */
    nd->size = size;
    nd->of_rank = pst_malloc(sizeof *nd->of_rank * (size_t)size);
    nd->names = pst_malloc((size_t)NAME * (size_t)size);
    for (int r = 0; r < size; r++) {
        int k = 0;
        while (k < r && key[k] != key[r]) k++;
        if (k == r) {
            memcpy(nd->names + (size_t)nd->n * NAME, names + (size_t)r * NAME, NAME);
            nd->names[(size_t)nd->n * NAME + NAME - 1] = 0;
            nd->of_rank[r] = nd->n++;
        } else {
            nd->of_rank[r] = nd->of_rank[k];
        }
    }
    free(names);
    free(key);
    return 0;
}

void dist_nodes_free(dist_nodes *nd)
{
    free(nd->of_rank);
    free(nd->names);
    memset(nd, 0, sizeof *nd);
}

int layout_ps_per_node(const dist_nodes *nd, int N, int *role, pst_err *e)
{
    int *ps_here = pst_calloc((size_t)nd->n, sizeof *ps_here);
    int *ranks = pst_calloc((size_t)nd->n, sizeof *ranks);
    for (int r = 0; r < nd->size; r++) {
        const int k = nd->of_rank[r];
        ranks[k]++;
        if (r == 0)
            role[r] = ROLE_ROOT;
        else if (ps_here[k] < N)
            role[r] = ROLE_PS, ps_here[k]++;
        else
            role[r] = ROLE_WORKER;
    }
    int rc = 0;
    for (int k = 0; k < nd->n && rc == 0; k++) {
        const int root = nd->of_rank[0] == k, need = root + N + 1;
        if (ranks[k] < need)
            rc = pst_fail(e,
                          "--ps-per-node %d: node %d of %d (host %s) has %d rank%s, but needs at "
                          "least %d (%s%d PS + 1 worker)",
                          N, k + 1, nd->n, nd->names + (size_t)k * MPI_MAX_PROCESSOR_NAME, ranks[k],
                          ranks[k] == 1 ? "" : "s", need, root ? "the root + " : "", N);
    }
    free(ps_here);
    free(ranks);
    return rc < 0 ? -1 : N * nd->n; /* below the world size: every node has N + 1 ranks */
}

void layout_classic(int size, int P, int *role)
{
    for (int r = 0; r < size; r++) role[r] = r == 0 ? ROLE_ROOT : r <= P ? ROLE_PS : ROLE_WORKER;
}

/* The node that feeder f (1..F-1) goes on: round-robin from node 1, the
 * one after the root's (nodes are numbered from 0, dist_nodes_find). */
static int feeder_node(int f, int nodes)
{
    return f % nodes;
}

/* Fails naming the first node with fewer ranks than the root, its PS and
 * its feeders (feeder_node) need; 0 when every node has them. */
static int feeders_fit(const dist_nodes *nd, int F, const int *role, pst_err *e)
{
    int *ranks = pst_calloc((size_t)nd->n, sizeof *ranks);
    int *taken = pst_calloc((size_t)nd->n, sizeof *taken); /* root and PS */
    int *feeders = pst_calloc((size_t)nd->n, sizeof *feeders);
    for (int r = 0; r < nd->size; r++) {
        ranks[nd->of_rank[r]]++;
        if (role[r] != ROLE_WORKER) taken[nd->of_rank[r]]++;
    }
    for (int f = 1; f < F; f++) feeders[feeder_node(f, nd->n)]++;
    int rc = 0;
    for (int k = 0; k < nd->n && rc == 0; k++) {
        if (ranks[k] >= taken[k] + feeders[k]) continue;
        const bool root = nd->of_rank[0] == k;
        rc = pst_fail(e,
                      "--feeders %d: node %d of %d (host %s) has %d rank%s, but needs at least %d "
                      "(%s%d PS + %d feeder%s; one per node round-robin from the root's next "
                      "node)",
                      F, k + 1, nd->n, nd->names + (size_t)k * MPI_MAX_PROCESSOR_NAME, ranks[k],
                      ranks[k] == 1 ? "" : "s", taken[k] + feeders[k], root ? "the root + " : "",
                      taken[k] - root, feeders[k], feeders[k] == 1 ? "" : "s");
    }
    free(ranks), free(taken), free(feeders);
    return rc;
}

int layout_feeders(const dist_nodes *nd, int F, int *role, int *feeder_rank, pst_err *e)
{
    int workers = 0, ps = 0;
    for (int r = 0; r < nd->size; r++) {
        workers += role[r] == ROLE_WORKER, ps += role[r] == ROLE_PS;
        if (role[r] == ROLE_ROOT) feeder_rank[0] = r;
    }
    if (workers < F)
        return pst_fail(e,
                        "--feeders %d with %d PS and %d MPI ranks leaves no worker: %d ranks are "
                        "needed at least (1 root + %d PS + %d feeders + 1 or more workers)",
                        F, ps, nd->size, ps + F + 1, ps, F - 1);
    if (feeders_fit(nd, F, role, e) < 0) return -1;
    for (int f = 1; f < F; f++) {
        const int k = feeder_node(f, nd->n);
        int r = 0;
        while (nd->of_rank[r] != k || role[r] != ROLE_WORKER) r++; /* feeders_fit: one is left */
        role[r] = ROLE_FEEDER, feeder_rank[f] = r;
    }
    return 0;
}

int layout_colocated(const train_cfg *c, int **role, int *P, pst_err *e)
{
    *role = NULL;
    dist_nodes nd;
    if (dist_nodes_find(&nd, e) < 0) return -1;
    int *roles = pst_malloc(sizeof *roles * (size_t)nd.size);
    int rc = layout_ps_per_node(&nd, c->ps_per_node, roles, e);
    if (rc >= 0 && c->ps > 0 && c->ps != rc)
        rc = pst_fail(e,
                      "--ps %d with --ps-per-node %d on %d node%s: expected --ps %d (the PS per "
                      "node x the nodes), or no --ps",
                      c->ps, c->ps_per_node, nd.n, nd.n == 1 ? "" : "s", rc);
    dist_nodes_free(&nd);
    if (rc < 0) {
        free(roles);
        return -1;
    }
    *role = roles, *P = rc;
    return 0;
}

void layout_attach(const dist_nodes *nd, int F, const int *role, const int *feeder_rank,
                   int *attach)
{
    int *turn = pst_calloc((size_t)nd->n, sizeof *turn); /* workers attached per node */
    int rr = 0;                                          /* workers on nodes without a feeder */
    for (int r = 0; r < nd->size; r++) {
        attach[r] = -1;
        if (role[r] != ROLE_WORKER) continue;
        const int k = nd->of_rank[r];
        int here = 0; /* the feeders on node k */
        for (int f = 0; f < F; f++) here += nd->of_rank[feeder_rank[f]] == k;
        if (here == 0) {
            attach[r] = rr++ % F;
            continue;
        }
        for (int f = 0, i = turn[k]++ % here; f < F; f++)
            if (nd->of_rank[feeder_rank[f]] == k && i-- == 0) {
                attach[r] = f;
                break;
            }
    }
    free(turn);
}

int layout_place_feeders(int F, int *role, int **feeder_rank, int **attach, pst_err *e)
{
    *feeder_rank = NULL, *attach = NULL;
    dist_nodes nd;
    if (dist_nodes_find(&nd, e) < 0) return -1;
    int *ranks = pst_malloc(sizeof *ranks * (size_t)F);
    const int rc = layout_feeders(&nd, F, role, ranks, e);
    if (rc < 0) {
        dist_nodes_free(&nd);
        free(ranks);
        return -1;
    }
    *attach = pst_malloc(sizeof **attach * (size_t)nd.size);
    layout_attach(&nd, F, role, ranks, *attach);
    dist_nodes_free(&nd);
    *feeder_rank = ranks;
    return 0;
}
