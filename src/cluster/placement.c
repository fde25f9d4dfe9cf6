/*
 * placement.c - variable placement on parameter servers: round-robin,
 * greedy (largest first to the least-loaded PS) and axis-0 partitioning.
 *
 * The plan is computed in two steps: split variables into pieces and choose
 * a PS for each piece (strategy-specific), then lay each PS's pieces out in
 * slab order to get their offsets within the shard (common).
 */
#include "pstrain/placement.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void place_plan_free(place_plan *p)
{
    if (!p) return;
    free(p->vars);
    free(p->ranges);
    free(p->ps_first);
    free(p->ps_nranges);
    free(p->ps_floats);
    free(p->ps_bytes);
    free(p);
}

/* Largest first; equal sizes in model order (then slice order), so the
 * greedy result depends only on the list of sizes. */
static int cmp_piece_size(const void *a, const void *b)
{
    const place_range *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    if (x->var != y->var) return x->var < y->var ? -1 : 1;
    return x->slice - y->slice;
}

static int cmp_piece_layout(const void *a, const void *b)
{
    const place_range *x = a, *y = b;
    if (x->ps != y->ps) return x->ps - y->ps;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return 0;
}

/* Least-loaded PS (ties: lowest index) that does not yet hold a slice of
 * variable `var` when `distinct` (holder[ps] == var marks one). */
static int least_loaded(const int64_t *load, int nps, const int *holder, int var, bool distinct)
{
    int best = -1;
    for (int s = 0; s < nps; s++) {
        if (distinct && holder[s] == var) continue;
        if (best < 0 || load[s] < load[best]) best = s;
    }
    return best;
}

/* How many axis-0 slices variable v is cut into: 1 unless --placement
 * partition and v is larger than partition_bytes; never more than the PS
 * count or v's rows. */
static int slice_count(const nn_var *v, place_kind kind, int64_t partition_bytes, int nps)
{
    int n = 1;
    int64_t bytes = (int64_t)v->size * (int64_t)sizeof(float);
    if (kind == PLACE_PARTITION && bytes > partition_bytes && v->ndim >= 1) {
        int64_t want = (bytes + partition_bytes - 1) / partition_bytes;
        n = (int)PST_MIN(PST_MIN(want, (int64_t)nps), (int64_t)v->shape[0]);
        if (n < 1) n = 1;
    }
    return n;
}

/* Step 1: cuts every variable into its slices (p->ranges, p->nranges), in
 * model order then slice order; the PS is chosen later. */
static void cut_pieces(place_plan *p, const nn_var *vars, int64_t partition_bytes)
{
    int npieces = 0;
    for (int i = 0; i < p->nvars; i++)
        npieces += slice_count(&vars[i], p->kind, partition_bytes, p->nps);
    p->ranges = pst_calloc((size_t)(npieces ? npieces : 1), sizeof *p->ranges);
    p->nranges = npieces;
    int k = 0;
    for (int i = 0; i < p->nvars; i++) {
        const nn_var *v = &vars[i];
        int rows = v->ndim >= 1 ? v->shape[0] : 1;
        size_t row_floats = rows > 0 ? v->size / (size_t)rows : v->size;
        int n = slice_count(v, p->kind, partition_bytes, p->nps);
        int row = 0;
        for (int s = 0; s < n; s++) {
            /* the first rows % n slices get one extra row */
            int r = rows / n + (s < rows % n);
            place_range *q = &p->ranges[k++];
            q->var = i;
            q->slice = s;
            q->nslices = n;
            q->trainable = v->trainable;
            if (n == 1) {
                q->row0 = 0, q->rows = rows;
                q->offset = v->offset, q->count = v->size;
            } else {
                q->row0 = row, q->rows = r;
                q->offset = v->offset + (size_t)row * row_floats;
                q->count = (size_t)r * row_floats;
            }
            row += r;
        }
    }
}

/* Step 2 for greedy and partition: pieces largest first, each to the
 * least-loaded PS (slices of one variable on distinct PS while there are
 * enough); the choice is written back into p->ranges, still in model order. */
static void assign_greedy(place_plan *p)
{
    const int npieces = p->nranges, nps = p->nps;
    place_range *sorted = pst_malloc(sizeof *sorted * (size_t)(npieces ? npieces : 1));
    if (npieces) memcpy(sorted, p->ranges, sizeof *sorted * (size_t)npieces);
    qsort(sorted, (size_t)npieces, sizeof *sorted, cmp_piece_size);
    int64_t *load = pst_calloc((size_t)nps, sizeof *load);
    int *holder = pst_malloc(sizeof *holder * (size_t)nps);
    for (int s = 0; s < nps; s++) holder[s] = -1;
    for (int r = 0; r < npieces; r++) {
        place_range *q = &sorted[r];
        int ps = least_loaded(load, nps, holder, q->var, q->nslices > 1);
        if (ps < 0) ps = least_loaded(load, nps, holder, q->var, false);
        q->ps = ps;
        load[ps] += (int64_t)(q->count * sizeof(float));
        if (q->nslices > 1) holder[ps] = q->var;
    }
    /* back into model order (pieces were created in model order) */
    for (int r = 0; r < npieces; r++)
        for (int t = 0; t < npieces; t++)
            if (p->ranges[t].var == sorted[r].var && p->ranges[t].slice == sorted[r].slice) {
                p->ranges[t].ps = sorted[r].ps;
                break;
            }
    free(sorted);
    free(load);
    free(holder);
}

