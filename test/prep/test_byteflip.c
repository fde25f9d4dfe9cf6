/*
 * test_byteflip.c - a damaged byte in a data set or a checkpoint of the
 * current layout (format_version 2) gives a clean error or the original
 * contents, never a crash, a hang or different data.
 *
 * A small data set (written by pstrain-prep's writer), the same with encoded
 * storage (format_version 3: flipped payload bytes must fail their chunk's
 * Fletcher-32 checksum, never read back as other JPEG bytes) and a small
 * checkpoint are copied with one byte changed at every k-th offset (the changed bit
 * varies, every other offset all bits); each copy is checked: h5ds_verify +
 * h5ds_open + reading every split (h5ds_read_encoded for the encoded one:
 * bytes, offsets, labels, heights, widths), or ckpt_verify + ckpt_read, which must
 * give an error or exactly the original contents. A crash (SIGSEGV, ASan's
 * abort) or a hang (the alarm) ends the test with the offset printed. In
 * process, not forked per copy: a fork per copy made it 30 times slower.
 * Runs in the ASan build too (suite unit).
 *
 * BYTEFLIP_STRIDE=1 checks every byte (slow; for a fuller look).
 */
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "encoded_fixture.h"
#include "h5write.h"
#include "pstrain/ckpt.h"
#include "pstrain/h5ds.h"

enum { N_TRAIN = 40, N_TEST = 12, H = 6, W = 5, C = 1, K = 3, IMG = H * W * C };

/* How many flips per file at most (the stride follows from the size). */
#define FLIPS_PER_FILE 400

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz);
    if (fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static int spit(const char *path, const uint8_t *b, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    int rc = write(fd, b, n) == (ssize_t)n ? 0 : -1;
    close(fd);
    return rc;
}

/* ---- the data set -------------------------------------------------------- */

typedef struct ds_ref {
    int64_t n[2];
    uint8_t *px[2];
    int32_t *lab[2];
} ds_ref;

static const char *const g_classes[K] = {"cat", "dog", "wombat"};
static const char *const g_splits[2] = {"train", "test"};

static int write_dataset(const char *path, ds_ref *ref)
{
    h5w_opts o = {.height = H,
                  .width = W,
                  .channels = C,
                  .num_classes = K,
                  .class_names = g_classes,
                  .chunk_images = 8,
                  .compression = 1,
                  .force = true,
                  .threads = 1,
                  .source = "test_byteflip"};
    pst_err e;
    h5w *w;
    if (h5w_create(&w, path, &o, &e) < 0) return -1;
    for (int s = 0; s < 2; s++) {
        int64_t n = s ? N_TEST : N_TRAIN;
        ref->n[s] = n;
        ref->px[s] = malloc((size_t)n * IMG);
        ref->lab[s] = malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            ref->lab[s][i] = (int32_t)((i * 7 + s) % K);
            for (int j = 0; j < IMG; j++) ref->px[s][i * IMG + j] = (uint8_t)(i * 31 + j * 7 + s);
        }
        if (h5w_split_begin(w, g_splits[s], n, &e) < 0 ||
            h5w_split_append(w, ref->px[s], ref->lab[s], n, &e) < 0 || h5w_split_end(w, &e) < 0) {
            h5w_abort(w);
            return -1;
        }
    }
    return h5w_commit(w, &e);
}

