/* test_pipeline.c - the input pipeline: every example exactly once per epoch
 * (thread counts, buffer sizes incl. capacity 1 and > epoch, preload and
 * streaming, sizes not multiple of chunk or batch, limit), identical batches
 * for the same seed whatever the threads / preload, a different order for a
 * different seed, resume at an epoch, file order without shuffling, bad
 * configurations, pipe_free mid-epoch, the data set lock, and batches
 * without pixels (a feeder's share, a resumed run's skipped batches). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "h5test.h"
#include "pipe_check.h"
#include "pstrain/pipeline.h"

/* A failed check inside collect() that also counts towards its early stop. */
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        bad++;                                                                                     \
        CHECK(0, __VA_ARGS__);                                                                     \
    } while (0)

enum { H = 8, W = 8, C = 1, K = 10, N = 1037, CHUNK = 100, NTEST = 150 };

typedef struct run {
    pipe_ex *v;
    int64_t n, cap, nbatches;
} run;

static void run_free(run *r)
{
    free(r->v);
    memset(r, 0, sizeof *r);
}

/* Runs the pipeline to its end and records every example; checks batch
 * structure, labels, pixels (when not augmented) and exactly-once per
 * epoch. `what` names the configuration in failure messages. */
static int collect(h5ds *ds, const pipe_cfg *c, run *r, const char *what)
{
    pst_err e;
    pipeline *p;
    memset(r, 0, sizeof *r);
    if (pipe_new(&p, ds, c, &e) < 0) {
        CHECK(0, "%s: pipe_new: %s", what, e.msg);
        return -1;
    }
    const int64_t n = pipe_examples_per_epoch(p), bpe = pipe_batches_per_epoch(p);
    const size_t img = (size_t)ds->height * ds->width * ds->channels;
    int64_t expect_n = c->limit > 0 && c->limit < N ? c->limit : N;
    CHECK(n == expect_n, "%s: examples per epoch %lld, want %lld", what, (long long)n,
          (long long)expect_n);
    CHECK(bpe == (n + c->batch - 1) / c->batch, "%s: batches per epoch %lld", what, (long long)bpe);
    uint8_t *want = malloc(img);
    int prev_epoch = c->first_epoch, in_epoch = 0, bad = 0;
    pipe_batch b;
    int rc;
    while ((rc = pipe_next(p, &b, &e)) == 1) {
        if (b.index != r->nbatches) FAIL("%s: batch index %lld", what, (long long)b.index);
        if (b.epoch != prev_epoch) {
            CHECK(b.epoch == prev_epoch + 1, "%s: epoch %d after %d", what, b.epoch, prev_epoch);
            CHECK(in_epoch == bpe, "%s: epoch %d had %d batches, want %lld", what, prev_epoch,
                  in_epoch, (long long)bpe);
            prev_epoch = b.epoch;
            in_epoch = 0;
        }
        in_epoch++;
        int want_count = in_epoch < bpe ? c->batch : (int)(n - (bpe - 1) * c->batch);
        if (b.count != want_count)
            FAIL("%s: batch %lld of epoch %d has %d examples, want %d", what, (long long)b.index,
                 b.epoch, b.count, want_count);
        for (int i = 0; i < b.count; i++) {
            const int64_t id = b.ids[i];
            const uint8_t *px = b.pixels + (size_t)i * img;
            if (id < 0 || id >= n) {
                FAIL("%s: id %lld out of range", what, (long long)id);
                continue;
            }
            if (b.labels[i] != id % K)
                FAIL("%s: id %lld label %d", what, (long long)id, b.labels[i]);
            if (!c->aug_crop && !c->aug_flip) {
                for (int y = 0; y < ds->height; y++)
                    for (int x = 0; x < ds->width; x++)
                        for (int ch = 0; ch < ds->channels; ch++)
                            want[((size_t)y * ds->width + x) * ds->channels + ch] =
                                h5test_pixel(id, y, x, ch);
                if (memcmp(px, want, img) != 0)
                    FAIL("%s: pixels of id %lld do not match", what, (long long)id);
            }
            if (r->n == r->cap) {
                r->cap = r->cap ? 2 * r->cap : 1024;
                r->v = realloc(r->v, sizeof *r->v * (size_t)r->cap);
            }
            r->v[r->n++] = (pipe_ex){b.epoch, b.index, id, fnv(px, img)};
        }
        r->nbatches++;
        if (bad > 10) break;
    }
    CHECK(rc == 0, "%s: pipe_next returned %d (%s)", what, rc, rc < 0 ? e.msg : "");
    CHECK(pipe_next(p, &b, &e) == 0, "%s: pipe_next after the end", what);
    pipe_free(p);
    free(want);
    check_once_per_epoch(what, r->v, r->n, n, c->first_epoch, c->epochs);
    return 0;
}

