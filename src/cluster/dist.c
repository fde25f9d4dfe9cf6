/*
 * dist.c - distributed training: the run. Roles, start-up checks, the
 * model, plan and windows every rank shares, then each rank's role: the
 * root (root.c), the PS (below, service loop in ps.c), the workers
 * (worker.c), and the end of the run (end.c). trainer.h is the map.
 *
 * Roles (docs/design.md §1, layout.c): rank 0 root (input pipeline -> batch
 * ring, metrics, summary), ranks 1..P parameter servers (ps.c), or with
 * --ps-per-node N, N parameter servers on every node; with --feeders F,
 * F-1 feeders placed one per node round-robin from the root's next node
 * (feeder.c; the root is feeder 0: lockstep sync and async, each worker
 * draws from the feeder on its node, layout_attach, async workers moving on
 * to the others' rings once theirs is exhausted; sync with backup workers,
 * ticket t is served by feeder t mod F); the rest workers.
 * Every rank builds the same model from the same seed (so initial
 * variables agree without a broadcast; a resumed run broadcasts the
 * checkpoint's), the same placement plan, and joins two windows: the root's
 * batch ring (feed.c) and the PS shards (ps.c).
 *
 * Termination: the root knows the ticket limit T in advance (epochs x
 * batches per epoch, capped by --steps), publishes end-of-data markers from
 * T on and serves until every worker has called feed_finish. A lockstep PS
 * (sync, R = W) stops after the version that consumes ticket T-1; other PS
 * serve until every worker has put its end stamp (sync with backup workers
 * and --steps: the PS raise `done` after S updates). Afterwards every PS
 * sends its final shard (variables and optimizer slots) to the root, and all
 * ranks meet in collectives: the root gathers the example logs and timings,
 * writes the final checkpoint, evaluates and fills the result.
 *
 * Checkpoints (--checkpoint-dir): a checkpoint is the PS snapshots of one
 * version, assembled on the root (ckpt.h layout, independent of P and the
 * placement). Lockstep PS snapshot every --checkpoint-every versions on
 * their own, and at a version the root names for --checkpoint-secs (one
 * whose tickets it has not published yet, so every PS takes the same). The
 * data cursor of version v is ticket t0 + (v - v0) W (t0, v0: where this run
 * started); at the end it is t0 + the batches the workers took. SIGTERM/SIGUSR1/SIGINT
 * (the root's flag decides): the root lowers T to the end of the version in
 * flight, the run ends there with a final checkpoint and exit 0. --resume:
 * the root reads the checkpoint, everybody starts at its version and data
 * cursor (the pipeline replays the epoch and skips the consumed batches), so
 * a sync run resumed ends bitwise equal to an uninterrupted one, for any PS
 * count. Another worker count resumes too (the cursor counts batches):
 * lockstep then groups W' batches a version from the cursor on, so the run
 * is deterministic for any PS count but differs from the W-worker one. Async and backup-worker runs
 * checkpoint at the end and on a signal.
 *
 * --eval-every E: lockstep runs evaluate the snapshot of the version that
 * ends epoch E, 2E, ... (the same numbers for any PS count); other modes the
 * variables as they are once the ring has passed the epoch's last batch.
 *
 * --trace-examples FILE: one JSON object per batch, in worker order:
 * {"worker": w, "step": the version (sync) or global step (async) it was
 * computed at, "ticket": t, "epoch": e, "ids": [...]}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "dist_internal.h"
#include "layout.h"
#include "pstrain/blas.h"
#include "pstrain/dist.h"
#include "pstrain/signals.h"
#include "pstrain/run_common.h"
#include "trainer.h"

static void die_hook(int status)
{
    MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
}
/* Checks that do not need the data: identical on every rank, so every rank
 * refuses a bad configuration the same way, before any window exists. */
