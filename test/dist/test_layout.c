/* test_layout.c - the role layouts of src/cluster/layout.c on node shapes
 * given by hand (no MPI): the classic layout, the colocated one
 * (--ps-per-node), and the feeders placed by node (--feeders): feeder f on
 * node f mod nodes, the first worker rank there; one node gives the ranks
 * after the PS; the refusals name the node or say that no worker is left;
 * and the workers' feeders (lockstep sync): the one on their node, in turn
 * over several there, in turn over all for a node without one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "src/cluster/layout.h"

enum { MAXR = 32 };

/* nodes from one node id per rank ("0,0,1,1"), numbered in the order of
 * their first rank as dist_nodes_find numbers them, named "node<id>" */
typedef struct shape {
    dist_nodes nd;
    int of_rank[MAXR];
    char names[MAXR][MPI_MAX_PROCESSOR_NAME];
} shape;

static void shape_init(shape *s, const int *ids, int size)
{
    memset(s, 0, sizeof *s);
    int first_id[MAXR];
    for (int r = 0; r < size; r++) {
        int k = 0;
        while (k < s->nd.n && first_id[k] != ids[r]) k++;
        if (k == s->nd.n) {
            first_id[k] = ids[r];
            snprintf(s->names[k], sizeof s->names[k], "node%d", ids[r]);
            s->nd.n++;
        }
        s->of_rank[r] = k;
    }
    s->nd.size = size;
    s->nd.of_rank = s->of_rank;
    s->nd.names = &s->names[0][0];
}

/* "r0 p p f w ..." for a role array: r root, p PS, w worker, f feeder */
static void roles_text(const int *role, int size, char *out)
{
    static const char letter[] = {
        [ROLE_ROOT] = 'r', [ROLE_PS] = 'p', [ROLE_WORKER] = 'w', [ROLE_FEEDER] = 'f'};
    for (int r = 0; r < size; r++) out[r] = letter[role[r]];
    out[size] = 0;
}

/* The classic layout with P PS, then F feeders on the node shape ids:
 * expects the roles `want` and the feeder ranks want_f (F entries). */
static void check_classic(const char *what, const int *ids, int size, int P, int F,
                          const char *want, const int *want_f)
{
    shape s;
    shape_init(&s, ids, size);
    int role[MAXR], fr[MAXR];
    char got[MAXR + 1];
    pst_err e = {{0}};
    layout_classic(size, P, role);
    const int rc = layout_feeders(&s.nd, F, role, fr, &e);
    CHECK(rc == 0, "%s: failed: %s", what, e.msg);
    if (rc) return;
    roles_text(role, size, got);
    CHECK(strcmp(got, want) == 0, "%s: roles %s, expected %s", what, got, want);
    for (int f = 0; f < F; f++)
        CHECK(fr[f] == want_f[f], "%s: feeder %d is rank %d, expected %d", what, f, fr[f],
              want_f[f]);
}

/* One node: the feeders are the F-1 ranks after the PS, for any P and F. */
static void one_node(void)
{
    int ids[MAXR] = {0};
    for (int P = 1; P <= 3; P++)
        for (int F = 1; F <= 4; F++) {
            const int size = 1 + P + (F - 1) + 2;
            char want[MAXR + 1], what[64];
            int want_f[MAXR];
            for (int r = 0; r < size; r++)
                want[r] = r == 0 ? 'r' : r <= P ? 'p' : r <= P + F - 1 ? 'f' : 'w';
            want[size] = 0;
            want_f[0] = 0;
            for (int f = 1; f < F; f++) want_f[f] = P + f;
            snprintf(what, sizeof what, "one node, P %d, F %d", P, F);
            check_classic(what, ids, size, P, F, want, want_f);
        }
}

static void classic_nodes(void)
{
    /* two nodes in blocks: feeder 1 on node 1, feeder 2 on node 0, feeder
     * 3 on node 1 */
    check_classic("2 nodes x 4, P 1, F 4", (int[]){0, 0, 0, 0, 1, 1, 1, 1}, 8, 1, 4, "rpfwffww",
                  (int[]){0, 4, 2, 5});
    /* one per node: F = nodes */
    check_classic("3 nodes x 3, P 1, F 3", (int[]){0, 0, 0, 1, 1, 1, 2, 2, 2}, 9, 1, 3, "rpwfwwfww",
                  (int[]){0, 3, 6});
    /* the classic PS may fill node 1's first ranks: its first worker rank */
    check_classic("2 nodes x 3, P 3, F 2", (int[]){0, 0, 1, 1, 1, 0}, 6, 3, 2, "rpppfw",
                  (int[]){0, 4});
    /* interleaved ranks: node 1 is the node of rank 1 */
    check_classic("interleaved, P 1, F 3", (int[]){0, 1, 0, 1, 0, 1, 0}, 7, 1, 3, "rpffwww",
                  (int[]){0, 3, 2});
    /* more nodes than feeders: nodes 1..F-1 get one, the last none */
    check_classic("4 nodes, F 3", (int[]){0, 0, 1, 1, 2, 2, 3, 3}, 8, 1, 3, "rpfwfwww",
                  (int[]){0, 2, 4});
}

