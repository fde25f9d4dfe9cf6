/*
 * end.c - the end of a distributed run: the final variables and slots from
 * every PS, the example logs and report records gathered on the root, the
 * per-epoch accounting (exactly once), final_loss, the trace file, the final
 * checkpoint and the evaluation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"
#include "pstrain/run_common.h"
#include "trainer.h"

typedef struct batch_loss {
    int64_t ticket, step;
    float loss;
} batch_loss;

static int cmp_batch_ticket(const void *a, const void *b)
{
    const batch_loss *x = a, *y = b;
    return (x->ticket > y->ticket) - (x->ticket < y->ticket);
}

/* final_loss (train.h): the mean training loss of the last FINAL_LOSS_STEPS
 * steps, summed in ticket order, so that it does not depend on timing. Sync:
 * every batch computed at one of the last 100 versions; async: the last 100
 * batches (a step is a batch). */
static float final_loss(batch_loss *bl, size_t n, bool sync)
{
    if (!n) return NAN;
    qsort(bl, n, sizeof *bl, cmp_batch_ticket);
    int64_t max_step = 0;
    for (size_t i = 0; i < n; i++) max_step = PST_MAX(max_step, bl[i].step);
    /* newest first, as train_single sums its last steps */
    double sum = 0;
    int64_t k = 0;
    for (size_t j = n; j-- > 0;) {
        if (sync ? bl[j].step <= max_step - FINAL_LOSS_STEPS : k >= FINAL_LOSS_STEPS) break;
        sum += bl[j].loss;
        k++;
    }
    return k ? (float)(sum / (double)k) : NAN;
}

/* The number of epochs the logs touch: at least `nep` (the resumed
 * epoch's), else one past the highest epoch of any logged batch. */
static int count_epochs(const int64_t *all, const int *counts, const int *displs,
                        const int *worker_ranks, int W, int nep)
{
    for (int w = 0; w < W; w++) {
        const int64_t *p = all + displs[worker_ranks[w]], *end = p + counts[worker_ranks[w]];
        while (p < end) {
            nep = PST_MAX(nep, (int)p[LOG_EPOCH] + 1);
            p += LOG_HDR + p[LOG_COUNT];
        }
    }
    return nep;
}

/* One line of the example trace: worker w's logged batch at p. */
static void write_trace(FILE *trace, int w, const int64_t *p)
{
    const int64_t count = p[LOG_COUNT];
    fprintf(trace, "{\"worker\":%d,\"step\":%lld,\"ticket\":%lld,\"epoch\":%d,\"ids\":[", w,
            (long long)p[LOG_STEP], (long long)p[LOG_TICKET], (int)p[LOG_EPOCH]);
    for (int64_t i = 0; i < count; i++)
        fprintf(trace, "%s%lld", i ? "," : "", (long long)p[LOG_HDR + i]);
    fputs("]}\n", trace);
}

/* From the per-epoch `seen` counts: unique, duplicate and missing examples
 * of the nep epochs in res->epoch_stats, keeping only epochs that saw
 * examples (the ones before a resumed run's first epoch have none). */
static void close_epochs(train_result *res, int nep, const uint8_t *seen, int64_t per_epoch)
{
    int kept = 0;
    for (int i = 0; i < nep; i++) {
        epoch_stats *es = &res->epoch_stats[i];
        if (es->examples == 0) { /* before a resumed run's first epoch */
            free(es->per_worker);
            continue;
        }
        const uint8_t *s = seen + (size_t)i * (size_t)per_epoch;
        int64_t unique = 0;
        for (int64_t j = 0; j < per_epoch; j++) unique += s[j] != 0;
        es->unique = unique;
        es->duplicates = es->examples - unique;
        es->missing = per_epoch - unique;
        res->epoch_stats[kept++] = *es;
    }
    res->nepochs_stats = kept;
}

/* Per-epoch accounting from the gathered logs (epochs that saw examples
 * only), final_loss, and the trace file. *data_end: the data cursor after
 * this run, first_ticket + the batches the workers took. Workers take
 * tickets with one atomic counter, or with local counters every ticket
 * below the total (lockstep: whole versions; async: moving on to the
 * other feeders' rings), and log every data batch they take, so the taken
 * tickets are [first_ticket, *data_end) (checked); batches the root
 * published but nobody took (backup workers stopping at --steps) are not
 * consumed and come first in a resumed run. */