static int check_config(const train_cfg *c, int size, int P, pst_err *e)
{
    const int F = PST_MAX(c->feeders, 1), W = size - 1 - P - (F - 1);
    if (F > 1 && W < 1)
        return pst_fail(e,
                        "--feeders %d with --ps %d and %d MPI ranks leaves no worker: %d ranks "
                        "are needed at least (1 root + %d PS + %d feeders + 1 or more workers)",
                        F, P, size, P + F + 1, P, F - 1);
    if (P < 1)
        return pst_fail(e,
                        "--ps %d: distributed training needs at least one parameter server "
                        "(run with --ps 1 or more, and at least 3 ranks: root, PS, worker)",
                        P);
    if (W < 1)
        return pst_fail(e,
                        "--ps %d with %d MPI ranks leaves no worker: %d ranks are needed at "
                        "least (1 root + %d PS + 1 or more workers), e.g. mpirun -np %d",
                        P, size, P + 2, P, P + 2);
    if (c->replicas_to_aggregate < 0 || c->replicas_to_aggregate > W)
        return pst_fail(e,
                        "--replicas-to-aggregate %d with %d workers: expected 1..%d (more "
                        "replicas than workers needs at least %d ranks with --ps %d)",
                        c->replicas_to_aggregate, W, W, 1 + P + c->replicas_to_aggregate, P);
    if (train_check_cfg(c, e) < 0) return -1;
    if (c->placement == PLACE_PARTITION && c->partition_bytes <= 0)
        return pst_fail(e, "--partition-bytes: expected a positive number of bytes");
    return 0;
}

/* ---- roles ------------------------------------------------------------------ */

/* The policy: which role a rank of MPI_COMM_WORLD plays, as layout.c
 * placed it (the classic or the colocated layout, then the feeders by
 * node). Everything else learns the roles from the communicators built
 * from this, never from rank arithmetic. */
static int role_of(const dist_run *r, int rank)
{
    return r->roles[rank];
}

/* The order of a rank in its role communicator: feeders by feeder index
 * (feeder f is f - 1 there, wherever layout.c put it), the others by world
 * rank. */
static int role_key(const dist_run *r, int rank)
{
    for (int f = 1; f < r->F; f++)
        if (r->feeder_ranks[f] == rank) return f - 1;
    return rank;
}

/* "root", "ps P" (from 1) or "worker W" (from 0), as in error messages. */
static void role_name(char *out, size_t n, int role, int index)
{
    if (role == ROLE_ROOT)
        snprintf(out, n, "root");
    else if (role == ROLE_PS)
        snprintf(out, n, "ps %d", index + 1);
    else if (role == ROLE_FEEDER) /* the root is feeder 0 */
        snprintf(out, n, "feeder %d", index + 1);
    else
        snprintf(out, n, "worker %d", index);
}

/* Collective: on the root rank (the first, role_of), the rank -> host ->
 * role map, one line per host in the order of its first rank ("host h2:
 * rank 3 worker 1, rank 4 worker 2"), hosts named by dist_host_name
 * (layout.h); NULL on the other ranks. roles: {role, index}
 * per world rank; attach (may be NULL): the feeder each worker draws from
 * ("rank 4 worker 2 (from feeder 1)"). */
static char *host_map(const int *roles, const int *attach, int size, int rank)
{
    enum { NAME = MPI_MAX_PROCESSOR_NAME };
    char mine[NAME] = "";
    dist_host_name(mine);
    char *names = rank == 0 ? pst_malloc((size_t)NAME * (size_t)size) : NULL;
    MPI_OK(MPI_Gather(mine, NAME, MPI_CHAR, names, NAME, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (rank != 0) return NULL;
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) pst_die("out of memory");
    bool *done = pst_calloc((size_t)size, sizeof *done);
    for (int k = 0; k < size; k++) {
        if (done[k]) continue;
        const char *host = names + (size_t)k * NAME;
        fprintf(f, "%shost %.*s:", k ? "\n" : "", NAME, host);
        const char *sep = " ";
        for (int j = k; j < size; j++) {
            if (done[j] || strncmp(host, names + (size_t)j * NAME, NAME) != 0) continue;
            char role[32];
            role_name(role, sizeof role, roles[2 * j], roles[2 * j + 1]);
            fprintf(f, "%srank %d %s", sep, j, role);
            if (attach && attach[j] >= 0) fprintf(f, " (from feeder %d)", attach[j]);
            done[j] = true, sep = ", ";
        }
    }
    fclose(f);
    free(done);
    free(names);
    return text;
}

/* Splits MPI_COMM_WORLD by role (r->role_comm: this rank's role peers; its
 * rank there is r->index) and gathers every rank's role, so that each rank
 * knows the world ranks of the root, of PS p and of worker w (in the order
 * of their role communicators). Collective. */
static void assign_roles(dist_run *r)
{
    const int role = role_of(r, r->rank);
    MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, role, role_key(r, r->rank), &r->role_comm));
    MPI_OK(MPI_Comm_rank(r->role_comm, &r->index));
    int mine[2] = {role, r->index};
    int *all = pst_malloc(sizeof *all * 2 * (size_t)r->size);
    MPI_OK(MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD));
    r->ps_ranks = pst_calloc((size_t)r->P, sizeof *r->ps_ranks);
    r->worker_ranks = pst_calloc((size_t)r->W, sizeof *r->worker_ranks);
    int nroot = 0, nps = 0, nw = 0, nf = 1;
    for (int k = 0; k < r->size; k++) {
        const int kr = all[2 * k], ki = all[2 * k + 1];
        if (kr == ROLE_ROOT)
            r->root_rank = k, nroot++;
        else if (kr == ROLE_PS && ki < r->P)
            r->ps_ranks[ki] = k, nps++;
        else if (kr == ROLE_WORKER && ki < r->W)
            r->worker_ranks[ki] = k, nw++;
        else if (kr == ROLE_FEEDER && ki + 1 < r->F && r->feeder_ranks[ki + 1] == k)
            nf++;
    }
    if (nf != r->F || r->feeder_ranks[0] != r->root_rank)
        dist_fatal("role assignment: %d feeders (expected %d)", nf, r->F);
    if (nroot == 1 && nps == r->P && nw == r->W)
        r->host_map = host_map(all, r->attach, r->size, r->rank);
    free(all);
    if (nroot != 1 || nps != r->P || nw != r->W)
        dist_fatal("role assignment: %d root, %d PS, %d workers (expected 1, %d, %d)", nroot, nps,
                   nw, r->P, r->W);
    r->is_root = role == ROLE_ROOT, r->is_ps = role == ROLE_PS;
    r->is_feeder = role == ROLE_FEEDER;
    r->worker_id = role == ROLE_WORKER ? r->index : -1;
}