/* --ps-per-node N then feeders: one per node beside the node's PS. */
static void colocated_nodes(void)
{
    shape s;
    int role[MAXR], fr[MAXR];
    char got[MAXR + 1];
    pst_err e = {{0}};
    shape_init(&s, (int[]){0, 0, 0, 1, 1, 1, 2, 2, 2}, 9);
    CHECK(layout_ps_per_node(&s.nd, 1, role, &e) == 3, "3 nodes x 3, N 1: %s", e.msg);
    CHECK(layout_feeders(&s.nd, 3, role, fr, &e) == 0, "3 nodes x 3, N 1, F 3: %s", e.msg);
    roles_text(role, 9, got);
    CHECK(strcmp(got, "rpwpfwpfw") == 0, "N 1, F 3: roles %s", got);
    CHECK(fr[0] == 0 && fr[1] == 4 && fr[2] == 7, "N 1, F 3: feeders %d %d %d", fr[0], fr[1],
          fr[2]);
    /* interleaved, N 2, F 2 */
    shape_init(&s, (int[]){0, 1, 0, 1, 0, 1, 0, 1}, 8);
    CHECK(layout_ps_per_node(&s.nd, 2, role, &e) == 4, "interleaved, N 2: %s", e.msg);
    CHECK(layout_feeders(&s.nd, 2, role, fr, &e) == 0, "interleaved, N 2, F 2: %s", e.msg);
    roles_text(role, 8, got);
    CHECK(strcmp(got, "rppppfww") == 0, "interleaved N 2, F 2: roles %s", got);
    CHECK(fr[1] == 5, "interleaved N 2, F 2: feeder 1 is rank %d", fr[1]);
}

/* refuse SHAPE: layout_feeders fails with a message containing want */
static void refuse(const char *what, const int *ids, int size, int P, int F, const char *want)
{
    shape s;
    shape_init(&s, ids, size);
    int role[MAXR], fr[MAXR];
    pst_err e = {{0}};
    layout_classic(size, P, role);
    CHECK(layout_feeders(&s.nd, F, role, fr, &e) < 0, "%s: accepted", what);
    CHECK(strstr(e.msg, want) != NULL, "%s: message '%s', expected '%s'", what, e.msg, want);
    CHECK(strchr(e.msg, '\n') == NULL, "%s: more than one line: %s", what, e.msg);
}

static void refusals(void)
{
    refuse("one node, no worker left", (int[]){0, 0, 0, 0}, 4, 1, 3,
           "--feeders 3 with 1 PS and 4 MPI ranks leaves no worker: 5 ranks are needed");
    /* node 1 holds only the PS: no rank for feeder 1 (workers elsewhere) */
    refuse("node 1 full", (int[]){0, 1, 0, 0, 0}, 5, 1, 2,
           "--feeders 2: node 2 of 2 (host node1) has 1 rank, but needs at least 2 (1 PS + 1 "
           "feeder; one per node round-robin from the root's next node)");
    refuse("two nodes, no worker left", (int[]){0, 0, 0, 1, 1}, 5, 1, 4,
           "--feeders 4 with 1 PS and 5 MPI ranks leaves no worker");
    /* F = 5 on 2 nodes: node 0 gets feeders 2 and 4 beside the root and PS */
    refuse("node 0 short", (int[]){0, 0, 0, 1, 1, 1, 1, 1}, 8, 1, 5,
           "--feeders 5: node 1 of 2 (host node0) has 3 ranks, but needs at least 4 (the root "
           "+ 1 PS + 2 feeders");
}

/* layout_attach on the classic layout with P PS and F feeders: want[r]
 * the feeder of rank r (-1: not a worker). */
static void check_attach(const char *what, const int *ids, int size, int P, int F, const int *want)
{
    shape s;
    shape_init(&s, ids, size);
    int role[MAXR], fr[MAXR], at[MAXR];
    pst_err e = {{0}};
    layout_classic(size, P, role);
    CHECK(layout_feeders(&s.nd, F, role, fr, &e) == 0, "%s: %s", what, e.msg);
    layout_attach(&s.nd, F, role, fr, at);
    for (int r = 0; r < size; r++)
        CHECK(at[r] == want[r], "%s: rank %d draws from feeder %d, expected %d", what, r, at[r],
              want[r]);
}

static void attachments(void)
{
    /* one node, F 3: the workers over feeders 0, 1, 2 in turn */
    check_attach("one node", (int[]){0, 0, 0, 0, 0, 0, 0, 0}, 8, 1, 3,
                 (int[]){-1, -1, -1, -1, 0, 1, 2, 0});
    /* node 0: the root and feeder 2, node 1: feeder 1 */
    check_attach("classic 2 nodes", (int[]){0, 0, 0, 0, 1, 1, 1}, 7, 1, 3,
                 (int[]){-1, -1, -1, 0, -1, 1, 1});
    /* node 2 has no feeder: its workers to feeders 0, 1, 0 */
    check_attach("feederless node", (int[]){0, 0, 0, 1, 1, 2, 2, 2}, 8, 1, 2,
                 (int[]){-1, -1, 0, -1, 1, 0, 1, 0});
    /* no worker on the root's node */
    check_attach("root alone", (int[]){0, 0, 1, 1, 1}, 5, 1, 2, (int[]){-1, -1, -1, 1, 1});
}

int main(void)
{
    one_node();
    classic_nodes();
    colocated_nodes();
    refusals();
    attachments();
    return check_exit();
}