static int account(const train_cfg *cfg, train_result *res, const int64_t *all, const int *counts,
                   const int *displs, const int *worker_ranks, int W, int64_t per_epoch,
                   const i64vec *prior, int prior_epoch, int64_t first_ticket, int64_t *data_end,
                   pst_err *e)
{
    FILE *trace = NULL;
    if (cfg->trace_path) {
        trace = fopen(cfg->trace_path, "w");
        if (!trace) return pst_fail(e, "%s: cannot write the example trace", cfg->trace_path);
    }
    int nep = count_epochs(all, counts, displs, worker_ranks, W, prior->n ? prior_epoch + 1 : 0);
    res->nepochs_stats = nep;
    res->epoch_stats = pst_calloc((size_t)(nep ? nep : 1), sizeof *res->epoch_stats);
    uint8_t *seen = pst_calloc((size_t)(nep ? nep : 1) * (size_t)per_epoch, 1);
    for (int i = 0; i < nep; i++) {
        res->epoch_stats[i].epoch = i;
        res->epoch_stats[i].nworkers = W;
        res->epoch_stats[i].per_worker = pst_calloc((size_t)W, sizeof(int64_t));
    }
    int64_t bad_ids = 0;
    size_t nbatches = 0;
    batch_loss *bl = NULL;
    for (int w = 0; w < W; w++)
        for (const int64_t *p = all + displs[worker_ranks[w]], *end = p + counts[worker_ranks[w]];
             p < end; p += LOG_HDR + p[LOG_COUNT])
            nbatches++;
    bl = pst_malloc(sizeof *bl * (nbatches ? nbatches : 1));
    nbatches = 0;
    /* resumed: the batches of the epoch that the interrupted run consumed */
    for (size_t i = 0; i < prior->n; i++) {
        res->epoch_stats[prior_epoch].examples++;
        int64_t id = prior->a[i];
        uint8_t *sp = seen + (size_t)prior_epoch * (size_t)per_epoch;
        if (id < 0 || id >= per_epoch)
            bad_ids++;
        else if (sp[id] < 255)
            sp[id]++;
    }
    for (int w = 0; w < W; w++) {
        const int64_t *p = all + displs[worker_ranks[w]], *end = p + counts[worker_ranks[w]];
        while (p < end) {
            int64_t ticket = p[LOG_TICKET], step = p[LOG_STEP], count = p[LOG_COUNT];
            int ep = (int)p[LOG_EPOCH];
            batch_loss *b = &bl[nbatches++];
            b->ticket = ticket, b->step = step;
            memcpy(&b->loss, &p[LOG_LOSS], sizeof b->loss);
            epoch_stats *es = &res->epoch_stats[ep];
            es->examples += count;
            es->per_worker[w] += count;
            uint8_t *s = seen + (size_t)ep * (size_t)per_epoch;
            for (int64_t i = 0; i < count; i++) {
                int64_t id = p[LOG_HDR + i];
                if (id < 0 || id >= per_epoch)
                    bad_ids++;
                else if (s[id] < 255)
                    s[id]++;
            }
            if (trace) write_trace(trace, w, p);
            p += LOG_HDR + count;
        }
    }
    res->final_loss = final_loss(bl, nbatches, cfg->mode == TRAIN_SYNC);
    int64_t max_ticket = first_ticket - 1;
    for (size_t i = 0; i < nbatches; i++) max_ticket = PST_MAX(max_ticket, bl[i].ticket);
    *data_end = first_ticket + (int64_t)nbatches;
    free(bl);
    close_epochs(res, nep, seen, per_epoch);
    free(seen);
    int rc = 0;
    if (trace && fclose(trace) != 0)
        rc = pst_fail(e, "%s: write error on the example trace", cfg->trace_path);
    if (bad_ids) rc = pst_fail(e, "%lld example ids outside the data set", (long long)bad_ids);
    if (max_ticket + 1 != *data_end)
        rc = pst_fail(e, "the workers took %lld batches from ticket %lld but the last was %lld",
                      (long long)(*data_end - first_ticket), (long long)first_ticket,
                      (long long)max_ticket);
    return rc;
}

/* Root: the final variables, slots and averages into the model and r's
 * slabs, from every PS's last snapshot. In lockstep the snapshots still in
 * flight before it are taken as during the run (their checkpoints and
 * evaluations included); otherwise there are none. */
static void receive_final_state(dist_run *r)
{
    root_ctx *rc = r->rctx;
    const size_t nparam = r->nparam;
    pst_err e = {{0}};
    if (rc->lockstep && root_drain_snapshots(rc, &e) < 0) dist_fatal("%s", e.msg);
    for (int p = 0; p < r->P; p++) {
        int64_t v = -1;
        if (!rc->final_got[p]) {
            do
                ps_snapshot_recv(r->sh, p, true, &v, rc->ck_params, rc->ck_slots, nparam,
                                 rc->ck_avg);
            while (v >= 0);
        }
    }
    memcpy(nn_model_params(r->m), rc->ck_params, sizeof(float) * nparam);
    memcpy(r->slots, rc->ck_slots, sizeof(float) * nparam * (size_t)r->nslots);
    if (r->averages) memcpy(r->averages, rc->ck_avg, sizeof(float) * nparam);
}