/* Child: 0 = clean error or the original contents, 3 = different contents. */
static int check_dataset_copy(const char *path, const ds_ref *ref)
{
    pst_err e;
    h5ds_verify(path, NULL, NULL, &e);
    h5ds ds;
    if (h5ds_open(&ds, path, &e) < 0) return 0;
    int rc = 0;
    if (ds.format_version != 2 || ds.height != H || ds.width != W || ds.channels != C ||
        ds.num_classes != K || ds.nsplits != 2 || strcmp(ds.source, "test_byteflip"))
        rc = 3;
    for (int k = 0; rc == 0 && k < K; k++)
        if (strcmp(ds.class_names[k], g_classes[k])) rc = 3;
    uint8_t *px = malloc((size_t)N_TRAIN * IMG);
    int32_t *lab = malloc(sizeof(int32_t) * N_TRAIN);
    for (int s = 0; rc == 0 && s < 2; s++) {
        const h5ds_split *sp = h5ds_find_split(&ds, g_splits[s]);
        if (!sp || sp->count != ref->n[s]) {
            rc = 3;
            break;
        }
        if (h5ds_read(&ds, g_splits[s], 0, sp->count, px, lab, &e) < 0) break; /* clean */
        if (memcmp(px, ref->px[s], (size_t)sp->count * IMG) ||
            memcmp(lab, ref->lab[s], sizeof(int32_t) * (size_t)sp->count))
            rc = 3;
    }
    free(px);
    free(lab);
    h5ds_close(&ds);
    return rc;
}

/* ---- the encoded data set (encoded_fixture.h) ------------------------------ */

enum { ENC_NT = 30, ENC_NV = 8 };

/* Child: 0 = clean error or the original contents, 3 = different contents. */
static int check_encoded_copy(const char *path, const ds_ref *unused)
{
    (void)unused;
    pst_err e;
    h5ds_verify(path, NULL, NULL, &e);
    h5ds ds;
    if (h5ds_open(&ds, path, &e) < 0) return 0;
    int rc = 0;
    if (ds.format_version != 3 || ds.storage != H5DS_STORE_ENCODED || ds.height != 0 ||
        ds.width != 0 || ds.channels != ENC_C || ds.num_classes != ENC_K || ds.nsplits != 2 ||
        strcmp(ds.source, "encoded fixture"))
        rc = 3;
    for (int k = 0; rc == 0 && k < ENC_K; k++)
        if (strcmp(ds.class_names[k], enc_classes[k])) rc = 3;
    static const char *const names[2] = {"train", "val"};
    const int64_t counts[2] = {ENC_NT, ENC_NV};
    int64_t off[ENC_NT + 1];
    int32_t lab[ENC_NT], hh[ENC_NT], ww[ENC_NT];
    size_t cap = 16 * ENC_CHUNK * ENC_NT;
    uint8_t *bytes = malloc(cap);
    for (int s = 0; rc == 0 && s < 2; s++) {
        const h5ds_split *sp = h5ds_find_split(&ds, names[s]);
        if (!sp || sp->count != counts[s]) {
            rc = 3;
            break;
        }
        if (h5ds_read_encoded(&ds, names[s], 0, sp->count, off, bytes, cap, lab, hh, ww, &e) < 0)
            break; /* clean */
        int64_t at = 0;
        for (int64_t i = 0; rc == 0 && i < sp->count; i++) {
            size_t n = enc_len(s, i);
            if (off[i] != at || lab[i] != i % ENC_K || hh[i] != enc_height(i) ||
                ww[i] != enc_width(i))
                rc = 3;
            for (size_t j = 0; rc == 0 && j < n; j++)
                if (bytes[at + (int64_t)j] != enc_byte(s, i, j)) rc = 3;
            at += (int64_t)n;
        }
        if (off[sp->count] != at) rc = 3;
    }
    free(bytes);
    h5ds_close(&ds);
    return rc;
}

/* ---- the checkpoint ------------------------------------------------------ */

static nn_var g_vars[3] = {
    {.name = "conv1/kernel", .ndim = 4, .shape = {3, 3, 1, 4}, .trainable = true},
    {.name = "conv1/bias", .ndim = 1, .shape = {4}, .trainable = true},
    {.name = "bn/moving_mean", .ndim = 1, .shape = {4}, .trainable = false},
};
static size_t g_total;
static const char *g_model_text = "conv1 [3x3x1x4]\nbn\ntotal 44 parameters\n";

