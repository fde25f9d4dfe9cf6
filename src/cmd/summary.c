/* summary.c - the --summary-json object of a training run (docs/design.md §6). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/blas.h"
#include "pstrain/placement.h"
#include "pstrain/train.h"
#include "commands.h"

static void jnum(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.8g", v);
    else
        fputs("null", f);
}

/* An evaluation's fields: PREFIX_accuracy, _top5_accuracy, _loss, _examples. */
static void write_eval(FILE *f, const char *prefix, double acc, double top5, double loss,
                       int64_t examples)
{
    fprintf(f, ",\n  \"%s_accuracy\": ", prefix);
    jnum(f, acc);
    fprintf(f, ",\n  \"%s_top5_accuracy\": ", prefix);
    jnum(f, top5);
    fprintf(f, ",\n  \"%s_loss\": ", prefix);
    jnum(f, loss);
    fprintf(f, ",\n  \"%s_examples\": %lld", prefix, (long long)examples);
}

/* The data section: each epoch's example accounting and each feeder's
 * share of the input work. */
static void write_data(FILE *f, const train_result *r)
{
    /* epochs 1-based, as in the progress lines and --metrics records */
    fprintf(f, ",\n  \"data\": {\"epochs\": [");
    for (int i = 0; i < r->nepochs_stats; i++) {
        const epoch_stats *s = &r->epoch_stats[i];
        fprintf(f,
                "%s\n    {\"epoch\": %d, \"examples\": %lld, \"unique\": %lld, "
                "\"duplicates\": %lld, \"missing\": %lld, \"per_worker\": [",
                i ? "," : "", s->epoch + 1, (long long)s->examples, (long long)s->unique,
                (long long)s->duplicates, (long long)s->missing);
        for (int w = 0; w < s->nworkers; w++)
            fprintf(f, "%s%lld", w ? ", " : "", (long long)s->per_worker[w]);
        fprintf(f, "]}");
    }
    fprintf(f, "%s]", r->nepochs_stats ? "\n  " : "");
    /* distributed: each feeder's share of the input work */
    if (r->nfeeder_stats) fprintf(f, ", \"feeders\": [");
    for (int i = 0; i < r->nfeeder_stats; i++) {
        const feeder_stats *s = &r->fstats[i];
        fprintf(f, "%s{\"rank\": %d, \"batches\": %lld, \"prepared\": %lld, \"source_wait\": %.4f}",
                i ? ", " : "", s->rank, (long long)s->batches, (long long)s->prepared,
                s->source_wait);
    }
    fprintf(f, "%s},\n", r->nfeeder_stats ? "]" : "");
}

/* Async: "staleness": {"max_staleness": S or null, "histogram": [counts of
 * 0 .. max (the last bin also counts larger ones)], "max": M}. */
static void write_staleness(FILE *f, const train_result *r)
{
    fprintf(f, ",\n  \"staleness\": {\"max_staleness\": ");
    if (r->staleness_bound != TRAIN_STALE_NONE)
        fprintf(f, "%lld", (long long)r->staleness_bound);
    else
        fprintf(f, "null");
    fprintf(f, ", \"histogram\": [");
    const int64_t last = PST_MIN(PST_MAX(r->staleness_max, 0), TRAIN_STALE_BINS - 1);
    for (int64_t i = 0; i <= last; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)r->staleness_hist[i]);
    fprintf(f, "], \"max\": %lld}", (long long)r->staleness_max);
}

