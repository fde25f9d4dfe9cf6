/* test_pipe_encoded.c - the input pipeline on encoded (JPEG) data sets and
 * with the recipes on pixels: every example exactly once per epoch, the same
 * batches for 1, 2, 3 prep threads, preloaded or streamed, and after a
 * resume; the evaluation transform equals aug_from_jpeg/aug_from_pixels on
 * the stored example; the memory budget (too small: one-line error; no
 * preload when the split does not fit; the automatic shuffle buffer
 * shrinks); deflated pixels read chunk by chunk (H5Dread_chunk, inflated
 * outside the HDF5 lock) equal H5Dread's pixels, with Fletcher-32, with
 * chunks stored uncompressed, and a corrupt chunk is an error. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "h5test.h"
#include "pipe_check.h"
#include "h5write.h"
#include "pstrain/augment.h"
#include "pstrain/jpeg.h"
#include "pstrain/pipeline.h"

enum { N = 203, K = 5, C = 3, OH = 24, OW = 20, CHUNK_BYTES = 4096 };

static const char *const class_names[K] = {"a", "b", "c", "d", "e"};

static int img_h(int64_t i)
{
    return 17 + (int)(i % 7) * 9;
}

static int img_w(int64_t i)
{
    return 15 + (int)(i % 5) * 11;
}

/* A smooth pattern with some texture, different for every example. */
static void img_px(int64_t i, int h, int w, uint8_t *px)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < C; c++)
                px[((size_t)y * w + x) * C + c] =
                    (uint8_t)((i * 13 + y * (3 + c) + x * (5 - c) + ((x * y) % 7) * 9) & 255);
}

/* An encoded data set: a train split of n JPEGs of varying sizes. */
static int write_encoded(const char *path, int64_t n, pst_err *e)
{
    h5w_opts o = {.storage = H5DS_STORE_ENCODED,
                  .channels = C,
                  .num_classes = K,
                  .class_names = class_names,
                  .encoded_chunk_bytes = CHUNK_BYTES,
                  .compression = 1,
                  .force = true,
                  .source = "test_pipe_encoded"};
    h5w *w = NULL;
    if (h5w_create(&w, path, &o, e) < 0) return -1;
    uint8_t *px = malloc((size_t)img_h(6) * img_w(4) * C + 64 * 64 * C);
    int rc = h5w_split_begin(w, "train", n, e);
    for (int64_t i = 0; i < n && rc == 0; i++) {
        const int h = img_h(i), wd = img_w(i);
        img_px(i, h, wd, px);
        uint8_t *jpg = NULL;
        size_t len = 0;
        rc = jpg_encode(px, wd, h, C, 90, &jpg, &len, e);
        if (rc == 0)
            rc = h5w_split_append_encoded(w, jpg, len, h, wd, (int32_t)(i % K), px, (int64_t)h * wd,
                                          e);
        free(jpg);
    }
    if (rc == 0) rc = h5w_split_end(w, e);
    free(px);
    if (rc < 0) {
        h5w_abort(w);
        return -1;
    }
    return h5w_commit(w, e);
}

/* A pixels data set through h5w: random (incompressible) images in some
 * chunks, which h5w stores without deflate (the filter mask says so). */