/* ---- PS ------------------------------------------------------------------- */

typedef struct ps_report_ctx {
    feed *f;
} ps_report_ctx;

static void ps_report(void *ctx, const double *vals, int n)
{
    feed *f = ((ps_report_ctx *)ctx)->f;
    feed_report(f, vals, n);
    feed_flush(f);
}

/* The PS role: serve the shard, then send its final state to the root. */
static void ps_role(dist_run *r, pst_err *e)
{
    const train_cfg *cfg = r->cfg;
    const int R = r->R;
    ps_report_ctx rc_ctx = {r->f};
    ps_serve_cfg sc = {.mode = cfg->mode,
                       .replicas = R,
                       .opt = cfg->opt,
                       .sched = r->sched,
                       .max_versions = r->info.max_versions,
                       .total_tickets = r->info.total,
                       .ckpt_every = cfg->checkpoint_dir ? cfg->checkpoint_every : 0,
                       .report = ps_report,
                       .report_ctx = &rc_ctx,
                       .report_secs = 0.25,
                       .threads = pst_threads_resolve(cfg->ps_threads)};
    ps_serve_stats pst;
    if (ps_serve(r->sh, &sc, &pst, e) < 0) dist_fatal("%s", e->msg);
    double *q = r->my_rec;
    q[PR_VERSION] = (double)pst.version, q[PR_APPLIED] = (double)pst.applied;
    q[PR_DROPPED] = (double)pst.dropped_stale, q[PR_APPLY] = pst.apply, q[PR_IDLE] = pst.idle;
    q[PR_CPU] = pst.cpu;
    /* the final state of the shard (marked final by a negative version) */
    ps_snapshot_send(r->sh, -1 - pst.version);
    ps_snapshot_wait(r->sh);
}

/* ---- the run --------------------------------------------------------------- */

/* The entry of every training run (dist.h); it lives here, above the train
 * layer, so that the train layer never calls into the cluster layer. */
int train_run(const train_cfg *cfg, train_result *res, pst_err *e)
{
    /* a process that no launcher started does not initialise MPI (main.c) */
    int init = 0, size = 1;
    MPI_Initialized(&init);
    if (!init) return train_single(cfg, res, e);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) return train_single(cfg, res, e);
    return dist_train(cfg, res, e);
}

/* Names this rank after its role for messages ("rank 3 (worker 1)"), and
 * makes a fatal error abort the whole job so that no peer hangs. Returns
 * the program name to restore. */
static const char *enter_role(const dist_run *r)
{
    static char progname[64]; /* pst_set_progname keeps the pointer */
    char role[32];
    const int kind = r->is_root     ? ROLE_ROOT
                     : r->is_ps     ? ROLE_PS
                     : r->is_feeder ? ROLE_FEEDER
                                    : ROLE_WORKER;
    role_name(role, sizeof role, kind, r->index);
    dist_set_role(role);
    const char *old_progname = pst_progname();
    snprintf(progname, sizeof progname, "rank %d (%s)", r->rank, role);
    pst_set_progname(progname);
    pst_set_die_hook(die_hook);
    return old_progname;
}