int train_write_summary(const char *path, const train_cfg *cfg, const train_result *r, pst_err *e)
{
    /* Written under a temporary name and renamed: readers never see half a
     * file (a device such as /dev/stdout is written in place). */
    char tmp[4200];
    int renamed;
    FILE *f = pst_out_fopen(path, "w", tmp, sizeof tmp, &renamed);
    if (!f) return pst_fail(e, "%s: cannot create summary: %s", path, strerror(errno));
    fprintf(f, "{\n  \"model\": ");
    pst_json_str(f, cfg->model);
    fprintf(f, ",\n  \"mode\": \"%s\",\n", cfg->mode == TRAIN_ASYNC ? "async" : "sync");
    fprintf(f, "  \"optimizer\": \"%s\",\n", opt_name(cfg->opt.kind));
    fprintf(f, "  \"ranks\": %d,\n  \"ps\": %d,\n  \"workers\": %d,\n", r->ranks, r->ps,
            r->workers);
    if (r->ps) fprintf(f, "  \"feeders\": %d,\n", PST_MAX(cfg->feeders, 1)); /* --feeders */
    if (cfg->ps_per_node && r->ps) /* the colocated layout: P = N x nodes */
        fprintf(f, "  \"ps_per_node\": %d,\n  \"nodes\": %d,\n", cfg->ps_per_node,
                r->ps / cfg->ps_per_node);
    fprintf(f, "  \"batch\": %d,\n  \"seed\": %llu,\n", cfg->batch, (unsigned long long)cfg->seed);
    fprintf(f, "  \"steps\": %lld,\n  \"epochs\": %d,\n  \"examples\": %lld,\n",
            (long long)r->steps, r->epochs, (long long)r->examples);
    fprintf(f, "  \"images_per_sec\": ");
    jnum(f, r->images_per_sec);
    fprintf(f, ",\n  \"train_seconds\": ");
    jnum(f, r->train_seconds);
    fprintf(f, ",\n  \"final_loss\": ");
    jnum(f, r->final_loss);
    if (r->has_eval) {
        fprintf(f, ",\n  \"eval_split\": ");
        pst_json_str(f, r->eval_split);
        write_eval(f, "eval", r->eval_accuracy, r->eval_top5_accuracy, r->eval_loss,
                   r->eval_examples);
    }
    if (r->has_test)
        write_eval(f, "test", r->test_accuracy, r->test_top5_accuracy, r->test_loss,
                   r->test_examples);
    fprintf(f, ",\n  \"dropped_stale\": %lld", (long long)r->dropped_stale);
    if (r->has_staleness) write_staleness(f, r);
    write_data(f, r);
    fprintf(f, "  \"placement\": {\"strategy\": \"%s\", \"per_ps_bytes\": [",
            place_name(cfg->placement));
    for (int i = 0; i < r->nps; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)r->per_ps_bytes[i]);
    fprintf(f, "], \"imbalance\": ");
    jnum(f, r->imbalance);
    fprintf(f, "},\n");
    /* distributed: one worker step's data bytes (--comm-dtype) */
    if (r->nps > 0)
        fprintf(f,
                "  \"comm\": {\"dtype\": \"%s\", \"pull_bytes_per_step\": %lld, "
                "\"push_bytes_per_step\": %lld},\n",
                r->comm_bf16 ? "bf16" : "fp32", (long long)r->pull_bytes_per_step,
                (long long)r->push_bytes_per_step);
    fprintf(f, "  \"timing\": {\"workers\": [");
    for (int i = 0; i < r->nworker_timing && r->wtiming; i++) {
        const worker_timing *w = &r->wtiming[i];
        fprintf(f,
                "%s{\"wait_data\": %.4f, \"pull\": %.4f, \"compute\": %.4f, \"push\": %.4f, "
                "\"wait_version\": %.4f}",
                i ? ", " : "", w->wait_data, w->pull, w->compute, w->push, w->wait_version);
    }
    fprintf(f, "], \"ps\": [");
    for (int i = 0; i < r->nps && r->pstiming; i++)
        fprintf(f, "%s{\"apply\": %.4f, \"idle\": %.4f, \"cpu\": %.4f}", i ? ", " : "",
                r->pstiming[i].apply, r->pstiming[i].idle, r->pstiming[i].cpu);
    fprintf(f, "], \"root_cpu\": %.4f},\n  \"blis_arch\": ", r->root_cpu);
    pst_json_str(f, nn_blis_arch());
    fprintf(f, "\n}\n");
    if (fflush(f) != 0 || ferror(f)) {
        int err = errno;
        fclose(f);
        if (renamed) remove(tmp);
        return pst_fail(e, "%s: write failed: %s", path, strerror(err));
    }
    if (fclose(f) != 0) {
        int err = errno;
        if (renamed) remove(tmp);
        return pst_fail(e, "%s: write failed: %s", path, strerror(err));
    }
    if (renamed && rename(tmp, path) != 0) {
        int err = errno;
        remove(tmp);
        return pst_fail(e, "%s: cannot rename summary into place: %s", path, strerror(err));
    }
    return 0;
}