/* The gathered example logs and report records (root only; NULL elsewhere):
 * rank k's log is all[displs[k] .. displs[k] + counts[k]), its record
 * recs[k * FEED_REPORT_WORDS ..]. */
typedef struct gathered {
    int64_t *all;
    int *counts, *displs;
    double *recs;
} gathered;

/* Collective: every rank's example log and report record to the root. */
static void gather_logs(const dist_run *r, gathered *g)
{
    const int size = r->size;
    int mine = (int)r->log.n;
    if (r->log.n > (size_t)INT32_MAX) dist_fatal("example r->log too large to gather");
    if (r->is_root) {
        g->counts = pst_calloc((size_t)size, sizeof *g->counts);
        g->displs = pst_calloc((size_t)size, sizeof *g->displs);
        g->recs = pst_calloc((size_t)size * FEED_REPORT_WORDS, sizeof *g->recs);
    }
    MPI_OK(MPI_Gather(&mine, 1, MPI_INT, g->counts, 1, MPI_INT, r->root_rank, MPI_COMM_WORLD));
    MPI_OK(MPI_Gather(r->my_rec, FEED_REPORT_WORDS, MPI_DOUBLE, g->recs, FEED_REPORT_WORDS,
                      MPI_DOUBLE, r->root_rank, MPI_COMM_WORLD));
    int64_t tot = 0;
    if (r->is_root) {
        for (int k = 0; k < size; k++) {
            if (tot + g->counts[k] > INT32_MAX) dist_fatal("example logs too large to gather");
            g->displs[k] = (int)tot, tot += g->counts[k];
        }
        g->all = pst_malloc(sizeof *g->all * (size_t)(tot ? tot : 1));
    }
    MPI_OK(MPI_Gatherv(r->log.a, mine, MPI_INT64_T, g->all, g->counts, g->displs, MPI_INT64_T,
                       r->root_rank, MPI_COMM_WORLD));
}

/* Root: the result's counts and timings from the report records (workers:
 * examples, steps, time split; PS: apply/idle/CPU, bytes, the version
 * reached), this run's share of them, and the final progress line. */
static void fill_timings(dist_run *r, const double *recs)
{
    const train_cfg *cfg = r->cfg;
    train_result *res = r->res;
    const int P = r->P, W = r->W;
    res->ranks = r->size, res->ps = P, res->workers = W;
    res->root_cpu = r->fst.cpu;
    res->nworker_timing = W;
    res->wtiming = pst_calloc((size_t)W, sizeof *res->wtiming);
    int64_t async_steps = 0;
    for (int w = 0; w < W; w++) {
        const double *q = recs + (size_t)r->worker_ranks[w] * FEED_REPORT_WORDS;
        res->wtiming[w] = (worker_timing){q[WR_WAIT_DATA], q[WR_PULL], q[WR_COMPUTE], q[WR_PUSH],
                                          q[WR_WAIT_VERSION]};
        res->examples += (int64_t)q[WR_EXAMPLES];
        async_steps += (int64_t)q[WR_STEPS];
    }
    if (cfg->mode == TRAIN_ASYNC) res->steps = r->info.first_version + async_steps;
    res->nps = P;
    res->pstiming = pst_calloc((size_t)P, sizeof *res->pstiming);
    res->per_ps_bytes = pst_calloc((size_t)P, sizeof *res->per_ps_bytes);
    for (int p = 0; p < P; p++) {
        const double *q = recs + (size_t)r->ps_ranks[p] * FEED_REPORT_WORDS;
        res->pstiming[p] = (ps_timing){q[PR_APPLY], q[PR_IDLE], q[PR_CPU]};
        res->per_ps_bytes[p] = r->plan->ps_bytes[p];
        res->dropped_stale = PST_MAX(res->dropped_stale, (int64_t)q[PR_DROPPED]);
        if (cfg->mode == TRAIN_SYNC) res->steps = PST_MAX(res->steps, (int64_t)q[PR_VERSION]);
    }
    res->imbalance = r->plan->imbalance;
    res->nfeeder_stats = r->F;
    res->fstats = pst_calloc((size_t)r->F, sizeof *res->fstats);
    for (int f = 0; f < r->F; f++) {
        const double *q = recs + (size_t)r->feeder_ranks[f] * FEED_REPORT_WORDS;
        res->fstats[f] = (feeder_stats){r->feeder_ranks[f], (int64_t)q[FR_BATCHES],
                                        (int64_t)q[FR_PREPARED], q[FR_SOURCE_WAIT]};
    }
    /* this run's share, and the whole run's (a resumed run) */
    res->run_examples = res->examples;
    res->run_seconds = r->t_train;
    res->run_steps = res->steps - r->info.first_version;
    res->images_per_sec = r->t_train > 0 ? (double)res->examples / r->t_train : 0;
    res->train_seconds = r->info.prior_seconds + r->t_train;
    res->total_steps = r->rctx->total_steps;
    res->total_epochs = r->rctx->total_epochs;
    /* the last progress line is the final step: from the final records
     * (the last tick may not have seen them) */
    const double **wrec = pst_malloc(sizeof *wrec * (size_t)W);
    for (int w = 0; w < W; w++) wrec[w] = recs + (size_t)r->worker_ranks[w] * FEED_REPORT_WORDS;
    root_report(r->rctx, wrec, &r->rctx->last_pt);
    free(wrec);
}