/* This rank's part of the set-up every rank shares: the model (the same
 * seed everywhere: the same initial variables), the placement plan, the
 * optimizer slots and moving averages, and on the root of a resumed run
 * the checkpoint's values. Local; returns false on failure (e set). */
static bool build_model(dist_run *r, pst_err *e)
{
    const train_cfg *cfg = r->cfg;
    nn_model_cfg mc = {
        .name = cfg->model,
        .height = r->info.height,
        .width = r->info.width,
        .channels = r->info.channels,
        .num_classes = r->info.classes,
        .max_batch = r->is_ps || r->is_feeder ? 1 : cfg->batch,
        .seed = cfg->seed,
        .weight_decay = cfg->weight_decay,
        .label_smoothing = cfg->label_smoothing,
        /* only workers compute steps (the root evaluates between them) */
        .threads = r->is_ps || r->is_root || r->is_feeder ? 1 : pst_threads_resolve(cfg->threads)};
    nn_switches_from_env(&mc.sw);
    int ok = nn_model_new(&r->m, &mc, e) == 0;
    if (ok) {
        r->nv = nn_model_nvars(r->m);
        r->vars = nn_model_vars(r->m);
        ok = place_plan_new(&r->plan, r->vars, r->nv, r->P, cfg->placement, cfg->partition_bytes,
                            e) == 0;
    }
    r->nparam = ok ? nn_model_size(r->m) : 0;
    r->nslots = opt_nslots(cfg->opt.kind);
    if (ok) {
        r->slots = pst_aligned_alloc(sizeof(float) * (size_t)PST_MAX(r->nslots, 1) *
                                     (r->nparam ? r->nparam : 1));
        opt_init_slots(&cfg->opt, r->slots, r->nparam, r->nparam);
        if (cfg->ema_decay > 0)
            r->averages = pst_aligned_alloc(sizeof(float) * (r->nparam ? r->nparam : 1));
    }
    /* resume: the root reads the variables, the slots and the averages */
    if (ok && r->is_root && r->info.resumed) {
        ckpt_expect want = ckpt_expect_model(r->m, &cfg->opt);
        want.averages = r->averages;
        ckpt_meta cm;
        memset(&cm, 0, sizeof cm);
        ok = ckpt_read(r->ckpt_file, &want, nn_model_params(r->m), r->nslots ? r->slots : NULL,
                       r->nparam, &cm, e) == 0;
        if (ok && r->averages && !cm.has_averages) {
            /* they start from the checkpoint's variables */
            memcpy(r->averages, nn_model_params(r->m), sizeof(float) * r->nparam);
            r->averages_from_vars = true;
        }
        if (ok) ckpt_meta_free(&cm);
    }
    return ok;
}

/* Collective: build_model on every rank, then, if it succeeded everywhere,
 * the resumed values from the root to everybody. Returns -1 (e set) when
 * any rank failed. */
static int share_model(dist_run *r, pst_err *e)
{
    int ok = build_model(r, e);
    int all_ok = 0;
    MPI_OK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!all_ok) {
        if (ok) pst_fail(e, "model, placement or checkpoint set-up failed on another rank");
        return -1;
    }
    if (r->info.resumed) {
        dist_bcast(nn_model_params(r->m), r->nparam, MPI_FLOAT, sizeof(float), r->root_rank,
                   MPI_COMM_WORLD);
        if (r->nslots)
            dist_bcast(r->slots, r->nparam * (size_t)r->nslots, MPI_FLOAT, sizeof(float),
                       r->root_rank, MPI_COMM_WORLD);
        if (r->averages)
            dist_bcast(r->averages, r->nparam, MPI_FLOAT, sizeof(float), r->root_rank,
                       MPI_COMM_WORLD);
        r->res->start_step =
            r->cfg->mode == TRAIN_SYNC ? r->info.first_version : r->info.first_ticket;
    }
    return 0;
}

/* Collective: the two windows, the root's batch ring and the PS shards,
 * then the learning-rate schedule. The ring holds up to 8 batches per
 * worker (at least 2, within about 32 MiB): slack for a root that waits
 * for a core. A failure aborts the job. */
