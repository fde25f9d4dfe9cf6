/* test_placement.c - placement strategies on synthetic variable lists (and on
 * the built-in models when they exist): every float placed exactly once,
 * shard layout contiguous, the documented PS choices, imbalance. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pstrain/placement.h"

static nn_var mkvar(const char *name, int d0, int d1, size_t *off, int trainable)
{
    nn_var v;
    memset(&v, 0, sizeof v);
    snprintf(v.name, sizeof v.name, "%s", name);
    v.ndim = d1 ? 2 : 1;
    v.shape[0] = d0;
    v.shape[1] = d1;
    v.size = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    v.offset = *off;
    v.trainable = trainable;
    *off += v.size;
    return v;
}

/* Every slab float is covered by exactly one range; shards are dense. */
static void check_cover(const place_plan *p, size_t total)
{
    unsigned char *hit = calloc(total ? total : 1, 1);
    int64_t bytes = 0;
    for (int r = 0; r < p->nranges; r++) {
        const place_range *q = &p->ranges[r];
        CHECK(q->ps >= 0 && q->ps < p->nps, "range %d ps %d", r, q->ps);
        CHECK(q->offset + q->count <= total, "range %d out of slab", r);
        for (size_t j = 0; j < q->count && q->offset + j < total; j++) hit[q->offset + j]++;
        bytes += (int64_t)(q->count * sizeof(float));
    }
    size_t bad = 0;
    for (size_t j = 0; j < total; j++) bad += hit[j] != 1;
    CHECK(bad == 0, "%zu floats not covered exactly once", bad);
    CHECK(bytes == p->total_bytes, "total bytes %lld vs %lld", (long long)bytes,
          (long long)p->total_bytes);
    for (int s = 0; s < p->nps; s++) {
        size_t at = 0;
        for (int r = p->ps_first[s]; r < p->ps_first[s] + p->ps_nranges[s]; r++) {
            CHECK(p->ranges[r].ps == s, "ranges of PS %d not consecutive", s);
            CHECK(p->ranges[r].ps_offset == at, "PS %d range %d at %zu, expected %zu", s, r,
                  p->ranges[r].ps_offset, at);
            at += p->ranges[r].count;
        }
        CHECK(at == p->ps_floats[s], "PS %d floats %zu vs %zu", s, at, p->ps_floats[s]);
    }
    free(hit);
}

static int ps_of(const place_plan *p, int var)
{
    for (int r = 0; r < p->nranges; r++)
        if (p->ranges[r].var == var) return p->ranges[r].ps;
    return -1;
}

/* The same ranges on the same PS at the same shard offsets. */
static bool same_plan(const place_plan *a, const place_plan *b)
{
    if (a->nranges != b->nranges) return false;
    for (int r = 0; r < a->nranges; r++) {
        const place_range *x = &a->ranges[r], *y = &b->ranges[r];
        if (x->ps != y->ps || x->var != y->var || x->nslices != y->nslices ||
            x->offset != y->offset || x->count != y->count || x->ps_offset != y->ps_offset)
            return false;
    }
    return true;
}