static ckpt_meta ckpt_ref_meta(void)
{
    ckpt_meta m = {0};
    m.model_name = "toy";
    m.model_text = g_model_text;
    m.height = H;
    m.width = W;
    m.channels = C;
    m.num_classes = K;
    m.global_step = 120;
    m.epoch = 2;
    m.epoch_batch = 5;
    m.next_batch = 125;
    m.examples = 125 * 8;
    m.seed = 99;
    m.mode = "sync";
    m.workers = 1;
    m.batch = 8;
    m.opt = opt_defaults(OPT_MOMENTUM);
    m.lr = (lr_schedule){.base = 0.01f, .decay = 1, .decay_epochs = 0, .steps_per_epoch = 5};
    return m;
}

static ckpt_expect ckpt_ref_expect(void)
{
    return (ckpt_expect){.model_name = "toy",
                         .height = H,
                         .width = W,
                         .channels = C,
                         .num_classes = K,
                         .vars = g_vars,
                         .nvars = 3,
                         .check_opt = true,
                         .opt_kind = OPT_MOMENTUM};
}

static void fill(float *p, size_t n, float base)
{
    for (size_t i = 0; i < n; i++) p[i] = base + (float)i * 0.25f;
}

static int check_ckpt_copy(const char *path)
{
    pst_err e;
    ckpt_verify(path, &e);
    float *p = calloc(g_total, sizeof(float)), *s = calloc(g_total, sizeof(float));
    float *rp = malloc(g_total * sizeof(float)), *rs = malloc(g_total * sizeof(float));
    fill(rp, g_total, 1.0f);
    fill(rs, g_total, -3.0f);
    ckpt_expect x = ckpt_ref_expect();
    ckpt_meta m, want = ckpt_ref_meta();
    int rc = 0;
    if (ckpt_read(path, &x, p, s, g_total, &m, &e) == 0) {
        /* the non-trainable variable has no slot */
        size_t nslot = g_total - g_vars[2].size;
        if (memcmp(p, rp, g_total * sizeof(float)) || memcmp(s, rs, nslot * sizeof(float)) ||
            strcmp(m.model_text, want.model_text) || strcmp(m.model_name, want.model_name) ||
            strcmp(m.mode, want.mode) || m.global_step != want.global_step ||
            m.epoch != want.epoch || m.examples != want.examples || m.seed != want.seed ||
            m.format_version != CKPT_FORMAT_VERSION)
            rc = 3;
        ckpt_meta_free(&m);
    }
    free(p);
    free(s);
    free(rp);
    free(rs);
    return rc;
}

/* ---- flipping ------------------------------------------------------------ */

typedef int (*check_fn)(const char *path, const ds_ref *ref);

static int ckpt_check_adapter(const char *path, const ds_ref *ref)
{
    (void)ref;
    return check_ckpt_copy(path);
}

/* What is being checked, for the crash handler. */
static char g_current[160];