static int write_pixels_h5w(const char *path, int64_t n, int H, int W, pst_err *e)
{
    h5w_opts o = {.height = H,
                  .width = W,
                  .channels = C,
                  .num_classes = K,
                  .class_names = class_names,
                  .chunk_images = 8,
                  .compression = 6,
                  .force = true,
                  .threads = 2,
                  .source = "test_pipe_encoded"};
    h5w *w = NULL;
    if (h5w_create(&w, path, &o, e) < 0) return -1;
    const size_t img = (size_t)H * W * C;
    uint8_t *px = malloc(img);
    uint64_t s = 7;
    int rc = h5w_split_begin(w, "train", n, e);
    for (int64_t i = 0; i < n && rc == 0; i++) {
        if ((i / 8) % 2)
            for (size_t j = 0; j < img; j++) px[j] = (uint8_t)(pst_splitmix64(&s) >> 56);
        else
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int c = 0; c < C; c++)
                        px[((size_t)y * W + x) * C + c] = h5test_pixel(i, y, x, c);
        int32_t lab = (int32_t)(i % K);
        rc = h5w_split_append(w, px, &lab, 1, e);
    }
    if (rc == 0) rc = h5w_split_end(w, e);
    free(px);
    if (rc < 0) {
        h5w_abort(w);
        return -1;
    }
    return h5w_commit(w, e);
}

typedef struct run {
    pipe_ex *v;
    int64_t n, cap;
    pipe_info info;
    uint8_t *first_px; /* the output image of each id's first appearance (n_ids x out) */
} run;

static void run_free(run *r)
{
    free(r->v);
    free(r->first_px);
    memset(r, 0, sizeof *r);
}

/* Runs the pipeline to its end; checks batch structure, labels and exactly
 * once per epoch; records every example. -1 when pipe_new fails (message in
 * e). */
static int collect(h5ds *ds, const pipe_cfg *c, run *r, const char *what, pst_err *e)
{
    pipeline *p;
    memset(r, 0, sizeof *r);
    if (pipe_new(&p, ds, c, e) < 0) return -1;
    pipe_get_info(p, &r->info);
    const int64_t n = pipe_examples_per_epoch(p), bpe = pipe_batches_per_epoch(p);
    const size_t out = (size_t)r->info.out_h * r->info.out_w * r->info.channels;
    r->first_px = calloc((size_t)n, out);
    unsigned char *got = calloc((size_t)n, 1);
    pipe_batch b;
    int rc, in_epoch = 0, prev = c->first_epoch, bad = 0;
    while ((rc = pipe_next(p, &b, e)) == 1) {
        if (b.epoch != prev) {
            CHECK(in_epoch == bpe, "%s: epoch %d had %d batches, want %lld", what, prev, in_epoch,
                  (long long)bpe);
            prev = b.epoch;
            in_epoch = 0;
        }
        in_epoch++;
        for (int i = 0; i < b.count; i++) {
            const int64_t id = b.ids[i];
            if (id < 0 || id >= n || b.labels[i] != id % K) {
                if (bad++ < 5) CHECK(0, "%s: id %lld label %d", what, (long long)id, b.labels[i]);
                continue;
            }
            const uint8_t *px = b.pixels + (size_t)i * out;
            if (!got[id]++) memcpy(r->first_px + (size_t)id * out, px, out);
            if (r->n == r->cap) {
                r->cap = r->cap ? 2 * r->cap : 1024;
                r->v = realloc(r->v, sizeof *r->v * (size_t)r->cap);
            }
            r->v[r->n++] = (pipe_ex){b.epoch, b.index, id, fnv(px, out)};
        }
    }
    pst_err e2;
    CHECK(rc == 0, "%s: pipe_next returned %d (%s)", what, rc, rc < 0 ? e->msg : "");
    CHECK(pipe_next(p, &b, &e2) == 0, "%s: pipe_next after the end", what);
    pipe_free(p);
    free(got);
    check_once_per_epoch(what, r->v, r->n, n, c->first_epoch, c->epochs);
    return rc < 0 ? -1 : 0;
}

/* The examples of epochs [from, to) of a and b are the same, in the same
 * order, with the same pixels. */
static bool same_epochs(const run *a, const run *b, int from, int to)
{
    int64_t i = 0, j = 0;
    for (;;) {
        while (i < a->n && (a->v[i].epoch < from || a->v[i].epoch >= to)) i++;
        while (j < b->n && (b->v[j].epoch < from || b->v[j].epoch >= to)) j++;
        if (i == a->n || j == b->n) return i == a->n && j == b->n;
        if (a->v[i].epoch != b->v[j].epoch || a->v[i].id != b->v[j].id ||
            a->v[i].hash != b->v[j].hash)
            return false;
        i++, j++;
    }
}