static bool same_run(const run *a, const run *b)
{
    if (a->n != b->n || a->nbatches != b->nbatches) return false;
    for (int64_t i = 0; i < a->n; i++)
        if (a->v[i].epoch != b->v[i].epoch || a->v[i].batch != b->v[i].batch ||
            a->v[i].id != b->v[i].id || a->v[i].hash != b->v[i].hash)
            return false;
    return true;
}

/* The ids of epoch `ep`, in order, into out (n of them). */
static void epoch_ids(const run *r, int ep, int64_t *out)
{
    int64_t k = 0;
    for (int64_t i = 0; i < r->n; i++)
        if (r->v[i].epoch == ep) out[k++] = r->v[i].id;
}

static int64_t count_in_order(const int64_t *ids, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += ids[i] == i;
    return k;
}

/* Exactly once and thread-count independence over buffer sizes, batch
 * sizes, preload and streaming. */
static void test_exactly_once_and_determinism(h5ds *ds)
{
    const int qs[][2] = {{1, 0}, {7, 3}, {100, 50}, {500, 499}, {5000, 100}};
    const int batches[] = {64, 1, 1037, 2000};
    const int threads[] = {1, 2, 4};
    char what[200];
    for (size_t qi = 0; qi < PST_ARRAY_LEN(qs); qi++)
        for (int preload = 0; preload < 2; preload++)
            for (int aug = 0; aug < 2; aug++) {
                int batch = batches[(qi + preload) % PST_ARRAY_LEN(batches)];
                run ref = {0};
                for (size_t ti = 0; ti < PST_ARRAY_LEN(threads); ti++) {
                    pipe_cfg c = pipe_cfg_defaults();
                    c.batch = batch;
                    c.epochs = 2;
                    c.prep_threads = threads[ti];
                    c.queue_capacity = qs[qi][0];
                    c.min_after_dequeue = qs[qi][1];
                    c.seed = 99;
                    c.preload_bytes = preload ? (int64_t)1 << 30 : 0;
                    c.aug_crop = c.aug_flip = aug;
                    c.crop_pad = 2;
                    snprintf(what, sizeof what, "capacity %d min %d batch %d %s aug %d threads %d",
                             qs[qi][0], qs[qi][1], batch, preload ? "preload" : "streaming", aug,
                             threads[ti]);
                    run r;
                    collect(ds, &c, &r, what);
                    if (ti == 0)
                        ref = r;
                    else {
                        CHECK(same_run(&ref, &r), "%s: batches differ from 1 thread", what);
                        run_free(&r);
                    }
                }
                /* preload and streaming give the same batches */
                pipe_cfg c = pipe_cfg_defaults();
                c.batch = batch;
                c.epochs = 2;
                c.queue_capacity = qs[qi][0];
                c.min_after_dequeue = qs[qi][1];
                c.seed = 99;
                c.preload_bytes = preload ? 0 : (int64_t)1 << 30;
                c.aug_crop = c.aug_flip = aug;
                c.crop_pad = 2;
                run r;
                snprintf(what, sizeof what, "capacity %d aug %d %s", qs[qi][0], aug,
                         preload ? "streaming" : "preload");
                collect(ds, &c, &r, what);
                CHECK(same_run(&ref, &r), "%s: differs from the other read path", what);
                run_free(&r);
                run_free(&ref);
            }
}

/* One batch as a run handed it out, for test_shares. */
typedef struct brec {
    int64_t index;
    int count;
    bool has_pixels;
    uint64_t ids, labels, pixels; /* hashes */
} brec;