static void open_windows(dist_run *r, pst_err *e)
{
    const train_cfg *cfg = r->cfg;
    const int W = r->W, R = r->R;
    const int64_t slot_bytes =
        (int64_t)cfg->batch * ((int64_t)r->info.height * r->info.width * r->info.channels + 12);
    r->nring = (int)PST_MAX(2 * W + 2, PST_MIN(8 * W + 8, (32LL << 20) / slot_bytes));
    feed_geom fg = {.batch = cfg->batch,
                    .example_bytes = (int64_t)r->info.height * r->info.width * r->info.channels,
                    .nslots = r->nring,
                    .nworkers = W,
                    .first_ticket = r->info.first_ticket,
                    .first_step = cfg->mode == TRAIN_ASYNC ? r->info.first_version : 0,
                    .nfeeders = r->F,
                    .feeder_ranks = r->feeder_ranks,
                    .attach = r->attach,
                    .move_on = cfg->mode == TRAIN_ASYNC};
    if (feed_new(&r->f, MPI_COMM_WORLD, r->root_rank, &fg, e) < 0) dist_fatal("%s", e->msg);
    ps_layout lay = {.ps_ranks = r->ps_ranks,
                     .nworkers = W,
                     /* async SGD accumulates into the parameters without the
                      * PS, which then could not keep the averages; and
                      * MPI_Accumulate cannot sum bf16 */
                     .grad_slots = cfg->mode == TRAIN_SYNC || cfg->opt.kind != OPT_SGD ||
                                   cfg->ema_decay > 0 || cfg->comm_bf16,
                     .bf16 = cfg->comm_bf16,
                     .lockstep = r->lockstep,
                     .root_rank = r->root_rank,
                     .opt = cfg->opt,
                     .init_slots = r->info.resumed && r->nslots ? r->slots : NULL,
                     .init_slot_stride = r->nparam,
                     .ema_decay = cfg->ema_decay,
                     .init_averages = r->info.resumed ? r->averages : NULL,
                     .first_version = cfg->mode == TRAIN_SYNC ? r->info.first_version : 0,
                     .first_ticket = r->info.first_ticket};
    if (ps_new(&r->sh, MPI_COMM_WORLD, r->plan, &lay, nn_model_params(r->m), e) < 0)
        dist_fatal("%s", e->msg);
    if (cfg->mode == TRAIN_ASYNC && cfg->max_staleness >= 0 &&
        ssp_new(&r->ssp, MPI_COMM_WORLD, r->root_rank, W, cfg->max_staleness, e) < 0)
        dist_fatal("%s", e->msg);

    r->sched = train_schedule(cfg, W,
                              cfg->mode == TRAIN_SYNC ? PST_MAX((r->info.bpe + R - 1) / R, 1)
                                                      : PST_MAX(r->info.bpe, 1));
}

/* Collective: the roles of every world rank (*roles, owned) and the F
 * feeder ranks (*feeder_ranks, owned, [0] the root's), and P: the classic
 * or the colocated layout (--ps-per-node sets P from the nodes), checked
 * (check_config), then the feeders placed by node. Returns -1 with e, the
 * same on every rank, before any window exists. */
static int set_roles(const train_cfg *cfg, int size, int **roles, int **feeder_ranks, int **attach,
                     int *P, pst_err *e)
{
    const int F = PST_MAX(cfg->feeders, 1);
    int *role = NULL, *franks = NULL;
    if (cfg->ps_per_node && layout_colocated(cfg, &role, P, e) < 0) return -1;
    if (check_config(cfg, size, *P, e) < 0) goto fail;
    if (!role) {
        role = pst_malloc(sizeof *role * (size_t)size);
        layout_classic(size, *P, role);
    }
    if (F > 1) {
        if (layout_place_feeders(F, role, &franks, attach, e) < 0) goto fail;
    } else {
        franks = pst_malloc(sizeof *franks);
        franks[0] = 0; /* the root: world rank 0 in both layouts */
    }
    *roles = role, *feeder_ranks = franks;
    return 0;
fail:
    free(role);
    return -1;
}

/* Frees what the run holds (any of it may be missing). */
static void dist_run_free(dist_run *r)
{
    dist_timeline_free(r);
    root_ctx_free(r->rctx);
    metrics_close(r->mx);
    pipe_free(r->pl);
    free(r->log.a), free(r->prior.a);
    free(r->slots), free(r->averages), free(r->mtext);
    free(r->ps_ranks), free(r->worker_ranks), free(r->feeder_ranks), free(r->roles);
    free(r->attach);
    if (r->role_comm != MPI_COMM_NULL) MPI_Comm_free(&r->role_comm);
    free(r->host_map);
    place_plan_free(r->plan);
    nn_model_free(r->m);
    if (r->ds_open) h5ds_close(&r->ds);
    free(r);
}