static pipe_cfg enc_cfg(void)
{
    pipe_cfg c = pipe_cfg_defaults();
    c.batch = 16;
    c.epochs = 2;
    c.seed = 5;
    c.queue_capacity = 40;
    c.min_after_dequeue = 10;
    c.recipe = AUG_INCEPTION;
    c.out_h = OH;
    c.out_w = OW;
    return c;
}

/* Threads, preload, stream, resume: all the same batches. */
static void test_encoded_determinism(h5ds *ds)
{
    pst_err e;
    run ref, r;
    pipe_cfg c = enc_cfg();
    c.prep_threads = 1;
    c.preload_bytes = 0;
    CHECK(collect(ds, &c, &ref, "encoded, 1 thread, streamed", &e) == 0, "%s", e.msg);
    CHECK(!ref.info.preloaded && ref.info.out_h == OH && ref.info.out_w == OW &&
              ref.info.channels == C,
          "stream info: preloaded %d, %dx%dx%d", ref.info.preloaded, ref.info.out_h, ref.info.out_w,
          ref.info.channels);
    for (int t = 1; t <= 3; t++)
        for (int pre = 0; pre < 2; pre++) {
            if (t == 1 && !pre) continue;
            char what[96];
            snprintf(what, sizeof what, "encoded, %d threads, %s", t,
                     pre ? "preloaded" : "streamed");
            c.prep_threads = t;
            c.preload_bytes = pre ? (int64_t)1 << 30 : 0;
            CHECK(collect(ds, &c, &r, what, &e) == 0, "%s: %s", what, e.msg);
            CHECK(r.info.preloaded == pre, "%s: preloaded %d", what, r.info.preloaded);
            CHECK(same_epochs(&ref, &r, 0, 2), "%s: batches differ from 1 thread streamed", what);
            run_free(&r);
        }
    /* resume at epoch 1 of 3: epochs 1 and 2 as in an uninterrupted run */
    run full, resumed;
    c.epochs = 3;
    c.prep_threads = 2;
    CHECK(collect(ds, &c, &full, "3 epochs", &e) == 0, "%s", e.msg);
    c.first_epoch = 1;
    CHECK(collect(ds, &c, &resumed, "resumed at epoch 1", &e) == 0, "%s", e.msg);
    CHECK(same_epochs(&full, &resumed, 1, 3), "a resumed run differs from an uninterrupted one");
    CHECK(same_epochs(&ref, &full, 0, 2), "epochs 0-1 of a 3-epoch run differ");
    /* a different seed, a different stream; the training transform is random */
    c.first_epoch = 0;
    c.epochs = 2;
    c.seed = 6;
    CHECK(collect(ds, &c, &r, "seed 6", &e) == 0, "%s", e.msg);
    CHECK(!same_epochs(&ref, &r, 0, 2), "seed 6 gave seed 5's batches");
    run_free(&r);
    run_free(&full);
    run_free(&resumed);
    run_free(&ref);
}

/* The evaluation transform, unshuffled: file order, each output equal to
 * aug_from_jpeg on the stored bytes; AUG_RESIZE likewise. */