/* Runs the pipeline to its end; the batches into *out (their number is
 * returned, -1 on failure), the examples prepared into *prepared. */
static int64_t collect_batches(h5ds *ds, const pipe_cfg *c, brec **out, int64_t *prepared)
{
    pst_err e;
    pipeline *p;
    *out = NULL;
    if (pipe_new(&p, ds, c, &e) < 0) {
        CHECK(0, "pipe_new: %s", e.msg);
        return -1;
    }
    const size_t img = (size_t)ds->height * ds->width * ds->channels;
    int64_t n = 0, cap = 0;
    pipe_batch b;
    int rc;
    while ((rc = pipe_next(p, &b, &e)) == 1) {
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            *out = realloc(*out, sizeof **out * (size_t)cap);
        }
        (*out)[n++] = (brec){b.index,
                             b.count,
                             b.has_pixels,
                             fnv((const uint8_t *)b.ids, sizeof *b.ids * b.count),
                             fnv((const uint8_t *)b.labels, sizeof *b.labels * b.count),
                             b.has_pixels ? fnv(b.pixels, img * b.count) : 0};
    }
    CHECK(rc == 0, "pipe_next returned %d (%s)", rc, rc < 0 ? e.msg : "");
    *prepared = pipe_examples_prepared(p);
    pipe_free(p);
    return n;
}

/* Spans (share_span, as lockstep feeders use them): positions c .. c+w-1 of
 * every 5 batches for w = 2, 0, 3 keep exactly those batches, together all. */
static void test_spans(h5ds *ds, const pipe_cfg *c, const brec *ref, int64_t nref, int64_t ref_prep)
{
    const int spans[] = {2, 0, 3};
    int64_t sum = 0;
    for (int k = 0, c0 = 0; k < 3; c0 += spans[k++]) {
        pipe_cfg s = *c;
        s.share_count = 5, s.share_index = c0, s.share_span = spans[k];
        brec *got;
        int64_t prep, ngot = collect_batches(ds, &s, &got, &prep), want = 0;
        CHECK(ngot == nref, "span %d at %d: %lld batches, want %lld", spans[k], c0, (long long)ngot,
              (long long)nref);
        for (int64_t i = 0; i < ngot && i < nref; i++) {
            const bool kept = ((i - c0) % 5 + 5) % 5 < spans[k];
            want += kept ? ref[i].count : 0;
            CHECK(got[i].has_pixels == kept && (!kept || got[i].pixels == ref[i].pixels),
                  "span %d at %d: batch %lld differs", spans[k], c0, (long long)i);
        }
        CHECK(prep == want, "span %d at %d: prepared %lld, want %lld", spans[k], c0,
              (long long)prep, (long long)want);
        sum += prep;
        free(got);
    }
    CHECK(sum == ref_prep, "spans prepared %lld together, want %lld", (long long)sum,
          (long long)ref_prep);
}

/* Batches without pixels (skip_batches, share_count/index): the same
 * batches as the full run (ids, labels; pixels where kept), pixels exactly
 * for the kept batches, and only their examples prepared: the shares of F
 * feeders together prepare what one full run does. */