/* Root: the accounting, the final checkpoint, --dump-params, the
 * evaluation (of the moving averages when there are any) and the metrics'
 * end. Returns -1 (e set) on the first failure. */
static int finish_on_root(dist_run *r, const gathered *g, pst_err *e)
{
    const train_cfg *cfg = r->cfg;
    train_result *res = r->res;
    nn_model *m = r->m;
    const size_t nparam = r->nparam;
    int64_t data_end = r->info.first_ticket;
    res->examples += r->info.prior_examples;
    res->epochs = r->info.per_epoch ? (int)(res->examples / r->info.per_epoch) : 0;
    res->stop_signal = r->rctx->stop_signal;
    if (account(cfg, res, g->all, g->counts, g->displs, r->worker_ranks, r->W, r->info.per_epoch,
                &r->prior, r->prior_epoch, r->info.first_ticket, &data_end, e) < 0)
        return -1;
    /* the 1-based epoch of the last batch */
    res->epoch = data_end > 0 ? (int)((data_end - 1) / PST_MAX(r->info.bpe, 1)) + 1 : 0;
    if (cfg->checkpoint_dir &&
        root_save_checkpoint(r->rctx, res->steps, data_end, nn_model_params(m), r->slots,
                             r->averages, e) < 0)
        return -1;
    if (cfg->dump_params_path &&
        train_dump_params(cfg->dump_params_path, nn_model_params(m), nparam, e) < 0)
        return -1;
    if (r->esplit && !res->stop_signal) {
        eval_stats ev;
        const double te = tl_now();
        /* evaluations use the moving averages (docs/training.md, "Training recipes"); the
         * variables are not needed any more */
        if (r->averages) memcpy(nn_model_params(m), r->averages, sizeof(float) * nparam);
        if (train_evaluate(m, &r->ds, &r->input, r->esplit, cfg->batch, &ev, NULL, e) < 0)
            return -1;
        tl_add(TL_EVAL, te, pst_now(), res->steps);
        train_set_eval(res, r->esplit, &ev);
        metrics_eval(r->mx, res->steps, res->epoch, r->esplit, &ev);
    }
    return metrics_finish(r->mx, e); /* a write error (a full disk) fails the run */
}

/* Collective (async runs): the workers' staleness histograms summed on the
 * root, into the result. */
static void gather_staleness(dist_run *r)
{
    train_result *res = r->res;
    MPI_OK(MPI_Reduce(r->stale_hist, res->staleness_hist, TRAIN_STALE_BINS, MPI_INT64_T, MPI_SUM,
                      r->root_rank, MPI_COMM_WORLD));
    MPI_OK(MPI_Reduce(&r->stale_max, &res->staleness_max, 1, MPI_INT64_T, MPI_MAX, r->root_rank,
                      MPI_COMM_WORLD));
    res->has_staleness = true;
    res->staleness_bound = r->cfg->max_staleness;
}

int run_end(dist_run *r, pst_err *e)
{
    /* 5. the final variables and slots */
    if (r->is_root) receive_final_state(r);
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    gathered g = {NULL, NULL, NULL, NULL};
    gather_logs(r, &g);
    if (r->cfg->mode == TRAIN_ASYNC && r->cfg->max_staleness >= 0) gather_staleness(r);
    ssp_free(r->ssp), r->ssp = NULL;
    dist_timeline_gather(r);
    if (r->is_root) {
        r->res->comm_bf16 = r->cfg->comm_bf16;
        ps_comm_bytes(r->sh, &r->res->pull_bytes_per_step, &r->res->push_bytes_per_step);
    }
    ps_free(r->sh), r->sh = NULL;
    feed_free(r->f), r->f = NULL;

    /* 6. the result, on the root */
    int rc = 0;
    if (r->is_root) {
        pipe_free(r->pl), r->pl = NULL; /* the data set is ours again */
        fill_timings(r, g.recs);
        rc = finish_on_root(r, &g, e) < 0 ? -1 : 0;
        if (rc == 0) rc = dist_timeline_write(r, e);
    }
    free(g.all), free(g.counts), free(g.displs), free(g.recs);
    return rc;
}
