/*
 * feeder.c - feeder ranks 1..F-1 (--feeders F): each runs the same input
 * pipeline as the root, from the run's data cursor, and serves the batches
 * of its own tickets through its slots of the batch ring (feed.h;
 * docs/design.md §3): lockstep sync and async, positions c_f .. c_f + W_f - 1
 * of every W tickets (the workers attached to it); with backup workers
 * ticket t from feeder t mod F. The pipeline's batches depend
 * only on the data, the seed and the epoch, so every feeder's copy of the
 * sequence is the root's, and ticket t carries the same batch for any F;
 * each feeder (the root included) prepares only its own tickets' images.
 */
#include <stdio.h>

#include "dist_internal.h"
#include "pstrain/run_common.h"
#include "trainer.h"

int feeder_pipe_new(dist_run *r, const pipe_cfg *base, int f, int64_t t0, i64vec *ids, pst_err *e)
{
    const train_cfg *cfg = r->cfg;
    const int64_t bpe = PST_MAX(r->info.bpe, 1);
    pipe_cfg pc = *base;
    pc.batch = cfg->batch;
    pc.seed = cfg->seed;
    pc.epochs = cfg->epochs;
    pc.first_epoch = (int)(t0 / bpe);
    if (cfg->epochs && pc.first_epoch >= cfg->epochs) pc.first_epoch = cfg->epochs;
    /* batch index i of this pipeline is ticket t_first + i */
    const int64_t t_first = (int64_t)pc.first_epoch * bpe;
    pc.skip_batches = PST_MAX(t0 - t_first, (int64_t)0);
    if (r->attach) { /* local counters: positions c_f .. c_f + W_f - 1 of each W tickets */
        int wf = 0, cf = 0;
        for (int k = 0; k < r->size; k++) {
            wf += r->attach[k] == f;
            cf += r->attach[k] >= 0 && r->attach[k] < f;
        }
        pc.share_count = PST_MAX(r->W, 2); /* (W = 1: the one worker's feeder keeps all) */
        pc.share_index = (int)(((cf + t0 - t_first) % r->W + r->W) % r->W);
        pc.share_span = r->W == 1 ? 2 * wf : wf; /* 0: a feeder without workers */
    } else {
        pc.share_count = r->F;
        pc.share_index = (int)(((f - t_first) % r->F + r->F) % r->F);
        pc.share_span = 1;
    }
    if (pipe_new(&r->pl, &r->ds, &pc, e) < 0) return -1;
    for (int64_t i = 0; i < pc.skip_batches; i++) {
        pipe_batch b;
        int got = pipe_next(r->pl, &b, e);
        if (got < 0) return -1;
        if (got == 0) break;
        if (ids)
            for (int j = 0; j < b.count; j++) vec_push(ids, b.ids[j]);
    }
    return 0;
}

/* Opens the data and starts this feeder's pipeline at the data cursor.
 * Returns 0 or -1 with e. */
static int feeder_pipeline(dist_run *r, pst_err *e)
{
    const train_cfg *cfg = r->cfg;
    if (h5ds_open(&r->ds, cfg->data_path, e) < 0) return -1;
    r->ds_open = true;
    train_cfg resolved = *cfg;
    if (train_resolve_input(&resolved, &r->ds, e) < 0) return -1;
    /* feeder f is index f - 1 of the feeder communicator (the root is feeder 0) */
    return feeder_pipe_new(r, &resolved.pipe, r->index + 1, r->info.first_ticket, NULL, e);
}

static int feeder_source(void *ctx, pipe_batch *b, pst_err *e)
{
    return pipe_next(((dist_run *)ctx)->pl, b, e);
}

void feeder_run(dist_run *r, pst_err *e)
{
    /* the root checked the same data and settings: a failure here is the
     * job's (workers wait for this rank's tickets) */
    if (feeder_pipeline(r, e) < 0) dist_fatal("%s", e->msg);
    feed_hooks h = {.source = feeder_source, .ctx = r, .tick_secs = 1.0};
    feed_serve_stats st;
    if (feed_feeder_serve(r->f, &h, &st, e) < 0) dist_fatal("%s", e->msg);
    r->my_rec[FR_BATCHES] = (double)st.batches;
    r->my_rec[FR_PREPARED] = (double)pipe_examples_prepared(r->pl);
    r->my_rec[FR_SOURCE_WAIT] = st.source_wait;
    pipe_free(r->pl), r->pl = NULL;
}