static void test_shares(h5ds *ds)
{
    const int qs[][2] = {{1, 0}, {100, 50}, {5000, 100}, {0, -1}};
    for (size_t qi = 0; qi < PST_ARRAY_LEN(qs) + 1; qi++)
        for (int first = 0; first < 2; first++) {
            const bool shuffle = qi < PST_ARRAY_LEN(qs);
            pipe_cfg c = pipe_cfg_defaults();
            c.batch = 48;
            c.epochs = 3;
            c.first_epoch = first;
            c.seed = 7;
            c.shuffle = shuffle;
            c.queue_capacity = shuffle ? qs[qi][0] : 0;
            c.min_after_dequeue = shuffle ? qs[qi][1] : -1;
            c.preload_bytes = qi % 2 ? (int64_t)1 << 30 : 0;
            c.aug_crop = c.aug_flip = true;
            c.crop_pad = 2;
            brec *ref;
            int64_t ref_prep, nref = collect_batches(ds, &c, &ref, &ref_prep);
            CHECK(ref_prep == (3 - first) * (int64_t)N, "full run prepared %lld",
                  (long long)ref_prep);
            for (int F = 1; F <= 3; F++) {
                int64_t sum = 0;
                for (int k = 0; k < F; k++)
                    for (int skip = 0; skip < 2; skip++) {
                        pipe_cfg s = c;
                        s.share_count = F, s.share_index = k, s.share_span = 1,
                        s.skip_batches = skip ? 25 : 0;
                        brec *got;
                        int64_t prep, ngot = collect_batches(ds, &s, &got, &prep), want = 0;
                        CHECK(ngot == nref, "queue %zu share %d/%d: %lld batches, want %lld", qi, k,
                              F, (long long)ngot, (long long)nref);
                        for (int64_t i = 0; i < ngot && i < nref; i++) {
                            const bool kept = i >= s.skip_batches && i % F == k;
                            want += kept ? ref[i].count : 0;
                            CHECK(got[i].index == i && got[i].count == ref[i].count &&
                                      got[i].ids == ref[i].ids && got[i].labels == ref[i].labels &&
                                      got[i].has_pixels == kept &&
                                      (!kept || got[i].pixels == ref[i].pixels),
                                  "queue %zu first epoch %d share %d/%d skip %lld: batch %lld "
                                  "differs",
                                  qi, first, k, F, (long long)s.skip_batches, (long long)i);
                        }
                        CHECK(prep == want, "share %d/%d skip %lld: prepared %lld, want %lld", k, F,
                              (long long)s.skip_batches, (long long)prep, (long long)want);
                        if (!skip) sum += prep;
                        free(got);
                    }
                CHECK(sum == ref_prep, "%d shares prepared %lld together, want %lld", F,
                      (long long)sum, (long long)ref_prep);
            }
            if (qi == 1) test_spans(ds, &c, ref, nref, ref_prep);
            free(ref);
        }
}

static void test_order(h5ds *ds)
{
    int64_t *a = malloc(sizeof(int64_t) * N), *b = malloc(sizeof(int64_t) * N);
    pipe_cfg c = pipe_cfg_defaults();
    c.batch = 32;
    c.epochs = 2;
    c.queue_capacity = 300;
    c.min_after_dequeue = 100;
    c.seed = 5;
    run r1, r2, r3;
    collect(ds, &c, &r1, "seed 5");
    c.seed = 6;
    collect(ds, &c, &r2, "seed 6");
    epoch_ids(&r1, 0, a);
    epoch_ids(&r2, 0, b);
    int64_t same = 0;
    for (int i = 0; i < N; i++) same += a[i] == b[i];
    CHECK(same < N / 10, "seeds 5 and 6 give %lld of %d ids at the same place", (long long)same, N);
    CHECK(count_in_order(a, N) < N / 10, "seed 5: %lld ids in file order",
          (long long)count_in_order(a, N));
    /* the next epoch is shuffled differently */
    epoch_ids(&r1, 1, b);
    same = 0;
    for (int i = 0; i < N; i++) same += a[i] == b[i];
    CHECK(same < N / 10, "epochs 0 and 1 share %lld positions", (long long)same);

    /* resume: epochs 1..2 started at first_epoch 1 equal those of a run from 0 */
    c.seed = 5;
    c.epochs = 3;
    run full;
    collect(ds, &c, &full, "seed 5, 3 epochs");
    c.first_epoch = 1;
    collect(ds, &c, &r3, "seed 5, resumed at epoch 1");
    for (int ep = 1; ep < 3; ep++) {
        epoch_ids(&full, ep, a);
        epoch_ids(&r3, ep, b);
        CHECK(memcmp(a, b, sizeof(int64_t) * N) == 0, "resumed epoch %d differs", ep);
    }
    CHECK(r3.n > 0 && r3.v[0].batch == 0 && r3.v[0].epoch == 1, "resumed run starts at batch 0 "
                                                                "of epoch 1");
    run_free(&full);
    run_free(&r3);

    /* capacity 1: no mixing across the stream, so the ids come in runs of
     * whole chunks in a shuffled chunk order */
    c.first_epoch = 0;
    c.epochs = 1;
    c.queue_capacity = 1;
    c.min_after_dequeue = 0;
    collect(ds, &c, &r3, "capacity 1");
    epoch_ids(&r3, 0, a);
    int64_t breaks = 0;
    for (int i = 1; i < N; i++) breaks += a[i] != a[i - 1] + 1;
    CHECK(breaks <= (N + CHUNK - 1) / CHUNK - 1, "capacity 1: %lld breaks in the id sequence",
          (long long)breaks);
    CHECK(a[0] % CHUNK == 0 && count_in_order(a, N) < N, "capacity 1: chunk order not shuffled");
    run_free(&r3);

    /* no shuffle: file order */
    c.shuffle = false;
    c.batch = 100;
    c.epochs = 2;
    c.preload_bytes = 0;
    collect(ds, &c, &r3, "no shuffle");
    epoch_ids(&r3, 1, a);
    CHECK(count_in_order(a, N) == N, "no shuffle: only %lld ids in file order",
          (long long)count_in_order(a, N));
    run_free(&r3);

    /* limit: only the first 333 examples */
    c.shuffle = true;
    c.limit = 333;
    c.batch = 50;
    collect(ds, &c, &r3, "limit 333 streaming");
    run_free(&r3);
    c.preload_bytes = 1 << 20;
    collect(ds, &c, &r3, "limit 333 preload");
    run_free(&r3);

    run_free(&r1);
    run_free(&r2);
    free(a);
    free(b);
}

