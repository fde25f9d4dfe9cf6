/* test_feed.c - the batch ring under mpirun: rank 0 serves a synthetic
 * source of E epochs x N examples; every other rank is a worker. Checks that
 * each example arrives exactly once per epoch, workers' sets are disjoint,
 * payloads arrive intact, tickets are dense, and that every worker gets one
 * end-of-data marker. Run with a ring of 1 slot and of 8 slots.
 * With F feeders (ranks 0..F-1, each serving its tickets from its own copy
 * of the source) the same, and once more with a stop: the root lowers the
 * total mid-run, and exactly the tickets below the total it settles on
 * carry data. With F > 1 also with local counters (feed.h: each worker
 * attached to one feeder, given here directly): worker i to feeder
 * (i + 1) mod F, and every worker to the last feeder (the others, the root
 * included, serve no ticket). And moving on (async): attached as
 * (i + 1) mod F, with the workers of feeder 1 slow, so that the others run
 * out of their own feeder's tickets and move on to feeder 1's ring: still
 * exactly once, the data tickets a dense prefix, every worker ends once,
 * and some of feeder 1's tickets go to workers attached elsewhere.
 * Usage: test_feed [examples] [batch] [epochs] [feeders] */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pstrain/feed.h"

#define PX 12

typedef struct src_state {
    int64_t n, next, batch_index;
    int batch, epochs, epoch;
    int64_t ids[64];
    int32_t labels[64];
    uint8_t pixels[64 * PX];
    uint64_t rng;
} src_state;

/* Epoch-wise permutation by a simple LCG-driven shuffle of a cursor. */
static int64_t *perm;

/* Stop runs (one slot, so that the root polls between batches): the root's
 * source is slow, so that the other feeders run ahead of it when the stop
 * comes. */
static int slow_source;