static void test_encoded_eval(h5ds *ds)
{
    const int recipes[] = {AUG_INCEPTION, AUG_RESNET, AUG_RESIZE};
    const size_t out = (size_t)OH * OW * C;
    int64_t off[N + 1];
    int32_t lab[N];
    uint8_t *bytes = NULL, *want = malloc(out);
    pst_err e;
    CHECK(h5ds_read_encoded(ds, "train", 0, N, off, NULL, 0, NULL, NULL, NULL, &e) == 0, "%s",
          e.msg);
    bytes = malloc((size_t)off[N]);
    CHECK(h5ds_read_encoded(ds, "train", 0, N, off, bytes, (size_t)off[N], lab, NULL, NULL, &e) ==
              0,
          "%s", e.msg);
    aug_scratch *s = aug_scratch_new();
    for (size_t ri = 0; ri < PST_ARRAY_LEN(recipes); ri++) {
        pipe_cfg c = enc_cfg();
        c.recipe = recipes[ri];
        c.shuffle = false;
        c.eval_transform = true;
        c.epochs = 1;
        c.prep_threads = 3;
        c.preload_bytes = 0;
        run r;
        CHECK(collect(ds, &c, &r, "eval transform", &e) == 0, "%s", e.msg);
        int64_t in_order = 0, equal = 0;
        for (int64_t i = 0; i < r.n; i++) in_order += r.v[i].id == i;
        for (int64_t i = 0; i < N; i++) {
            int rc = aug_from_jpeg(recipes[ri], false, 0, bytes + off[i],
                                   (size_t)(off[i + 1] - off[i]), C, OH, OW, want, s, &e);
            equal += rc == 0 && memcmp(want, r.first_px + (size_t)i * out, out) == 0;
        }
        CHECK(in_order == N, "recipe %d: eval pipeline out of file order (%lld of %d)", recipes[ri],
              (long long)in_order, N);
        CHECK(equal == N, "recipe %d: %lld of %d eval outputs equal aug_from_jpeg's", recipes[ri],
              (long long)equal, N);
        run_free(&r);
    }
    aug_scratch_free(s);
    free(bytes);
    free(want);
}

/* The memory budget: a budget below the streaming minimum is an error; one
 * that fits streaming but not the split streams (the same batches as a
 * preloaded run); an explicit shuffle buffer that does not fit is an
 * error; an automatic one shrinks. */
static void test_budget(h5ds *ds)
{
    pst_err e;
    run pre, r;
    pipe_cfg c = enc_cfg();
    c.preload_bytes = (int64_t)1 << 30;
    CHECK(collect(ds, &c, &pre, "preloaded", &e) == 0, "%s", e.msg);
    CHECK(pre.info.preloaded, "a small split with the default budget is not preloaded");
    /* the split's bytes plus everything else do not fit: stream */
    c.memory_budget = pre.info.planned - 1;
    CHECK(collect(ds, &c, &r, "budget below the preloaded plan", &e) == 0, "%s", e.msg);
    CHECK(!r.info.preloaded && r.info.planned <= c.memory_budget,
          "budget %lld: preloaded %d, planned %lld", (long long)c.memory_budget, r.info.preloaded,
          (long long)r.info.planned);
    CHECK(same_epochs(&pre, &r, 0, 2), "streaming within the budget changed the batches");
    const int64_t stream_plan = r.info.planned;
    run_free(&r);
    /* below the streaming minimum: one line naming the budget */
    c.memory_budget = 1 << 20;
    pipeline *p = NULL;
    CHECK(pipe_new(&p, ds, &c, &e) < 0 && !p, "a 1 MiB budget was accepted");
    CHECK(strstr(e.msg, "memory budget 1.0 MiB is too small") && !strchr(e.msg, '\n'),
          "message: %s", e.msg);
    /* an explicit shuffle buffer that does not fit */
    c.memory_budget = stream_plan;
    c.queue_capacity = N;
    c.min_after_dequeue = 0;
    CHECK(pipe_new(&p, ds, &c, &e) < 0, "a shuffle buffer over the budget was accepted");
    CHECK(strstr(e.msg, "--queue-capacity") != NULL, "message: %s", e.msg);
    /* the automatic buffer (the whole epoch here) shrinks to fit */
    c.queue_capacity = 0;
    c.min_after_dequeue = -1;
    CHECK(collect(ds, &c, &r, "automatic buffer, tight budget", &e) == 0, "%s", e.msg);
    CHECK(r.info.queue_capacity >= 1 && r.info.queue_capacity < N &&
              r.info.planned <= c.memory_budget,
          "automatic buffer %d of %d examples, planned %lld of %lld", r.info.queue_capacity, N,
          (long long)r.info.planned, (long long)c.memory_budget);
    run_free(&r);
    run_free(&pre);
}