/* The automatic queue (capacity 0, min -1) of a small data set is the whole
 * epoch: the same batches as capacity N, min N-1 - a full uniform shuffle -
 * and unlike the explicit small buffer of test_order. */
static void test_auto_queue(h5ds *ds)
{
    pipe_cfg c = pipe_cfg_defaults();
    CHECK(c.queue_capacity == 0 && c.min_after_dequeue == -1, "defaults are not automatic");
    c.batch = 50;
    c.epochs = 1;
    c.seed = 9;
    run a, b, d;
    collect(ds, &c, &a, "automatic queue");
    c.queue_capacity = N;
    c.min_after_dequeue = N - 1;
    collect(ds, &c, &b, "capacity N, min N-1");
    CHECK(same_run(&a, &b), "automatic queue differs from a whole-epoch buffer");
    c.queue_capacity = 64;
    c.min_after_dequeue = 8;
    collect(ds, &c, &d, "capacity 64");
    CHECK(!same_run(&a, &d), "a 64-example buffer gave the whole-epoch order");
    /* a whole-epoch buffer: the first batch draws from all over the epoch */
    int64_t lo = N, hi = 0;
    for (int64_t i = 0; i < a.n && a.v[i].batch == 0; i++) {
        lo = PST_MIN(lo, a.v[i].id);
        hi = PST_MAX(hi, a.v[i].id);
    }
    CHECK(hi - lo > N / 2, "first batch spans ids %lld..%lld only", (long long)lo, (long long)hi);
    run_free(&a);
    run_free(&b);
    run_free(&d);
}

static void test_bad_config(h5ds *ds)
{
    pst_err e;
    pipeline *p = (pipeline *)&e;
    pipe_cfg c = pipe_cfg_defaults();
    c.batch = 0;
    CHECK(pipe_new(&p, ds, &c, &e) == -1 && !p && strstr(e.msg, "batch"), "batch 0: %s", e.msg);
    c = pipe_cfg_defaults();
    c.queue_capacity = 10;
    c.min_after_dequeue = 10;
    CHECK(pipe_new(&p, ds, &c, &e) == -1 && strstr(e.msg, "min after dequeue"),
          "min >= capacity: %s", e.msg);
    c = pipe_cfg_defaults();
    c.prep_threads = 0;
    CHECK(pipe_new(&p, ds, &c, &e) == -1 && strstr(e.msg, "threads"), "0 threads: %s", e.msg);
    c = pipe_cfg_defaults();
    c.split = "val";
    CHECK(pipe_new(&p, ds, &c, &e) == -1 && strstr(e.msg, "val"), "missing split: %s", e.msg);
    pipe_free(NULL);
}