int dist_train(const train_cfg *cfg, train_result *res, pst_err *e)
{
    memset(res, 0, sizeof *res);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int P = cfg->ps, *roles = NULL, *feeder_ranks = NULL, *attach = NULL;
    if (set_roles(cfg, size, &roles, &feeder_ranks, &attach, &P, e) < 0) return -1;
    int thread_level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&thread_level);
    if (thread_level < MPI_THREAD_FUNNELED) {
        free(roles), free(feeder_ranks), free(attach);
        return pst_fail(e, "MPI was initialised without MPI_THREAD_FUNNELED (the input "
                           "pipeline's threads run beside MPI on the root)");
    }
    dist_run *r = pst_calloc(1, sizeof *r);
    r->cfg = cfg, r->res = res, r->rank = rank, r->size = size;
    r->roles = roles, r->feeder_ranks = feeder_ranks;
    r->P = P;
    r->F = PST_MAX(cfg->feeders, 1);
    const int W = r->W = size - 1 - P - (r->F - 1);
    const int R = r->R = cfg->replicas_to_aggregate ? cfg->replicas_to_aggregate : W;
    r->lockstep = cfg->mode == TRAIN_SYNC && R == W;
    /* workers draw from the feeder on their node in lockstep sync (its
     * versions fix which tickets each feeder serves) and in async (each
     * group at its own pace, moving on at the end: feed.h). With backup
     * workers a run at --steps ends by the PS's flag, each worker where it
     * is: the global counter keeps the taken tickets a prefix (the data
     * cursor), where groups stopped at their own pace would leave holes */
    if (r->lockstep || cfg->mode == TRAIN_ASYNC)
        r->attach = attach;
    else
        free(attach);
    assign_roles(r);
    const bool is_root = r->is_root, is_ps = r->is_ps; /* else a feeder or a worker */
    const char *old_progname = enter_role(r);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* 1 us: short back-off sleeps stay short */
    nn_blis_init();
    int rc = -1;

    /* 1. the root opens the data (and a checkpoint to resume from) and starts
     * the pipeline; everybody learns the geometry and the number of batches */
    if (is_root) root_prepare(r, e);
    MPI_OK(MPI_Bcast(&r->info, (int)sizeof r->info, MPI_BYTE, r->root_rank, MPI_COMM_WORLD));
    if (!r->info.ok) {
        if (!is_root) snprintf(e->msg, sizeof e->msg, "%s", r->info.msg);
        goto out;
    }
    if (r->info.done_already) { /* main says so */
        res->nothing_to_do = true;
        res->steps = r->info.first_version;
        snprintf(res->last_checkpoint, sizeof res->last_checkpoint, "%s", r->ckpt_file);
        rc = 0;
        goto out;
    }

    /* 2. the same model, plan and starting values everywhere */
    if (share_model(r, e) < 0) goto out;
    if (cfg->dry_run) {
        if (is_root) {
            nn_model_describe(r->m, stdout);
            nn_model_print_memory(r->m, opt_nslots(cfg->opt.kind), opt_name(cfg->opt.kind), stdout);
            place_plan_print(r->plan, stdout);
        }
        rc = 0;
        goto out;
    }
    if (cfg->checkpoint_dir) {
        if (pst_stop_signals_install(e) < 0) dist_fatal("%s", e->msg);
        if (is_root && !r->lockstep && (cfg->checkpoint_every || cfg->checkpoint_secs > 0) &&
            !cfg->quiet)
            fprintf(stderr, "pstrain: periodic checkpoints need --mode sync without backup "
                            "workers; this run checkpoints at the end and on a signal only\n");
    }

    /* 3. windows (and the timeline's clocks, before anything is recorded) */
    open_windows(r, e);
    dist_timeline_begin(r);

    /* 4. the roles */
    if (is_root)
        root_run(r, e);
    else if (is_ps)
        ps_role(r, e);
    else if (r->is_feeder)
        feeder_run(r, e);
    else
        worker_role(r);

    /* 5, 6. the end: final variables, logs, accounting, checkpoint, evaluation */
    if (run_end(r, e) < 0) goto out;
    rc = 0;
out:
    dist_run_free(r);
    pst_set_die_hook(NULL);
    pst_set_progname(old_progname);
    return rc;
}