int main(void)
{
    pst_err e;
    size_t off = 0;
    /* sizes (floats): 1000, 10, 50000, 20, 3000, 3000 (state) */
    nn_var v[6];
    v[0] = mkvar("a/kernel", 100, 10, &off, 1);
    v[1] = mkvar("a/bias", 10, 0, &off, 1);
    v[2] = mkvar("b/kernel", 500, 100, &off, 1);
    v[3] = mkvar("b/bias", 20, 0, &off, 1);
    v[4] = mkvar("c/kernel", 30, 100, &off, 1);
    v[5] = mkvar("c/moving_mean", 3000, 0, &off, 0);
    const size_t total = off;

    place_kind k;
    CHECK(place_parse("greedy", &k) == 0 && k == PLACE_GREEDY, "parse greedy");
    CHECK(place_parse("round-robin", &k) == 0 && k == PLACE_ROUND_ROBIN, "parse rr");
    CHECK(place_parse("partition", &k) == 0 && k == PLACE_PARTITION, "parse partition");
    CHECK(place_parse("random", &k) < 0, "unknown strategy refused");
    place_plan *p = NULL;
    CHECK(place_plan_new(&p, v, 6, 0, PLACE_GREEDY, 0, &e) < 0, "0 PS refused");
    CHECK(place_plan_new(&p, v, 6, 2, PLACE_PARTITION, 0, &e) < 0, "partition_bytes 0 refused");

    for (int nps = 1; nps <= 4; nps++) {
        for (int kind = 0; kind < 3; kind++) {
            CHECK(place_plan_new(&p, v, 6, nps, (place_kind)kind, 4096, &e) == 0, "%s", e.msg);
            if (!p) continue;
            check_cover(p, total);
            if (nps == 1) CHECK(p->imbalance == 1.0, "1 PS imbalance %f", p->imbalance);
            place_plan_free(p);
        }
    }

    /* round-robin: variable i -> PS i mod P */
    CHECK(place_plan_new(&p, v, 6, 4, PLACE_ROUND_ROBIN, 0, &e) == 0, "%s", e.msg);
    for (int i = 0; i < 6; i++) CHECK(ps_of(p, i) == i % 4, "rr var %d on %d", i, ps_of(p, i));
    place_plan_free(p);

    /* greedy, 2 PS: 50000 -> 0; 3000(c/kernel, var 4) -> 1; 3000(var 5) -> 1;
     * 1000 -> 1; 20 -> 1; 10 -> 1 (PS 1 has 7030 < 50000) */
    CHECK(place_plan_new(&p, v, 6, 2, PLACE_GREEDY, 0, &e) == 0, "%s", e.msg);
    CHECK(ps_of(p, 2) == 0 && ps_of(p, 4) == 1 && ps_of(p, 5) == 1 && ps_of(p, 0) == 1,
          "greedy choices");
    CHECK(p->ps_bytes[0] == 200000 && p->ps_bytes[1] == 4 * 7030, "greedy bytes %lld %lld",
          (long long)p->ps_bytes[0], (long long)p->ps_bytes[1]);
    CHECK_CLOSE(p->imbalance, 200000.0 / ((200000.0 + 28120.0) / 2), 1e-12, 0, "imbalance %f",
                p->imbalance);
    place_plan_free(p);

    /* greedy is order-independent: the same sizes in reverse model order give
     * the same per-PS bytes */
    {
        nn_var rv[6];
        size_t roff = 0;
        for (int i = 0; i < 6; i++) {
            rv[i] = v[5 - i];
            rv[i].offset = roff;
            roff += rv[i].size;
        }
        place_plan *a = NULL, *b = NULL;
        CHECK(place_plan_new(&a, v, 6, 3, PLACE_GREEDY, 0, &e) == 0, "%s", e.msg);
        CHECK(place_plan_new(&b, rv, 6, 3, PLACE_GREEDY, 0, &e) == 0, "%s", e.msg);
        for (int s = 0; s < 3; s++)
            CHECK(a->ps_bytes[s] == b->ps_bytes[s], "PS %d: %lld vs %lld", s,
                  (long long)a->ps_bytes[s], (long long)b->ps_bytes[s]);
        place_plan_free(a);
        place_plan_free(b);
    }

    /* partition, 3 PS, 64 KiB: b/kernel (200000 B, 500 rows) -> 3 slices of
     * 167,167,166 rows on 3 different PS; everything else whole */
    CHECK(place_plan_new(&p, v, 6, 3, PLACE_PARTITION, 65536, &e) == 0, "%s", e.msg);
    {
        int nsl = 0, seen[3] = {0, 0, 0}, rows = 0;
        for (int r = 0; r < p->nranges; r++) {
            const place_range *q = &p->ranges[r];
            if (q->var == 2) {
                nsl++;
                CHECK(q->nslices == 3, "nslices %d", q->nslices);
                seen[q->ps]++;
                rows += q->rows;
                CHECK(q->rows == (q->slice < 2 ? 167 : 166), "slice %d rows %d", q->slice, q->rows);
                CHECK(q->offset == v[2].offset + (size_t)q->row0 * 100, "slice offset");
            } else {
                CHECK(q->nslices == 1, "var %d split", q->var);
            }
        }
        CHECK(nsl == 3 && seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && rows == 500,
              "partition slices %d", nsl);
        CHECK(p->imbalance < 1.2, "partition imbalance %f", p->imbalance);
        place_plan_print(p, stdout);
    }
    place_plan_free(p);

    /* partition with a large threshold = greedy */
    {
        place_plan *a = NULL, *b = NULL;
        CHECK(place_plan_new(&a, v, 6, 3, PLACE_PARTITION, 1 << 30, &e) == 0, "%s", e.msg);
        CHECK(place_plan_new(&b, v, 6, 3, PLACE_GREEDY, 0, &e) == 0, "%s", e.msg);
        for (int i = 0; i < 6; i++) CHECK(ps_of(a, i) == ps_of(b, i), "var %d", i);
        place_plan_free(a);
        place_plan_free(b);
    }

    /* more PS than variables: empty shards are allowed */
    CHECK(place_plan_new(&p, v, 2, 4, PLACE_ROUND_ROBIN, 0, &e) == 0, "%s", e.msg);
    CHECK(p->ps_nranges[2] == 0 && p->ps_floats[3] == 0, "empty PS");
    place_plan_free(p);
    place_plan_free(NULL);

    /* every built-in model: every strategy covers the slab exactly once; a
     * small partition threshold splits every large variable over distinct PS */
    for (const char *const *name = nn_model_names(); *name; name++) {
        int is_inc = !strcmp(*name, "inception-mini");
        int v3 = !strcmp(*name, "inception-v3"); /* at least 75x75 */
        nn_model_cfg mc = {.name = *name,
                           .height = v3       ? 75
                                     : is_inc ? 32
                                              : 28,
                           .width = v3       ? 75
                                    : is_inc ? 32
                                             : 28,
                           .channels = is_inc ? 3 : 1,
                           .num_classes = 10,
                           .max_batch = 1,
                           .seed = 1};
        nn_model *m = NULL;
        CHECK(nn_model_new(&m, &mc, &e) == 0, "%s: %s", *name, e.msg);
        if (!m) continue;
        int nv = nn_model_nvars(m), nstate = 0;
        nn_var *mv = malloc(sizeof *mv * (size_t)nv);
        for (int i = 0; i < nv; i++) mv[i] = *nn_model_var(m, i), nstate += !mv[i].trainable;
        if (is_inc) CHECK(nstate > 0, "inception-mini: no batch-norm state variables placed");
        /* one PS: every strategy gives the same plan (dist-determinism
         * therefore runs --ps 1 once, not once per strategy) */
        place_plan *one = NULL;
        CHECK(place_plan_new(&one, mv, nv, 1, PLACE_ROUND_ROBIN, 16384, &e) == 0, "%s", e.msg);
        for (int nps = 1; nps <= 4; nps++)
            for (int kind = 0; kind < 3; kind++) {
                place_plan *q = NULL;
                CHECK(place_plan_new(&q, mv, nv, nps, (place_kind)kind, 16384, &e) == 0, "%s",
                      e.msg);
                if (!q) continue;
                check_cover(q, nn_model_size(m));
                CHECK(q->total_bytes == (int64_t)(nn_model_size(m) * sizeof(float)), "%s: bytes",
                      *name);
                if (kind == PLACE_PARTITION)
                    for (int r = 0; r < q->nranges; r++) {
                        const place_range *x = &q->ranges[r];
                        int64_t b = (int64_t)(mv[x->var].size * sizeof(float));
                        int64_t want = PST_MIN(PST_MIN((b + 16383) / 16384, (int64_t)nps),
                                               (int64_t)mv[x->var].shape[0]);
                        CHECK(x->nslices == (b > 16384 ? want : 1), "%s %s: %d slices", *name,
                              mv[x->var].name, x->nslices);
                    }
                if (nps == 1 && one)
                    CHECK(same_plan(q, one), "%s: %s on 1 PS differs from round-robin", *name,
                          place_name((place_kind)kind));
                if (nps == 4 && kind != PLACE_ROUND_ROBIN)
                    printf("%s %s on 4 PS: imbalance %.3f\n", *name, place_name((place_kind)kind),
                           q->imbalance);
                place_plan_free(q);
            }
        place_plan_free(one);
        free(mv);
        nn_model_free(m);
    }
    return check_exit();
}