/* pipe_free at any point: right after pipe_new, mid-epoch, with the reader
 * blocked on a full ring, unbounded epochs. */
static void test_free_midway(h5ds *ds)
{
    pst_err e;
    for (int mode = 0; mode < 4; mode++)
        for (int take = 0; take < 40; take += 13) {
            pipe_cfg c = pipe_cfg_defaults();
            c.batch = 16;
            c.epochs = mode == 3 ? 0 : 2;
            c.prep_threads = 1 + mode;
            c.queue_capacity = 200;
            c.min_after_dequeue = 20;
            c.preload_bytes = mode & 1 ? 0 : 1 << 20;
            c.aug_flip = mode >= 2;
            pipeline *p;
            if (pipe_new(&p, ds, &c, &e) < 0) {
                CHECK(0, "pipe_new: %s", e.msg);
                continue;
            }
            pipe_batch b;
            int got = 0;
            for (int i = 0; i < take; i++) got += pipe_next(p, &b, &e) == 1;
            CHECK(got == take, "mode %d: %d of %d batches", mode, got, take);
            if (take == 26) usleep(20000); /* let the threads fill every buffer */
            pipe_free(p);
        }
    /* unbounded: runs past several epochs */
    pipe_cfg c = pipe_cfg_defaults();
    c.batch = 500;
    c.epochs = 0;
    c.limit = 100;
    pipeline *p;
    if (pipe_new(&p, ds, &c, &e) == 0) {
        pipe_batch b;
        int last_epoch = -1;
        for (int i = 0; i < 5; i++)
            if (pipe_next(p, &b, &e) == 1) last_epoch = b.epoch;
        CHECK(last_epoch == 4, "unbounded: batch 5 is from epoch %d, want 4", last_epoch);
        pipe_free(p);
    }
}

/* The caller may read the same h5ds (evaluation) while a streaming pipeline
 * runs: h5ds_read holds the HDF5 lock. */
static void test_ds_lock(h5ds *ds)
{
    pst_err e;
    pipe_cfg c = pipe_cfg_defaults();
    c.batch = 64;
    c.epochs = 3;
    c.preload_bytes = 0;
    pipeline *p;
    if (pipe_new(&p, ds, &c, &e) < 0) {
        CHECK(0, "pipe_new: %s", e.msg);
        return;
    }
    uint8_t *img = malloc((size_t)NTEST * H * W * C);
    int32_t *lab = malloc(sizeof(int32_t) * NTEST);
    pipe_batch b;
    int n = 0, bad = 0;
    while (pipe_next(p, &b, &e) == 1) {
        if (n++ % 8 == 0) {
            int rc = h5ds_read(ds, "test", 0, NTEST, img, lab, &e);
            bad +=
                rc < 0 || lab[NTEST - 1] != (NTEST - 1) % K || img[0] != h5test_pixel(0, 0, 0, 0);
        }
    }
    CHECK(bad == 0 && n == 3 * ((N + 63) / 64), "reads of the test split during streaming: %d bad",
          bad);
    pipe_free(p);
    free(img);
    free(lab);
}

int main(void)
{
    char dir[] = "/tmp/pst-pipe-XXXXXX", path[256];
    if (!mkdtemp(dir)) CHECK_SKIP("cannot create a temporary directory");
    snprintf(path, sizeof path, "%s/ds.h5", dir);
    CHECK(h5test_write(path, N, NTEST, H, W, C, K, CHUNK) == 0, "writing %s", path);
    h5ds ds;
    pst_err e;
    if (h5ds_open(&ds, path, &e) < 0) {
        CHECK(0, "h5ds_open: %s", e.msg);
        return check_exit();
    }
    CHECK(h5ds_find_split(&ds, "train")->chunk_images == CHUNK, "chunk size as written");
    test_auto_queue(&ds);
    test_bad_config(&ds);
    test_exactly_once_and_determinism(&ds);
    test_order(&ds);
    test_shares(&ds);
    test_free_midway(&ds);
    test_ds_lock(&ds);
    h5ds_close(&ds);
    unlink(path);
    rmdir(dir);
    return check_exit();
}