/* Recipes and resizing on a pixels data set. */
static void test_pixels_recipes(h5ds *ds)
{
    pst_err e;
    const int H = ds->height, W = ds->width;
    const size_t img = (size_t)H * W * C, out = (size_t)OH * OW * C;
    /* resnet training: threads and preload do not matter */
    pipe_cfg c = enc_cfg();
    c.recipe = AUG_RESNET;
    c.prep_threads = 1;
    c.preload_bytes = 0;
    run ref, r;
    CHECK(collect(ds, &c, &ref, "pixels resnet, 1 thread", &e) == 0, "%s", e.msg);
    c.prep_threads = 3;
    c.preload_bytes = (int64_t)1 << 30;
    CHECK(collect(ds, &c, &r, "pixels resnet, 3 threads, preloaded", &e) == 0, "%s", e.msg);
    CHECK(same_epochs(&ref, &r, 0, 2), "pixels resnet: threads/preload changed the batches");
    run_free(&r);
    run_free(&ref);
    /* plain resize (no --augment) and inception's eval: aug_from_pixels */
    const int recipes[] = {AUG_RESIZE, AUG_INCEPTION};
    uint8_t *px = malloc(img), *want = malloc(out);
    aug_scratch *s = aug_scratch_new();
    for (size_t ri = 0; ri < PST_ARRAY_LEN(recipes); ri++) {
        c = enc_cfg();
        c.recipe = recipes[ri];
        c.eval_transform = recipes[ri] != AUG_RESIZE;
        c.epochs = 1;
        CHECK(collect(ds, &c, &r, "pixels resized", &e) == 0, "%s", e.msg);
        int64_t equal = 0;
        for (int64_t i = 0; i < ds->splits[0].count; i++) {
            h5ds_read(ds, "train", i, 1, px, NULL, &e);
            aug_from_pixels(recipes[ri], false, 0, px, H, W, C, OH, OW, want, s);
            equal += memcmp(want, r.first_px + (size_t)i * out, out) == 0;
        }
        CHECK(equal == ds->splits[0].count, "recipe %d on pixels: %lld of %lld outputs right",
              recipes[ri], (long long)equal, (long long)ds->splits[0].count);
        run_free(&r);
    }
    aug_scratch_free(s);
    free(px);
    free(want);
    /* crop,flip with another recipe is refused */
    c = enc_cfg();
    c.aug_crop = true;
    pipeline *p = NULL;
    CHECK(pipe_new(&p, ds, &c, &e) < 0 && strstr(e.msg, "crop,flip"), "crop,flip + inception: %s",
          e.msg);
}

/* Streams a pixels split (file order, no shuffling) and checks it against
 * h5ds_read (H5Dread) example by example. Returns whether the direct path
 * was used; *err receives pipe_next's failure (0: none). */