static void on_fatal(int sig)
{
    static const char msg[] = "test_byteflip: crashed or hung while checking ";
    if (write(2, msg, sizeof msg - 1) < 0 || write(2, g_current, strlen(g_current)) < 0 ||
        write(2, "\n", 1) < 0) {
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Checks copies of `orig` with one byte changed at every stride-th offset.
 * Returns the number of offsets that read back different contents. */
static int flip_all(const char *what, const char *orig, const char *copy, check_fn fn,
                    const ds_ref *ref)
{
    size_t n;
    uint8_t *b = slurp(orig, &n);
    if (!b) {
        CHECK(0, "cannot read %s", orig);
        return 1;
    }
    size_t stride = n / FLIPS_PER_FILE + 1;
    const char *env = getenv("BYTEFLIP_STRIDE");
    if (env && atoi(env) > 0) stride = (size_t)atoi(env);
    int bad = 0, flips = 0;
    for (size_t off = 0; off < n; off += stride) {
        uint8_t mask = (off / stride) % 2 ? 0xFF : (uint8_t)(1u << (off / stride / 2 % 8));
        b[off] ^= mask;
        int wrc = spit(copy, b, n);
        b[off] ^= mask;
        if (wrc < 0) {
            CHECK(0, "cannot write %s", copy);
            break;
        }
        snprintf(g_current, sizeof g_current, "%s byte %zu ^ 0x%02x", what, off, mask);
        alarm(20); /* a hang is a failure too */
        int rc = fn(copy, ref);
        alarm(0);
        flips++;
        if (rc == 0) continue;
        fprintf(stderr, "%s: byte %zu ^ 0x%02x: read back different contents\n", what, off, mask);
        bad++;
    }
    fprintf(stderr, "%s: %zu bytes, %d flips (every %zu-th byte), %d failed\n", what, n, flips,
            stride, bad);
    free(b);
    return bad;
}

int main(void)
{
    char dir[] = "/tmp/pst-flip-XXXXXX", ds_path[256], ds_copy[256], ck_path[256], ck_copy[256];
    char enc_path[256], enc_copy[256];
    if (!mkdtemp(dir)) CHECK_SKIP("cannot create a temporary directory");
    snprintf(ds_path, sizeof ds_path, "%s/ds.h5", dir);
    snprintf(ds_copy, sizeof ds_copy, "%s/flipped.h5", dir);
    snprintf(ck_path, sizeof ck_path, "%s/ckpt.h5", dir);
    snprintf(ck_copy, sizeof ck_copy, "%s/flipped-ckpt.h5", dir);
    snprintf(enc_path, sizeof enc_path, "%s/enc.h5", dir);
    snprintf(enc_copy, sizeof enc_copy, "%s/flipped-enc.h5", dir);

    signal(SIGSEGV, on_fatal);
    signal(SIGBUS, on_fatal);
    signal(SIGABRT, on_fatal);
    signal(SIGALRM, on_fatal);
    signal(SIGFPE, on_fatal);
    ds_ref ref;
    memset(&ref, 0, sizeof ref);
    CHECK(write_dataset(ds_path, &ref) == 0, "writing %s", ds_path);
    CHECK(check_dataset_copy(ds_path, &ref) == 0, "the undamaged data set reads back wrong");
    pst_err ee = {""};
    CHECK(enc_write(enc_path, ENC_NT, ENC_NV, &ee) == 0, "writing %s: %s", enc_path, ee.msg);
    CHECK(check_encoded_copy(enc_path, NULL) == 0, "the undamaged encoded set reads back wrong");

    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        g_vars[i].size = 1;
        for (int d = 0; d < g_vars[i].ndim; d++) g_vars[i].size *= (size_t)g_vars[i].shape[d];
        g_vars[i].offset = off;
        off += g_vars[i].size;
    }
    g_total = off;
    float *p = malloc(g_total * sizeof(float)), *s = malloc(g_total * sizeof(float));
    fill(p, g_total, 1.0f);
    fill(s, g_total, -3.0f);
    ckpt_meta m = ckpt_ref_meta();
    pst_err e = {""};
    CHECK(ckpt_write(ck_path, &m, g_vars, 3, p, s, g_total, &e) == 0, "ckpt_write: %s", e.msg);
    free(p);
    free(s);
    CHECK(check_ckpt_copy(ck_path) == 0, "the undamaged checkpoint reads back wrong");

    if (check_failures_ == 0) {
        CHECK(flip_all("data set", ds_path, ds_copy, check_dataset_copy, &ref) == 0,
              "data set: damaged copies crashed or read back wrong (see above)");
        CHECK(flip_all("encoded data set", enc_path, enc_copy, check_encoded_copy, NULL) == 0,
              "encoded data set: damaged copies crashed or read back wrong (see above)");
        CHECK(flip_all("checkpoint", ck_path, ck_copy, ckpt_check_adapter, NULL) == 0,
              "checkpoint: damaged copies crashed or read back wrong (see above)");
    }
    for (int i = 0; i < 2; i++) {
        free(ref.px[i]);
        free(ref.lab[i]);
    }
    unlink(ds_path);
    unlink(ds_copy);
    unlink(ck_path);
    unlink(ck_copy);
    unlink(enc_path);
    unlink(enc_copy);
    rmdir(dir);
    return check_exit();
}