/* Step 3: each PS's pieces in slab order, back to back (ps_first,
 * ps_nranges, ps_floats, ps_offset), then the byte totals and imbalance. */
static void lay_out(place_plan *p)
{
    const int npieces = p->nranges, nps = p->nps;
    qsort(p->ranges, (size_t)npieces, sizeof *p->ranges, cmp_piece_layout);
    p->ps_first = pst_calloc((size_t)nps, sizeof *p->ps_first);
    p->ps_nranges = pst_calloc((size_t)nps, sizeof *p->ps_nranges);
    p->ps_floats = pst_calloc((size_t)nps, sizeof *p->ps_floats);
    for (int s = 0; s < nps; s++) p->ps_first[s] = npieces;
    for (int r = 0; r < npieces; r++) {
        place_range *q = &p->ranges[r];
        if (p->ps_nranges[q->ps] == 0) p->ps_first[q->ps] = r;
        p->ps_nranges[q->ps]++;
        q->ps_offset = p->ps_floats[q->ps];
        p->ps_floats[q->ps] += q->count;
    }
    int64_t maxb = 0;
    for (int s = 0; s < nps; s++) {
        p->ps_bytes[s] = (int64_t)(p->ps_floats[s] * sizeof(float));
        p->total_bytes += p->ps_bytes[s];
        maxb = PST_MAX(maxb, p->ps_bytes[s]);
    }
    p->imbalance = p->total_bytes > 0 ? (double)maxb / ((double)p->total_bytes / nps) : 1.0;
}

int place_plan_new(place_plan **out, const nn_var *vars, int nvars, int nps, place_kind kind,
                   int64_t partition_bytes, pst_err *e)
{
    *out = NULL;
    if (nps < 1) return pst_fail(e, "placement: --ps must be at least 1 (got %d)", nps);
    if (nvars < 0) return pst_fail(e, "placement: negative variable count");
    if (kind == PLACE_PARTITION && partition_bytes <= 0)
        return pst_fail(e, "placement: --partition-bytes must be positive (got %lld)",
                        (long long)partition_bytes);
    if ((int)kind < 0 || kind > PLACE_PARTITION)
        return pst_fail(e, "placement: unknown strategy %d", (int)kind);

    place_plan *p = pst_calloc(1, sizeof *p);
    p->kind = kind;
    p->nps = nps;
    p->nvars = nvars;
    p->vars = pst_malloc(sizeof *p->vars * (size_t)(nvars ? nvars : 1));
    if (nvars) memcpy(p->vars, vars, sizeof *vars * (size_t)nvars);

    cut_pieces(p, vars, partition_bytes);
    p->ps_bytes = pst_calloc((size_t)nps, sizeof *p->ps_bytes);
    if (kind == PLACE_ROUND_ROBIN)
        for (int r = 0; r < p->nranges; r++) p->ranges[r].ps = p->ranges[r].var % nps;
    else
        assign_greedy(p);
    lay_out(p);
    *out = p;
    return 0;
}

static void format_shape(const nn_var *v, const place_range *q, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = 0;
    for (int d = 0; d < v->ndim && used < n; d++) {
        int dim = (d == 0 && q->nslices > 1) ? q->rows : v->shape[d];
        used += (size_t)snprintf(buf + used, n - used, "%s%d", d ? "x" : "", dim);
    }
    if (v->ndim == 0) snprintf(buf, n, "scalar");
}

void place_plan_summary(const place_plan *p, FILE *out)
{
    int64_t lo = INT64_MAX, hi = 0;
    for (int s = 0; s < p->nps; s++)
        lo = PST_MIN(lo, p->ps_bytes[s]), hi = PST_MAX(hi, p->ps_bytes[s]);
    fprintf(out,
            "placement %s on %d PS: %d variables, %lld bytes, %lld-%lld per PS, imbalance %.3f "
            "(the table: --verbose or pstrain plan)\n",
            place_name(p->kind), p->nps, p->nvars, (long long)p->total_bytes, (long long)lo,
            (long long)hi, p->imbalance);
}

void place_plan_print(const place_plan *p, FILE *out)
{
    fprintf(out, "placement %s on %d PS: %d variables, %d ranges, %lld bytes\n",
            place_name(p->kind), p->nps, p->nvars, p->nranges, (long long)p->total_bytes);
    fprintf(out, "%-40s %-18s %12s %4s %10s\n", "variable", "shape", "bytes", "PS", "offset");
    /* in model order: walk variables, then their slices */
    for (int i = 0; i < p->nvars; i++) {
        for (int r = 0; r < p->nranges; r++) {
            const place_range *q = &p->ranges[r];
            if (q->var != i) continue;
            char name[NN_VAR_NAME_LEN + 32], shape[64];
            if (q->nslices > 1)
                snprintf(name, sizeof name, "%s[%d:%d]", p->vars[i].name, q->row0,
                         q->row0 + q->rows);
            else
                snprintf(name, sizeof name, "%s%s", p->vars[i].name,
                         p->vars[i].trainable ? "" : " (state)");
            format_shape(&p->vars[i], q, shape, sizeof shape);
            fprintf(out, "%-40s %-18s %12lld %4d %10zu\n", name, shape,
                    (long long)(q->count * sizeof(float)), q->ps + 1, q->ps_offset);
        }
    }
    for (int s = 0; s < p->nps; s++)
        fprintf(out, "PS %d (rank %d): %d ranges, %lld bytes\n", s + 1, s + 1, p->ps_nranges[s],
                (long long)p->ps_bytes[s]);
    fprintf(out, "imbalance (max/mean bytes): %.3f\n", p->imbalance);
}