static bool stream_equals_h5dread(h5ds *ds, const char *what, int *failed, pst_err *e)
{
    const int64_t n = ds->splits[0].count;
    const size_t img = (size_t)ds->height * ds->width * ds->channels;
    pipe_cfg c = pipe_cfg_defaults();
    c.shuffle = false;
    c.preload_bytes = 0;
    c.batch = 7;
    c.prep_threads = 3;
    pipeline *p;
    *failed = 0;
    if (pipe_new(&p, ds, &c, e) < 0) {
        CHECK(0, "%s: %s", what, e->msg);
        return false;
    }
    pipe_info info;
    pipe_get_info(p, &info);
    uint8_t *want = malloc(img);
    int64_t equal = 0, seen = 0;
    pipe_batch b;
    int rc;
    while ((rc = pipe_next(p, &b, e)) == 1)
        for (int i = 0; i < b.count; i++, seen++) {
            pst_err e2;
            int32_t lab;
            h5ds_read(ds, "train", b.ids[i], 1, want, &lab, &e2);
            equal += b.ids[i] == seen && lab == b.labels[i] &&
                     memcmp(want, b.pixels + (size_t)i * img, img) == 0;
        }
    pipe_free(p);
    free(want);
    if (rc < 0) {
        *failed = 1;
    } else {
        CHECK(equal == n && seen == n, "%s: %lld of %lld streamed examples equal H5Dread's", what,
              (long long)equal, (long long)n);
    }
    return info.direct_chunks;
}

/* A pixels split with shuffle + deflate + Fletcher-32 (chunks of 16 images). */
static int write_fletcher(const char *path, int64_t n, int H, int W)
{
    *h5test_fletcher32() = true;
    int rc = h5test_write(path, n, 0, H, W, C, K, 16);
    *h5test_fletcher32() = false;
    return rc;
}

/* The file offset of the chunk of dataset `dset` whose first coordinate is
 * `first`, and its stored size. */
static int64_t chunk_address(const char *path, const char *dset, int64_t first, int64_t *stored)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    hsize_t off[4] = {(hsize_t)first, 0, 0, 0};
    haddr_t addr = HADDR_UNDEF;
    unsigned mask;
    hsize_t size = 0;
    hsize_t coords[4];
    hsize_t nchunks = 0;
    hid_t s = H5Dget_space(d);
    H5Dget_num_chunks(d, s, &nchunks);
    for (hsize_t i = 0; i < nchunks; i++)
        if (H5Dget_chunk_info(d, s, i, coords, &mask, &addr, &size) >= 0 && coords[0] == off[0])
            break;
    H5Sclose(s);
    H5Dclose(d);
    H5Fclose(f);
    *stored = (int64_t)size;
    return addr == HADDR_UNDEF ? -1 : (int64_t)addr;
}

static void test_direct_chunks(const char *dir)
{
    char path[4096];
    pst_err e;
    h5ds ds;
    int failed;
    /* shuffle + deflate + Fletcher-32 through the HDF5 API */
    snprintf(path, sizeof path, "%s/fletcher.h5", dir);
    CHECK(write_fletcher(path, 75, 9, 7) == 0, "writing %s", path);
    CHECK(h5ds_open(&ds, path, &e) == 0, "%s", e.msg);
    CHECK(stream_equals_h5dread(&ds, "shuffle+deflate+fletcher32", &failed, &e),
          "the direct chunk path was not taken");
    CHECK(!failed, "fletcher32 stream failed: %s", e.msg);
    h5ds_close(&ds);
    /* a flipped bit in a chunk's stored checksum (the deflated bytes are
     * intact, so only the Fletcher-32 check can catch it) */
    int64_t size = 0, addr = chunk_address(path, "train/images", 32, &size);
    CHECK(addr > 0 && size > 4, "chunk address %lld, size %lld", (long long)addr, (long long)size);
    int fd = open(path, O_RDWR);
    uint8_t byte;
    CHECK(fd >= 0 && pread(fd, &byte, 1, addr + size - 2) == 1, "reading the chunk");
    byte ^= 0x10;
    CHECK(pwrite(fd, &byte, 1, addr + size - 2) == 1, "damaging the chunk");
    close(fd);
    CHECK(h5ds_open(&ds, path, &e) == 0, "%s", e.msg);
    stream_equals_h5dread(&ds, "damaged chunk", &failed, &e);
    CHECK(failed && strstr(e.msg, "Fletcher-32") && strstr(e.msg, "/train/images") &&
              strstr(e.msg, "example 32") && !strchr(e.msg, '\n'),
          "damaged chunk: %s", failed ? e.msg : "no error");
    h5ds_close(&ds);
    /* h5w's pre-deflated chunks, some stored uncompressed (filter mask) */
    snprintf(path, sizeof path, "%s/h5w.h5", dir);
    CHECK(write_pixels_h5w(path, 61, 6, 5, &e) == 0, "%s", e.msg);
    CHECK(h5ds_open(&ds, path, &e) == 0, "%s", e.msg);
    CHECK(stream_equals_h5dread(&ds, "h5w, some chunks stored raw", &failed, &e),
          "the direct chunk path was not taken");
    CHECK(!failed, "h5w stream failed: %s", e.msg);
    h5ds_close(&ds);
}