static int synth_next(void *ctx, pipe_batch *b, pst_err *e)
{
    (void)e;
    src_state *s = ctx;
    if (slow_source) nanosleep(&(struct timespec){0, 2000000}, NULL);
    if (s->next == s->n) {
        s->epoch++;
        s->next = 0;
    }
    if (s->epoch >= s->epochs) return 0;
    if (s->next == 0) {
        for (int64_t i = 0; i < s->n; i++) perm[i] = i;
        for (int64_t i = s->n - 1; i > 0; i--) {
            s->rng = s->rng * 6364136223846793005ULL + 1442695040888963407ULL;
            int64_t j = (int64_t)((s->rng >> 33) % (uint64_t)(i + 1));
            int64_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    int c = (int)PST_MIN((int64_t)s->batch, s->n - s->next);
    for (int i = 0; i < c; i++) {
        int64_t id = perm[s->next + i];
        s->ids[i] = id;
        s->labels[i] = (int32_t)(id % 10);
        for (int j = 0; j < PX; j++) s->pixels[i * PX + j] = (uint8_t)(id * 7 + j);
    }
    s->next += c;
    b->count = c;
    b->epoch = s->epoch;
    b->index = s->batch_index++;
    b->ids = s->ids;
    b->labels = s->labels;
    b->pixels = s->pixels;
    return 1;
}

/* The root's poll hook in the stop runs: lowers the total once the
 * workers have taken about a third of the tickets. */
typedef struct stop_state {
    feed *f;
    int64_t at;
    bool done;
} stop_state;

static stop_state stop_st;

static int stop_poll(void *ctx, pst_err *e)
{
    (void)ctx, (void)e;
    stop_state *st = &stop_st;
    if (st->done || feed_root_next_ticket(st->f) < st->at) return 0;
    feed_root_set_total(st->f, feed_root_next_ticket(st->f));
    st->done = true;
    return 1;
}

enum { ATTACH_NONE, ATTACH_NEXT, ATTACH_LAST, ATTACH_MOVE };

static void run(int nslots, int64_t n, int batch, int epochs, int F, bool stop, int mode)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int W = size - F;
    int franks[8], *attach = malloc(sizeof(int) * (size_t)size);
    for (int i = 0; i < F; i++) franks[i] = i;
    for (int r = 0; r < size; r++)
        attach[r] = r < F ? -1 : mode == ATTACH_LAST ? F - 1 : (r - F + 1) % F;
    const bool move = mode == ATTACH_MOVE;
    /* moving on: feeder 1's positions in each W tickets, c1 .. c1 + w1 - 1 */
    int c1 = 0, w1 = 0;
    for (int r = F; r < size; r++) c1 += attach[r] < 1, w1 += attach[r] == 1;
    feed_geom g = {.batch = batch,
                   .example_bytes = PX,
                   .nslots = nslots,
                   .nworkers = W,
                   .nfeeders = F,
                   .feeder_ranks = franks,
                   .attach = mode == ATTACH_NONE ? NULL : attach,
                   .move_on = move};
    feed *f = NULL;
    pst_err e;
    if (feed_new(&f, MPI_COMM_WORLD, 0, &g, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* each worker logs (epoch, id) pairs and its tickets */
    int64_t cap = 2 * n * epochs + 16, nlog = 0, nt = 0;
    int64_t *log = malloc(sizeof(int64_t) * (size_t)cap * 2);
    int64_t *tickets = malloc(sizeof(int64_t) * (size_t)cap);
    int ends = 0, bad_payload = 0;
    int64_t away = 0; /* moving on: feeder 1's data tickets taken by others */
    const int64_t want = epochs * ((n + batch - 1) / batch);
    int64_t published = 0, total = -1;
    if (rank < F) {
        src_state s = {.n = n, .batch = batch, .epochs = epochs, .rng = 42};
        perm = malloc(sizeof(int64_t) * (size_t)n);
        feed_serve_stats st;
        feed_hooks h = {.source = synth_next, .ctx = &s};
        if (rank == 0) {
            stop_st = (stop_state){.f = f, .at = want / 3};
            if (stop) h.poll = stop_poll;
            slow_source = stop;
            /* F > 1 as pstrain runs it, with the total known */
            CHECK(feed_root_serve(f, F > 1 ? want : -1, &h, &st, &e) == 0, "%s", e.msg);
            total = feed_root_total(f);
            slow_source = 0;
        } else {
            CHECK(feed_feeder_serve(f, &h, &st, &e) == 0, "%s", e.msg);
        }
        published = st.batches;
        free(perm);
    } else {
        feed_batch b;
        const bool slow = move && attach[rank] == 1;
        for (;;) {
            int got = feed_take(f, &b, NULL);
            /* moving on, the end markers before the last are not returned:
             * the data tickets alone are checked */
            if (got || !move) tickets[nt++] = b.ticket;
            if (!got) {
                ends++;
                break;
            }
            const int64_t pos = b.ticket % W;
            if (move && attach[rank] != 1 && pos >= c1 && pos < c1 + w1) away++;
            if (slow) nanosleep(&(struct timespec){0, 5000000}, NULL);
            for (int i = 0; i < b.count; i++) {
                log[2 * nlog] = b.epoch;
                log[2 * nlog + 1] = b.ids[i];
                nlog++;
                if (b.labels[i] != (int32_t)(b.ids[i] % 10)) bad_payload++;
                for (int j = 0; j < PX; j++)
                    if (b.pixels[i * PX + j] != (uint8_t)(b.ids[i] * 7 + j)) bad_payload++;
            }
        }
        feed_finish(f);
        CHECK(bad_payload == 0, "worker %d: %d corrupted payload bytes", rank, bad_payload);
        CHECK(ends == 1, "worker %d: %d end markers", rank, ends);
    }
    int64_t all_published = 0, all_away = 0;
    MPI_Reduce(&published, &all_published, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&away, &all_away, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && move && !stop && w1 < W) /* (a worker attached elsewhere) */
        CHECK(all_away > 0, "moving on: no worker took feeder 1's tickets but its own");

    if (rank == 0 && !stop)
        CHECK(all_published == want, "F=%d: feeders published %lld batches, expected %lld", F,
              (long long)all_published, (long long)want);
    /* gather logs on rank 0 */
    int mine = (int)(2 * nlog), *counts = NULL, *displs = NULL;
    int tmine = (int)nt, *tcounts = NULL, *tdispls = NULL;
    if (rank == 0) {
        counts = calloc((size_t)size, sizeof(int));
        displs = calloc((size_t)size, sizeof(int));
        tcounts = calloc((size_t)size, sizeof(int));
        tdispls = calloc((size_t)size, sizeof(int));
    }
    MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Gather(&tmine, 1, MPI_INT, tcounts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int64_t *all = NULL, *allt = NULL;
    int tot = 0, ttot = 0;
    if (rank == 0) {
        for (int r = 0; r < size; r++) {
            displs[r] = tot, tot += counts[r];
            tdispls[r] = ttot, ttot += tcounts[r];
        }
        all = malloc(sizeof(int64_t) * (size_t)(tot + 1));
        allt = malloc(sizeof(int64_t) * (size_t)(ttot + 1));
    }
    MPI_Gatherv(log, mine, MPI_INT64_T, all, counts, displs, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Gatherv(tickets, tmine, MPI_INT64_T, allt, tcounts, tdispls, MPI_INT64_T, 0,
                MPI_COMM_WORLD);
    if (rank == 0) {
        /* per (epoch, id): which worker saw it, how often */
        int *owner = malloc(sizeof(int) * (size_t)(n * epochs));
        int *seen = calloc((size_t)(n * epochs), sizeof(int));
        for (int r = F; r < size; r++)
            for (int i = displs[r]; i < displs[r] + counts[r]; i += 2) {
                int64_t ep = all[i], id = all[i + 1];
                if (ep < 0 || ep >= epochs || id < 0 || id >= n) {
                    CHECK(0, "bad (epoch %lld, id %lld)", (long long)ep, (long long)id);
                    continue;
                }
                seen[ep * n + id]++;
                owner[ep * n + id] = r;
            }
        int64_t dup = 0, miss = 0;
        for (int64_t i = 0; i < n * epochs; i++) dup += seen[i] > 1, miss += seen[i] == 0;
        if (stop) {
            /* exactly the tickets below the total carry data (a batch
             * published past it would have been taken: W tickets after it
             * are end markers) */
            CHECK(dup == 0, "stop: %lld duplicates", (long long)dup);
            CHECK(total >= want / 3 && total <= want, "stop: total %lld", (long long)total);
            int64_t nex = 0;
            for (int64_t i = 0; i < n * epochs; i++) nex += seen[i];
            int64_t full = total / ((n + batch - 1) / batch) * n;
            int64_t rest = total % ((n + batch - 1) / batch);
            CHECK(nex == full + rest * batch, "stop at %lld: %lld examples, expected %lld",
                  (long long)total, (long long)nex, (long long)(full + rest * batch));
        } else {
            CHECK(dup == 0 && miss == 0, "K=%d W=%d F=%d: %lld duplicates, %lld missing", nslots, W,
                  F, (long long)dup, (long long)miss);
        }
        /* tickets: dense 0..T-1, each once */
        int64_t T = ttot;
        char *tk = calloc((size_t)T + 1, 1);
        int bad = 0;
        for (int i = 0; i < ttot; i++) {
            if (allt[i] < 0 || allt[i] >= T || tk[allt[i]])
                bad++;
            else
                tk[allt[i]] = 1;
        }
        CHECK(bad == 0, "tickets not dense/unique (%d bad of %lld)", bad, (long long)T);
        if (move) /* the data tickets: exactly those below the total */
            CHECK(T == total, "moving on: %lld data tickets, total %lld", (long long)T,
                  (long long)total);
        free(tk);
        free(owner);
        free(seen);
        fprintf(stderr, "K=%d W=%d F=%d%s%s (total %lld): %lld tickets, exactly once OK=%d\n",
                nslots, W, F, stop ? " stop" : "",
                mode == ATTACH_NEXT   ? " local(next)"
                : mode == ATTACH_LAST ? " local(last)"
                : move                ? " local(move on)"
                                      : "",
                (long long)total, (long long)T, dup == 0 && miss == 0);
    }
    free(all), free(allt), free(counts), free(displs), free(tcounts), free(tdispls);
    free(log), free(tickets), free(attach);
    feed_free(f);
}

int main(int argc, char **argv)
{
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &prov);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        MPI_Finalize();
        CHECK_SKIP("needs mpirun -np >= 2");
    }
    int64_t n = argc > 1 ? atoll(argv[1]) : 1000;
    int batch = argc > 2 ? atoi(argv[2]) : 32;
    int epochs = argc > 3 ? atoi(argv[3]) : 2;
    int F = argc > 4 ? atoi(argv[4]) : 1;
    if (F < 1 || F > 8 || F >= size) {
        MPI_Finalize();
        CHECK_SKIP("needs 1 <= feeders <= 8 and fewer than the ranks");
    }
    run(1, n, batch, epochs, F, false, ATTACH_NONE);
    run(8, n, batch, epochs, F, false, ATTACH_NONE);
    run(1, n, batch, epochs, F, true, ATTACH_NONE);
    if (F > 1) {
        run(1, n, batch, epochs, F, false, ATTACH_NEXT);
        run(8, n, batch, epochs, F, false, ATTACH_NEXT);
        run(8, n, batch, epochs, F, false, ATTACH_LAST);
        run(1, n, batch, epochs, F, true, ATTACH_NEXT);
        run(2, n, batch, epochs, F, true, ATTACH_LAST);
        run(1, n, batch, epochs, F, false, ATTACH_MOVE);
        run(8, n, batch, epochs, F, false, ATTACH_MOVE);
        run(1, n, batch, epochs, F, true, ATTACH_MOVE);
        run(2, n, batch, epochs, F, true, ATTACH_MOVE);
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int fails = check_failures_, all = 0;
    MPI_Reduce(&fails, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0) check_failures_ = all;
    return rank == 0 ? check_exit() : (fails ? 1 : 0);
}