/* A flipped bit in the second chunk of /train/encoded: streaming (direct
 * chunk reads, the checksum checked outside the HDF5 lock) reports it in
 * one line naming the dataset and the chunk. */
static void test_encoded_damage(const char *path)
{
    pst_err e;
    int64_t size = 0, addr = chunk_address(path, "train/encoded", CHUNK_BYTES, &size);
    CHECK(addr > 0 && size > 100, "chunk address %lld, size %lld", (long long)addr,
          (long long)size);
    int fd = open(path, O_RDWR);
    uint8_t byte = 0;
    CHECK(fd >= 0 && pread(fd, &byte, 1, addr + 77) == 1, "reading the chunk");
    byte ^= 0x04;
    CHECK(pwrite(fd, &byte, 1, addr + 77) == 1, "damaging the chunk");
    close(fd);
    h5ds ds;
    CHECK(h5ds_open(&ds, path, &e) == 0, "%s", e.msg);
    pipe_cfg c = enc_cfg();
    c.preload_bytes = 0;
    c.epochs = 1;
    pipeline *p = NULL;
    int rc = pipe_new(&p, &ds, &c, &e);
    pipe_batch b;
    while (rc == 0 && (rc = pipe_next(p, &b, &e)) == 1) rc = 0;
    pipe_free(p);
    CHECK(rc < 0 && strstr(e.msg, "/train/encoded: chunk at byte") &&
              strstr(e.msg, "Fletcher-32") && !strchr(e.msg, '\n'),
          "damaged encoded chunk: %s", rc < 0 ? e.msg : "no error");
    h5ds_close(&ds);
}

int main(void)
{
    char dir[] = "/tmp/pst_pipe_enc_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char path[4096];
    pst_err e;
    h5ds ds;

    snprintf(path, sizeof path, "%s/enc.h5", dir);
    CHECK(write_encoded(path, N, &e) == 0, "writing %s: %s", path, e.msg);
    CHECK(h5ds_open(&ds, path, &e) == 0, "%s", e.msg);
    if (check_failures_) return check_exit();
    CHECK(ds.storage == H5DS_STORE_ENCODED, "storage %d", ds.storage);
    {
        pipe_cfg c = enc_cfg();
        c.out_h = c.out_w = 0;
        pipeline *p = NULL;
        CHECK(pipe_new(&p, &ds, &c, &e) < 0 && strstr(e.msg, "--image-size"),
              "encoded without an output size: %s", e.msg);
    }
    test_encoded_determinism(&ds);
    test_encoded_eval(&ds);
    test_budget(&ds);
    h5ds_close(&ds);
    test_encoded_damage(path);
    unlink(path);

    snprintf(path, sizeof path, "%s/px.h5", dir);
    CHECK(h5test_write(path, 101, 0, 30, 26, C, K, 16) == 0, "writing %s", path);
    CHECK(h5ds_open(&ds, path, &e) == 0, "%s", e.msg);
    test_pixels_recipes(&ds);
    h5ds_close(&ds);
    unlink(path);

    test_direct_chunks(dir);
    snprintf(path, sizeof path, "%s/fletcher.h5", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/h5w.h5", dir);
    unlink(path);
    rmdir(dir);
    return check_exit();
}
