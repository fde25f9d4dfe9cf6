/* test_ckpt.c - checkpoint round trip for every optimizer, refusal of
 * mismatched checkpoints with the culprit named, the latest pointer, pruning,
 * resolve, the moving averages. */
#include <dlfcn.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"
#include "ops_util.h"
#include "pstrain/version.h"

#define MAXV 16

static nn_var g_vars[MAXV];
static int g_nvars;
static size_t g_total;

static ckpt_meta make_meta(opt_kind kind, int64_t step)
{
    ckpt_meta m = {0};
    m.model_name = "toy";
    m.model_text = "conv1 [5x5x1x6]\nfc1 ...\ntotal 9999 parameters\n";
    m.height = 28;
    m.width = 28;
    m.channels = 1;
    m.num_classes = 10;
    m.global_step = step;
    m.epoch = 3;
    m.epoch_batch = 17;
    m.next_batch = 3 * 938 + 17;
    m.examples = (3 * 938 + 17) * 64;
    m.seed = 0xFEEDFACECAFEBEEFull;
    m.rng_state[0] = 1;
    m.rng_state[3] = UINT64_MAX;
    m.train_seconds = 12.625;
    m.mode = "sync";
    m.workers = 2;
    m.ps = 3;
    m.batch = 64;
    m.opt = opt_defaults(kind);
    m.opt.nesterov = kind == OPT_MOMENTUM;
    m.lr = (lr_schedule){.base = 0.045f, .decay = 0.94f, .decay_epochs = 2, .steps_per_epoch = 938};
    m.weight_decay = 4e-5f;
    m.label_smoothing = 0.1f;
    return m;
}

static ckpt_expect make_expect(opt_kind kind)
{
    return (ckpt_expect){.model_name = "toy",
                         .height = 28,
                         .width = 28,
                         .channels = 1,
                         .num_classes = 10,
                         .vars = g_vars,
                         .nvars = g_nvars,
                         .check_opt = true,
                         .opt_kind = kind};
}

static void test_round_trip(const char *dir, opt_kind kind)
{
    size_t stride = g_total + 5; /* a stride larger than the model, like a PS shard's */
    int ns = opt_nslots(kind);
    float *params = malloc(g_total * sizeof(float));
    float *slots = malloc((size_t)(ns ? ns : 1) * stride * sizeof(float));
    float *p2 = malloc(g_total * sizeof(float));
    float *s2 = malloc((size_t)(ns ? ns : 1) * stride * sizeof(float));
    ops_fill(params, g_total, 100 + (uint64_t)kind);
    ops_fill(slots, (size_t)(ns ? ns : 1) * stride, 200 + (uint64_t)kind);
    for (size_t j = 0; j < (size_t)(ns ? ns : 1) * stride; j++) s2[j] = -7.0f; /* sentinel */

    ckpt_meta m = make_meta(kind, 1000 + kind), r;
    pst_err e = {{0}};
    char path[4096];
    int rc = ckpt_save(dir, 0, &m, g_vars, g_nvars, params, ns ? slots : NULL, stride, path,
                       sizeof path, &e);
    CHECK(rc == 0, "save %s: %s", opt_name(kind), e.msg);
    char want[4096];
    ckpt_path(want, sizeof want, dir, 1000 + kind);
    CHECK(!strcmp(path, want), "saved as %s, expected %s", path, want);
    CHECK(ckpt_verify(path, &e) == 0, "verify: %s", e.msg);

    ckpt_expect x = make_expect(kind);
    rc = ckpt_read(path, &x, p2, ns ? s2 : NULL, stride, &r, &e);
    CHECK(rc == 0, "read %s: %s", opt_name(kind), e.msg);
    if (rc) goto out;
    CHECK(!memcmp(params, p2, g_total * sizeof(float)), "%s: parameters differ", opt_name(kind));
    for (int i = 0; i < g_nvars; i++) {
        const nn_var *v = &g_vars[i];
        for (int s = 0; s < ns; s++) {
            const float *a = slots + (size_t)s * stride + v->offset;
            const float *b = s2 + (size_t)s * stride + v->offset;
            if (v->trainable)
                CHECK(!memcmp(a, b, v->size * sizeof(float)), "%s: slot %s of %s differs",
                      opt_name(kind), ckpt_slot_name(kind, s), v->name);
            else
                CHECK(b[0] == -7.0f && b[v->size - 1] == -7.0f,
                      "slot of non-trainable %s was written", v->name);
        }
    }
    CHECK(!strcmp(r.model_name, m.model_name), "model_name %s", r.model_name);
    CHECK(!strcmp(r.model_text, m.model_text), "model text differs: %s", r.model_text);
    CHECK(!strcmp(r.mode, "sync"), "mode %s", r.mode);
    CHECK(r.format_version == CKPT_FORMAT_VERSION, "format_version %d", r.format_version);
    CHECK(r.height == 28 && r.width == 28 && r.channels == 1 && r.num_classes == 10,
          "image shape %dx%dx%d K=%d", r.height, r.width, r.channels, r.num_classes);
    CHECK(r.global_step == m.global_step && r.epoch == m.epoch && r.epoch_batch == m.epoch_batch &&
              r.next_batch == m.next_batch && r.examples == m.examples,
          "cursor %lld %d %lld %lld", (long long)r.global_step, r.epoch, (long long)r.epoch_batch,
          (long long)r.next_batch);
    CHECK(r.seed == m.seed && !memcmp(r.rng_state, m.rng_state, sizeof m.rng_state), "seed/rng");
    CHECK(r.train_seconds == m.train_seconds, "train_seconds %g", r.train_seconds);
    CHECK(r.workers == 2 && r.ps == 3 && r.batch == 64, "workers/ps/batch");
    CHECK(r.opt.kind == kind && r.opt.momentum == m.opt.momentum &&
              r.opt.nesterov == m.opt.nesterov && r.opt.rms_decay == m.opt.rms_decay &&
              r.opt.rms_eps == m.opt.rms_eps && r.opt.beta1 == m.opt.beta1 &&
              r.opt.beta2 == m.opt.beta2 && r.opt.adam_eps == m.opt.adam_eps,
          "optimizer %s hyper-parameters", opt_name(kind));
    CHECK(r.lr.base == m.lr.base && r.lr.decay == m.lr.decay &&
              r.lr.decay_epochs == m.lr.decay_epochs &&
              r.lr.steps_per_epoch == m.lr.steps_per_epoch,
          "lr schedule");
    CHECK(r.weight_decay == m.weight_decay && r.label_smoothing == m.label_smoothing,
          "weight decay / label smoothing");
    CHECK(!strcmp(r.pstrain_version, pst_version()), "version %s", r.pstrain_version);
    CHECK(strlen(r.created) == 20 && r.created[10] == 'T', "created %s", r.created);
    ckpt_meta_free(&r);

    /* ckpt_read_meta alone */
    rc = ckpt_read_meta(path, &r, &e);
    CHECK(rc == 0 && r.global_step == m.global_step && r.opt.kind == kind, "read_meta: %s", e.msg);
    if (!rc) ckpt_meta_free(&r);

    /* eval-style read: parameters only, any optimizer */
    x.check_opt = false;
    memset(p2, 0, g_total * sizeof(float));
    rc = ckpt_read(path, &x, p2, NULL, 0, NULL, &e);
    CHECK(rc == 0 && !memcmp(params, p2, g_total * sizeof(float)), "params-only read: %s", e.msg);
out:
    free(params);
    free(slots);
    free(p2);
    free(s2);
}

/* Expects ckpt_read to fail with a message containing `needle`. */
static void expect_refused(const char *path, const ckpt_expect *x, bool with_slots,
                           const char *needle, const char *what)
{
    size_t stride = g_total;
    float *p = malloc(g_total * sizeof(float)), *s = malloc(2 * stride * sizeof(float));
    pst_err e = {{0}};
    int rc = ckpt_read(path, x, p, with_slots ? s : NULL, stride, NULL, &e);
    CHECK(rc < 0, "%s: accepted", what);
    CHECK(rc < 0 && strstr(e.msg, needle), "%s: message '%s' does not name '%s'", what, e.msg,
          needle);
    free(p);
    free(s);
}

static void test_refusals(const char *dir)
{
    size_t stride = g_total;
    float *params = malloc(g_total * sizeof(float)), *slots = malloc(stride * sizeof(float));
    ops_fill(params, g_total, 1);
    ops_fill(slots, g_total, 2);
    ckpt_meta m = make_meta(OPT_MOMENTUM, 5);
    pst_err e;
    char path[4096];
    snprintf(path, sizeof path, "%s/ref.h5", dir);
    CHECK(ckpt_write(path, &m, g_vars, g_nvars, params, slots, stride, &e) == 0, "%s", e.msg);

    ckpt_expect x = make_expect(OPT_MOMENTUM);
    x.model_name = "lenet5";
    expect_refused(path, &x, true, "lenet5", "other model");
    x = make_expect(OPT_MOMENTUM);
    x.channels = 3;
    expect_refused(path, &x, true, "channels", "other image shape");
    x = make_expect(OPT_ADAM);
    expect_refused(path, &x, true, "momentum", "other optimizer");

    /* a variable with another shape */
    nn_var v2[MAXV];
    memcpy(v2, g_vars, sizeof v2);
    v2[4].shape[1] = 13;
    v2[4].size = 400 * 13;
    v2[5].offset += 400; /* keep the slab consistent enough for reading */
    v2[6].offset += 400;
    x = make_expect(OPT_MOMENTUM);
    x.vars = v2;
    float *big = malloc((g_total + 400) * sizeof(float));
    {
        pst_err e2 = {{0}};
        int rc = ckpt_read(path, &x, big, NULL, 0, NULL, &e2);
        CHECK(rc < 0 && strstr(e2.msg, "fc1/kernel") && strstr(e2.msg, "[400,12]") &&
                  strstr(e2.msg, "[400,13]"),
              "shape mismatch message: %s", e2.msg);
    }
    free(big);

    /* the model has a variable the checkpoint lacks */
    memcpy(v2, g_vars, sizeof v2);
    snprintf(v2[2].name, sizeof v2[2].name, "conv2/bn/beta");
    x = make_expect(OPT_MOMENTUM);
    x.vars = v2;
    expect_refused(path, &x, false, "conv2/bn/beta", "missing variable");
    /* the checkpoint has a variable the model lacks */
    x = make_expect(OPT_MOMENTUM);
    x.nvars = g_nvars - 1;
    expect_refused(path, &x, false, g_vars[g_nvars - 1].name, "extra variable");
    /* missing slot: a checkpoint written by sgd read with slots expected */
    {
        ckpt_meta ms = make_meta(OPT_SGD, 6);
        char p2[4096];
        snprintf(p2, sizeof p2, "%s/sgd.h5", dir);
        CHECK(ckpt_write(p2, &ms, g_vars, g_nvars, params, NULL, 0, &e) == 0, "%s", e.msg);
        x = make_expect(OPT_SGD);
        CHECK(ckpt_read(p2, &x, params, NULL, 0, NULL, &e) == 0, "sgd read: %s", e.msg);
        x = make_expect(OPT_MOMENTUM);
        expect_refused(p2, &x, true, "sgd", "sgd checkpoint for momentum");
    }

    /* not a checkpoint: a plain HDF5 file with another format attribute */
    char other[4096];
    snprintf(other, sizeof other, "%s/dataset.h5", dir);
    hid_t f = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    const char *fmt = "pstrain-dataset";
    hid_t a = H5Acreate2(f, "format", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, &fmt);
    H5Aclose(a);
    H5Tclose(t);
    H5Sclose(sp);
    H5Fclose(f);
    x = make_expect(OPT_MOMENTUM);
    expect_refused(other, &x, false, "pstrain-dataset", "wrong format");
    CHECK(ckpt_verify(other, &e) < 0, "verify accepted a data set");

    /* a future format version */
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    a = H5Aopen(f, "format_version", H5P_DEFAULT);
    int64_t v = 3;
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Fclose(f);
    expect_refused(path, &x, false, "format_version is 3", "format version 3");

    /* a directory that does not exist: the write fails, naming why */
    {
        char p3[4200];
        snprintf(p3, sizeof p3, "%s/no-such-dir/x.h5", dir);
        pst_err e3 = {{0}};
        CHECK(ckpt_write(p3, &m, g_vars, g_nvars, params, slots, stride, &e3) < 0 &&
                  strstr(e3.msg, "No such file or directory") && strstr(e3.msg, "x.h5"),
              "write into a missing directory: %s", e3.msg);
    }

    /* not HDF5 at all, and a missing file */
    snprintf(other, sizeof other, "%s/junk.h5", dir);
    FILE *j = fopen(other, "w");
    fputs("not hdf5\n", j);
    fclose(j);
    expect_refused(other, &x, false, "not a readable HDF5 file", "junk file");
    snprintf(other, sizeof other, "%s/nonexistent.h5", dir);
    expect_refused(other, &x, false, "No such file", "missing file");
    free(params);
    free(slots);
}

/* Copies the first `keep` bytes of src to dst (a truncated checkpoint). */
static void truncated_copy(const char *src, const char *dst, long keep)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    char buf[4096];
    long left = keep;
    size_t n;
    while (left > 0 && (n = fread(buf, 1, (size_t)PST_MIN(left, (long)sizeof buf), in)) > 0) {
        fwrite(buf, 1, n, out);
        left -= (long)n;
    }
    fclose(in);
    fclose(out);
}

static long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* Flips one bit of the first copy of the 4 floats at `needle` in file p
 * (stored data, found by content); false when they are not in the file. */
static bool flip_bit_at(const char *p, const float *needle)
{
    FILE *f = fopen(p, "r+b");
    long n = file_size(p), at = -1;
    unsigned char *buf = malloc((size_t)n);
    if (f && buf && fread(buf, 1, (size_t)n, f) == (size_t)n)
        for (long i = 0; i + 4 * (long)sizeof(float) <= n && at < 0; i++)
            if (!memcmp(buf + i, needle, 4 * sizeof(float))) at = i;
    if (at >= 0) {
        unsigned char b = buf[at] ^ 0x10;
        fseek(f, at, SEEK_SET);
        fwrite(&b, 1, 1, f);
    }
    if (f) fclose(f);
    free(buf);
    return at >= 0;
}

static void read_file(const char *p, char *out, size_t n)
{
    out[0] = '\0';
    FILE *f = fopen(p, "r");
    if (!f) return;
    size_t k = fread(out, 1, n - 1, f);
    out[k] = '\0';
    fclose(f);
}

/* Replaces (or adds) scalar root attribute `name` of a checkpoint: file
 * type ftype, value *val of memory type mtype. */
static void set_attr(const char *path, const char *name, hid_t ftype, hid_t mtype, const void *val)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0, "open %s to edit", path);
    if (f < 0) return;
    if (H5Aexists(f, name) > 0) H5Adelete(f, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(a >= 0 && H5Awrite(a, mtype, val) >= 0, "write attribute %s", name);
    H5Aclose(a);
    H5Sclose(sp);
    H5Fclose(f);
}

/* Checkpoint attributes are range-checked on read: each bad value is
 * refused with a message naming the attribute, the value as stored and the
 * valid range (no silent truncation to int, no clipping of a negative seed
 * to 0), by ckpt_read_meta, ckpt_read and ckpt_verify alike; and a
 * directory whose newest checkpoint has one falls back to the older one. */
static void test_bad_attributes(const char *root)
{
    char dir[1024], good[4096], bad[4096], got[4096];
    snprintf(dir, sizeof dir, "%s/attrs", root);
    float *params = malloc(g_total * sizeof(float)), *slots = malloc(g_total * sizeof(float));
    ops_fill(params, g_total, 3);
    ops_fill(slots, g_total, 4);
    pst_err e = {{0}};
    ckpt_meta m = make_meta(OPT_MOMENTUM, 20);
    CHECK(ckpt_save(dir, 0, &m, g_vars, g_nvars, params, slots, g_total, good, sizeof good, &e) ==
              0,
          "save: %s", e.msg);
    const int64_t i64max = INT64_MAX, m1 = -1, two31 = 1LL << 31, big_batch = (1LL << 32) + 64,
                  big_h = (1LL << 32) + 28, zero = 0, five = 5, two = 2, neg5 = -5;
    const uint64_t u64max = UINT64_MAX;
    const float f_nan = NAN, f_15 = 1.5f, f_one = 1.0f, f_neg = -0.5f;
    const double d_neg = -1.0, d_inf = INFINITY, d_half = 5.5;
    const struct {
        const char *name;
        hid_t ftype, mtype;
        const void *val;
        const char *shown; /* the value as the message must show it */
    } cases[] = {
        {"global_step", H5T_STD_I64LE, H5T_NATIVE_INT64, &m1, "-1"},
        {"global_step", H5T_STD_I64LE, H5T_NATIVE_INT64, &i64max, "9223372036854775807"},
        {"global_step", H5T_STD_U64LE, H5T_NATIVE_UINT64, &u64max, "18446744073709551615"},
        {"global_step", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d_half, "integer"},
        {"examples", H5T_STD_I64LE, H5T_NATIVE_INT64, &i64max, "9223372036854775807"},
        {"examples", H5T_STD_I64LE, H5T_NATIVE_INT64, &neg5, "-5"},
        {"next_batch", H5T_STD_I64LE, H5T_NATIVE_INT64, &m1, "-1"},
        {"epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, &two31, "2147483648"},
        {"epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, &m1, "-1"},
        {"epoch_batch", H5T_STD_I64LE, H5T_NATIVE_INT64, &m1, "-1"},
        {"batch", H5T_STD_I64LE, H5T_NATIVE_INT64, &big_batch, "4294967360"},
        {"batch", H5T_STD_I64LE, H5T_NATIVE_INT64, &zero, "0"},
        {"height", H5T_STD_I64LE, H5T_NATIVE_INT64, &big_h, "4294967324"},
        {"width", H5T_STD_I64LE, H5T_NATIVE_INT64, &zero, "0"},
        {"channels", H5T_STD_I64LE, H5T_NATIVE_INT64, &five, "5"},
        {"num_classes", H5T_STD_I64LE, H5T_NATIVE_INT64, &zero, "0"},
        {"workers", H5T_STD_I64LE, H5T_NATIVE_INT64, &zero, "0"},
        {"ps", H5T_STD_I64LE, H5T_NATIVE_INT64, &m1, "-1"},
        {"nesterov", H5T_STD_I64LE, H5T_NATIVE_INT64, &two, "2"},
        {"steps_per_epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, &m1, "-1"},
        {"seed", H5T_STD_I64LE, H5T_NATIVE_INT64, &m1, "-1"},
        {"lr_base", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &f_nan, "nan"},
        {"momentum", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &f_15, "1.5"},
        {"label_smoothing", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &f_one, "1"},
        {"weight_decay", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &f_neg, "-0.5"},
        {"train_seconds", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d_neg, "-1"},
        {"train_seconds", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d_inf, "inf"},
    };
    ckpt_expect x = make_expect(OPT_MOMENTUM);
    for (size_t i = 0; i < PST_ARRAY_LEN(cases); i++) {
        snprintf(bad, sizeof bad, "%s/bad-%zu.h5", root, i);
        truncated_copy(good, bad, file_size(good));
        set_attr(bad, cases[i].name, cases[i].ftype, cases[i].mtype, cases[i].val);
        ckpt_meta r;
        pst_err e1 = {{0}}, e2 = {{0}}, e3 = {{0}};
        int rc1 = ckpt_read_meta(bad, &r, &e1);
        if (rc1 == 0) ckpt_meta_free(&r);
        int rc2 = ckpt_read(bad, &x, params, slots, g_total, NULL, &e2);
        int rc3 = ckpt_verify(bad, &e3);
        char needle[128];
        snprintf(needle, sizeof needle, "attribute %s ", cases[i].name);
        CHECK(rc1 < 0 && strstr(e1.msg, needle) && strstr(e1.msg, cases[i].shown) &&
                  strstr(e1.msg, "expected"),
              "%s = %s: read_meta %d: '%s'", cases[i].name, cases[i].shown, rc1, e1.msg);
        CHECK(rc2 < 0 && strstr(e2.msg, needle), "%s = %s: read %d: '%s'", cases[i].name,
              cases[i].shown, rc2, e2.msg);
        CHECK(rc3 < 0 && strstr(e3.msg, needle), "%s = %s: verify %d: '%s'", cases[i].name,
              cases[i].shown, rc3, e3.msg);
        unlink(bad);
    }
    /* the limits themselves are accepted: 2^40 steps, 2^31-1 epochs, a seed above 2^63 */
    {
        const int64_t steps = 1LL << 40, ep = INT32_MAX - 1;
        snprintf(bad, sizeof bad, "%s/edge.h5", root);
        truncated_copy(good, bad, file_size(good));
        set_attr(bad, "global_step", H5T_STD_I64LE, H5T_NATIVE_INT64, &steps);
        set_attr(bad, "epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, &ep);
        set_attr(bad, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &u64max);
        ckpt_meta r;
        int rc = ckpt_read_meta(bad, &r, &e);
        CHECK(rc == 0, "limits refused: %s", e.msg);
        if (rc == 0) {
            CHECK(r.global_step == steps && r.epoch == ep && r.seed == UINT64_MAX,
                  "limits read as %lld %d %llu", (long long)r.global_step, r.epoch,
                  (unsigned long long)r.seed);
            ckpt_meta_free(&r);
        }
        unlink(bad);
    }
    /* a newer checkpoint with global_step = -1 under a valid name: --resume
     * of the directory skips it for the good one */
    ckpt_path(bad, sizeof bad, dir, 30);
    truncated_copy(good, bad, file_size(good));
    set_attr(bad, "global_step", H5T_STD_I64LE, H5T_NATIVE_INT64, &m1);
    /* and a newer one still whose slot has another shape than its variable
     * (intact checksums, damage only the layout shows) */
    {
        char odd[4096];
        ckpt_path(odd, sizeof odd, dir, 40);
        truncated_copy(good, odd, file_size(good));
        hid_t f = H5Fopen(odd, H5F_ACC_RDWR, H5P_DEFAULT);
        CHECK(H5Ldelete(f, "/slots/fc1/kernel/momentum", H5P_DEFAULT) >= 0, "delete a slot");
        hsize_t three = 3;
        float vals[3] = {1, 2, 3};
        hid_t sp = H5Screate_simple(1, &three, NULL);
        hid_t d = H5Dcreate2(f, "/slots/fc1/kernel/momentum", H5T_IEEE_F32LE, sp, H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT);
        CHECK(d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals) >= 0,
              "rewrite a slot");
        H5Dclose(d);
        H5Sclose(sp);
        H5Fclose(f);
        pst_err e4 = {{0}};
        CHECK(ckpt_verify(odd, &e4) < 0 && strstr(e4.msg, "/slots/fc1/kernel/momentum") &&
                  strstr(e4.msg, "[3]") && strstr(e4.msg, "[400,12]"),
              "slot of another shape: '%s'", e4.msg);
    }
    CHECK(ckpt_resolve(dir, got, sizeof got, &e) == 1 && !strcmp(got, good),
          "resolve with a bad newest checkpoint: %s", got);
    ops_rmdir(dir);
    free(params);
    free(slots);
}

static void test_latest_and_prune(const char *root)
{
    char dir[1024], p[4096], q[4096], got[4096], text[256];
    snprintf(dir, sizeof dir, "%s/run", root); /* created by ckpt_save */
    float *params = malloc(g_total * sizeof(float));
    pst_err e;

    CHECK(ckpt_find_latest(dir, got, sizeof got, &e) == 0, "latest of a missing dir");
    CHECK(ckpt_resolve(dir, got, sizeof got, &e) == 0, "resolve of a missing dir");

    for (int64_t step = 10; step <= 50; step += 10) {
        ckpt_meta m = make_meta(OPT_SGD, step);
        ops_fill(params, g_total, (uint64_t)step);
        CHECK(ckpt_save(dir, 3, &m, g_vars, g_nvars, params, NULL, 0, NULL, 0, &e) == 0,
              "save %lld: %s", (long long)step, e.msg);
        snprintf(p, sizeof p, "%s/latest", dir);
        read_file(p, text, sizeof text);
        snprintf(q, sizeof q, "ckpt-%lld.h5\n", (long long)step);
        CHECK(!strcmp(text, q), "latest is '%s' after step %lld", text, (long long)step);
    }
    /* keep 3: 30, 40, 50 */
    for (int64_t step = 10; step <= 50; step += 10) {
        ckpt_path(p, sizeof p, dir, step);
        CHECK((access(p, F_OK) == 0) == (step >= 30), "step %lld present=%d", (long long)step,
              access(p, F_OK) == 0);
    }
    ckpt_path(q, sizeof q, dir, 50);
    CHECK(ckpt_find_latest(dir, got, sizeof got, &e) == 1 && !strcmp(got, q), "latest %s", got);
    CHECK(ckpt_resolve(dir, got, sizeof got, &e) == 1 && !strcmp(got, q), "resolve dir %s", got);
    ckpt_path(p, sizeof p, dir, 40);
    CHECK(ckpt_resolve(p, got, sizeof got, &e) == 1 && !strcmp(got, p), "resolve file %s", got);
    snprintf(p, sizeof p, "%s/latest", dir);
    CHECK(ckpt_resolve(p, got, sizeof got, &e) == 1 && !strcmp(got, q), "resolve latest %s", got);
    snprintf(p, sizeof p, "%s/ckpt-41.h5", dir);
    CHECK(ckpt_resolve(p, got, sizeof got, &e) < 0 && strstr(e.msg, "ckpt-41.h5"),
          "resolve of a missing file: %s", e.msg);

    /* a stray temporary of a newer checkpoint (of a writer that is gone: a
     * pid above the kernel's maximum), and a junk ckpt-90.h5: skipped */
    snprintf(p, sizeof p, "%s/.ckpt-60.h5.tmp.99999999", dir);
    truncated_copy(q, p, file_size(q) / 2);
    snprintf(p, sizeof p, "%s/ckpt-90.h5", dir);
    FILE *j = fopen(p, "w");
    fputs("garbage", j);
    fclose(j);
    CHECK(ckpt_find_latest(dir, got, sizeof got, &e) == 1 && !strcmp(got, q),
          "latest with junk: %s", got);
    CHECK(ckpt_resolve(p, got, sizeof got, &e) < 0, "resolve accepted a junk file");

    /* the newest complete file wins over a stale pointer (kill between the
     * rename and the pointer update) */
    ckpt_meta m = make_meta(OPT_SGD, 70);
    ckpt_path(p, sizeof p, dir, 70);
    CHECK(ckpt_write(p, &m, g_vars, g_nvars, params, NULL, 0, &e) == 0, "%s", e.msg);
    CHECK(ckpt_find_latest(dir, got, sizeof got, &e) == 1 && !strcmp(got, p),
          "newer complete file: %s", got);

    /* truncated newest: falls back to 50 */
    char t[4200];
    snprintf(t, sizeof t, "%s.cut", p);
    truncated_copy(p, t, file_size(p) - 100);
    rename(t, p);
    CHECK(ckpt_verify(p, &e) < 0, "truncated file verifies");
    CHECK(ckpt_find_latest(dir, got, sizeof got, &e) == 1 && !strcmp(got, q),
          "latest after truncation: %s", got);

    /* a flipped byte inside variable data is caught by the checksum */
    ckpt_path(p, sizeof p, dir, 40);
    {
        /* find the data of fc1/kernel: rewrite it with known content and
         * look for its first bytes */
        ops_fill(params, g_total, 40);
        CHECK(flip_bit_at(p, params + g_vars[4].offset + 100), "variable data not found in %s", p);
        CHECK(ckpt_verify(p, &e) < 0 && strstr(e.msg, "fc1/kernel"), "flipped bit not detected: %s",
              e.msg);
    }

    /* pruning: stale temporaries go, the pointer's file stays */
    snprintf(p, sizeof p, "%s/latest", dir);
    read_file(p, text, sizeof text);
    CHECK(!strcmp(text, "ckpt-50.h5\n"), "latest %s", text);
    /* the temporary of a live writer (our parent process) stays */
    snprintf(p, sizeof p, "%s/.ckpt-61.h5.tmp.%ld", dir, (long)getppid());
    fclose(fopen(p, "w"));
    int removed = ckpt_prune(dir, 1, &e);
    /* files: 30, 40, 50, 70, 90 -> keep 90 (newest by name) and 50 (latest) */
    CHECK(removed == 3, "prune removed %d", removed);
    snprintf(p, sizeof p, "%s/.ckpt-60.h5.tmp.99999999", dir);
    CHECK(access(p, F_OK) != 0, "stale temporary survived pruning");
    snprintf(p, sizeof p, "%s/.ckpt-61.h5.tmp.%ld", dir, (long)getppid());
    CHECK(access(p, F_OK) == 0, "a live writer's temporary was pruned");
    CHECK(access(q, F_OK) == 0, "pruned the latest checkpoint");
    free(params);
}

/* A copy of `src` with one change made through the HDF5 API by `edit`. */
static void edited_copy(const char *src, const char *dst, void (*edit)(hid_t f))
{
    truncated_copy(src, dst, file_size(src));
    hid_t f = H5Fopen(dst, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0, "open %s to edit", dst);
    if (f < 0) return;
    edit(f);
    H5Fclose(f);
}

static void replace_with_3(hid_t f, const char *name)
{
    CHECK(H5Ldelete(f, name, H5P_DEFAULT) >= 0, "delete %s", name);
    hsize_t three = 3;
    float vals[3] = {1, 2, 3};
    hid_t sp = H5Screate_simple(1, &three, NULL);
    hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals) >= 0,
          "rewrite %s", name);
    H5Dclose(d);
    H5Sclose(sp);
}

static void edit_misshape(hid_t f)
{
    replace_with_3(f, "/averages/fc1/kernel");
}

static void edit_missing(hid_t f)
{
    CHECK(H5Ldelete(f, "/averages/fc1/bias", H5P_DEFAULT) >= 0, "delete an average");
}

static void edit_extra(hid_t f)
{
    hsize_t three = 3;
    hid_t sp = H5Screate_simple(1, &three, NULL);
    float vals[3] = {0};
    hid_t d =
        H5Dcreate2(f, "/averages/bogus", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals) >= 0,
          "add an extra average");
    H5Dclose(d);
    H5Sclose(sp);
}

static void edit_no_group(hid_t f)
{
    CHECK(H5Ldelete(f, "/averages", H5P_DEFAULT) >= 0, "delete /averages");
}

static void edit_old_attrs(hid_t f)
{
    CHECK(H5Adelete(f, "moving_average_decay") >= 0 && H5Adelete(f, "lr_warmup_epochs") >= 0,
          "delete the new attributes");
}

/* --moving-average-decay and --warmup-epochs in checkpoints: the averages
 * round-trip bitwise under /averages; a missing, extra, mis-shaped or
 * corrupt average, or averages that disagree with moving_average_decay, are
 * refused by ckpt_read and ckpt_verify with the file and the dataset named;
 * files without the new attributes (older pstrain) still read. */
static void test_averages(const char *root)
{
    char dir[1024], good[4096], bad[4096], plain[4096];
    snprintf(dir, sizeof dir, "%s/averages", root);
    mkdir(dir, 0755);
    float *params = malloc(g_total * sizeof(float)), *avg = malloc(g_total * sizeof(float));
    float *p2 = malloc(g_total * sizeof(float)), *a2 = malloc(g_total * sizeof(float));
    ops_fill(params, g_total, 61);
    ops_fill(avg, g_total, 62);
    ckpt_meta m = make_meta(OPT_SGD, 10), r;
    m.ema_decay = 0.9999f;
    m.averages = avg;
    m.lr.warmup_epochs = 2.5f;
    pst_err e = {{0}};
    ckpt_path(good, sizeof good, dir, 10);
    CHECK(ckpt_write(good, &m, g_vars, g_nvars, params, NULL, 0, &e) == 0, "write: %s", e.msg);
    CHECK(ckpt_verify(good, &e) == 0, "verify with averages: %s", e.msg);
    ckpt_expect x = make_expect(OPT_SGD);
    x.averages = a2;
    for (size_t j = 0; j < g_total; j++) a2[j] = -7.0f;
    int rc = ckpt_read(good, &x, p2, NULL, 0, &r, &e);
    CHECK(rc == 0, "read with averages: %s", e.msg);
    if (rc == 0) {
        CHECK(!memcmp(p2, params, g_total * sizeof(float)), "variables differ");
        CHECK(!memcmp(a2, avg, g_total * sizeof(float)), "averages differ after the round trip");
        CHECK(r.has_averages && r.ema_decay == 0.9999f && r.lr.warmup_epochs == 2.5f,
              "meta: has_averages %d decay %g warm-up %g", r.has_averages, (double)r.ema_decay,
              (double)r.lr.warmup_epochs);
        ckpt_meta_free(&r);
    }
    /* without averages: none written, the caller's buffer untouched */
    ckpt_meta m0 = make_meta(OPT_SGD, 11);
    ckpt_path(plain, sizeof plain, dir, 11);
    CHECK(ckpt_write(plain, &m0, g_vars, g_nvars, params, NULL, 0, &e) == 0, "write: %s", e.msg);
    for (size_t j = 0; j < g_total; j++) a2[j] = -7.0f;
    rc = ckpt_read(plain, &x, p2, NULL, 0, &r, &e);
    CHECK(rc == 0 && !r.has_averages && r.ema_decay == 0 && a2[0] == -7.0f &&
              a2[g_total - 1] == -7.0f,
          "read without averages: %s", e.msg);
    if (rc == 0) ckpt_meta_free(&r);
    /* a decay the reader refuses is never written */
    ckpt_meta m1 = m;
    m1.ema_decay = 1.0f;
    ckpt_path(bad, sizeof bad, dir, 12);
    CHECK(ckpt_write(bad, &m1, g_vars, g_nvars, params, NULL, 0, &e) < 0 &&
              strstr(e.msg, "moving_average_decay"),
          "decay 1 written: %s", e.msg);
    m1.ema_decay = 0.5f, m1.averages = NULL;
    CHECK(ckpt_write(bad, &m1, g_vars, g_nvars, params, NULL, 0, &e) < 0, "decay without averages");

    static const struct {
        void (*edit)(hid_t);
        const char *needle; /* in both the read's and the verify's message */
    } cases[] = {
        {edit_misshape, "/averages/fc1/kernel"},
        {edit_missing, "/averages/fc1/bias"},
        {edit_extra, "/averages/bogus"},
        {edit_no_group, "/averages"},
    };
    for (size_t i = 0; i < PST_ARRAY_LEN(cases); i++) {
        edited_copy(good, bad, cases[i].edit);
        pst_err e1 = {{0}}, e2 = {{0}};
        CHECK(ckpt_read(bad, &x, p2, NULL, 0, NULL, &e1) < 0 && strstr(e1.msg, bad) &&
                  strstr(e1.msg, cases[i].needle),
              "case %zu: read: '%s'", i, e1.msg);
        CHECK(ckpt_verify(bad, &e2) < 0 && strstr(e2.msg, bad) && strstr(e2.msg, cases[i].needle),
              "case %zu: verify: '%s'", i, e2.msg);
        unlink(bad);
    }
    /* averages without a decay, and a decay out of range */
    truncated_copy(good, bad, file_size(good));
    float zero = 0, big = 1.5f;
    set_attr(bad, "moving_average_decay", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &zero);
    CHECK(ckpt_read(bad, &x, p2, NULL, 0, NULL, &e) < 0 && strstr(e.msg, "/averages") &&
              strstr(e.msg, "moving_average_decay"),
          "averages with decay 0: '%s'", e.msg);
    set_attr(bad, "moving_average_decay", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &big);
    CHECK(ckpt_verify(bad, &e) < 0 && strstr(e.msg, "moving_average_decay is 1.5"),
          "decay 1.5: '%s'", e.msg);
    float neg = -1;
    truncated_copy(good, bad, file_size(good));
    set_attr(bad, "lr_warmup_epochs", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &neg);
    CHECK(ckpt_read_meta(bad, &r, &e) < 0 && strstr(e.msg, "lr_warmup_epochs is -1"),
          "warm-up -1: '%s'", e.msg);
    /* a flipped bit in an average's data: the checksum names it */
    truncated_copy(good, bad, file_size(good));
    {
        CHECK(flip_bit_at(bad, avg + g_vars[4].offset + 100), "average data not found in %s", bad);
        CHECK(ckpt_verify(bad, &e) < 0 && strstr(e.msg, bad) &&
                  strstr(e.msg, "/averages/fc1/kernel"),
              "flipped bit in an average: '%s'", e.msg);
        CHECK(ckpt_read(bad, &x, p2, NULL, 0, NULL, &e) < 0 && strstr(e.msg, bad) &&
                  strstr(e.msg, "/averages/fc1/kernel") && strstr(e.msg, "corrupt"),
              "flipped bit in an average, read: '%s'", e.msg);
        /* a reader that does not ask for the averages is not stopped by them */
        x.averages = NULL;
        CHECK(ckpt_read(bad, &x, p2, NULL, 0, NULL, &e) == 0, "variables-only read: %s", e.msg);
        x.averages = a2;
    }
    /* a file of an older pstrain: no moving_average_decay, lr_warmup_epochs */
    edited_copy(plain, bad, edit_old_attrs);
    rc = ckpt_read(bad, &x, p2, NULL, 0, &r, &e);
    CHECK(rc == 0 && !r.has_averages && r.ema_decay == 0 && r.lr.warmup_epochs == 0,
          "older file without the attributes: %s", e.msg);
    if (rc == 0) ckpt_meta_free(&r);
    CHECK(ckpt_verify(bad, &e) == 0, "older file verifies: %s", e.msg);
    ops_rmdir(dir);
    free(params), free(avg), free(p2), free(a2);
}

/* Writing a checkpoint over an existing file of the same name gives the new
 * contents. (ckpt_write built the file with HDF5's in-memory driver under
 * the target's name: HDF5 first opened the existing file on disk to see
 * whether it was already open, which loaded it, and the image captured at
 * close was that old file. So a run resumed past a damaged ckpt-N.h5, or a
 * new run in a directory of an older one, that wrote step N again left the
 * old, damaged or foreign, file in place and reported success.) A FIFO
 * under the name must not block the writer either. */
static void test_overwrite(const char *root)
{
    char dir[1024], p[4096];
    snprintf(dir, sizeof dir, "%s/overwrite", root);
    mkdir(dir, 0755);
    ckpt_path(p, sizeof p, dir, 5);
    float *a = malloc(g_total * sizeof(float)), *b = malloc(g_total * sizeof(float));
    float *got = malloc(g_total * sizeof(float));
    ops_fill(a, g_total, 71);
    ops_fill(b, g_total, 72);
    ckpt_meta m = make_meta(OPT_SGD, 5);
    pst_err e = {{0}};
    ckpt_expect x = make_expect(OPT_SGD);
    CHECK(ckpt_write(p, &m, g_vars, g_nvars, a, NULL, 0, &e) == 0, "first write: %s", e.msg);
    CHECK(ckpt_write(p, &m, g_vars, g_nvars, b, NULL, 0, &e) == 0, "second write: %s", e.msg);
    CHECK(ckpt_read(p, &x, got, NULL, 0, NULL, &e) == 0, "read: %s", e.msg);
    CHECK(!memcmp(got, b, g_total * sizeof(float)), "the second write left the first's variables");
    /* over a damaged file (as --resume DIR skips it, then writes its step) */
    {
        FILE *f = fopen(p, "r+b");
        fseek(f, 200, SEEK_SET);
        fputc(0x5a, f);
        fclose(f);
    }
    CHECK(ckpt_write(p, &m, g_vars, g_nvars, a, NULL, 0, &e) == 0, "write over damage: %s", e.msg);
    CHECK(ckpt_verify(p, &e) == 0, "the damaged file is still there: %s", e.msg);
    CHECK(ckpt_read(p, &x, got, NULL, 0, NULL, &e) == 0 && !memcmp(got, a, g_total * sizeof(float)),
          "write over a damaged file: %s", e.msg);
    /* a FIFO under the name: replaced, never opened (it would block) */
    unlink(p);
    CHECK(mkfifo(p, 0644) == 0, "mkfifo");
    pid_t child = fork();
    if (child == 0) {
        alarm(20); /* a blocked open fails the test instead of hanging it */
        _exit(ckpt_write(p, &m, g_vars, g_nvars, b, NULL, 0, &e) == 0 ? 0 : 1);
    }
    int st = 0;
    waitpid(child, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "write over a FIFO: status %d", st);
    CHECK(ckpt_read(p, &x, got, NULL, 0, NULL, &e) == 0 && !memcmp(got, b, g_total * sizeof(float)),
          "write over a FIFO: %s", e.msg);
    ops_rmdir(dir);
    free(a), free(b), free(got);
}

/* Rewrites string attribute `name` of `f` as a variable-length string (the
 * version 1 layout). */
static void to_vlen_attr(hid_t f, const char *name)
{
    hid_t a = H5Aopen(f, name, H5P_DEFAULT), ft = H5Aget_type(a);
    size_t n = H5Tget_size(ft);
    char *buf = calloc(1, n + 1);
    H5Aread(a, ft, buf);
    H5Tclose(ft);
    H5Aclose(a);
    H5Adelete(f, name);
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    const char *p = buf;
    CHECK(a >= 0 && H5Awrite(a, t, &p) >= 0, "rewriting %s as a variable-length string", name);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    free(buf);
}

/* Version 2 writes fixed-length strings in the HDF5 1.10 format; version 1
 * checkpoints (variable-length strings) are still read. */
static void test_version1(const char *dir)
{
    pst_err e = {{0}};
    char path[4096];
    float *params = malloc(g_total * sizeof(float)), *p2 = calloc(g_total, sizeof(float));
    ops_fill(params, g_total, 77);
    ckpt_meta m = make_meta(OPT_SGD, 4242), r;
    CHECK(ckpt_save(dir, 0, &m, g_vars, g_nvars, params, NULL, g_total, path, sizeof path, &e) == 0,
          "save: %s", e.msg);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = H5Aopen(f, "model", H5P_DEFAULT), t = H5Aget_type(a);
    CHECK(H5Tis_variable_str(t) == 0, "version 2 writes fixed-length strings");
    H5Tclose(t);
    H5Aclose(a);
    static const char *const strs[] = {"format",    "model_name",      "model",  "mode",
                                       "optimizer", "pstrain_version", "created"};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) to_vlen_attr(f, strs[i]);
    a = H5Aopen(f, "format_version", H5P_DEFAULT);
    int64_t v = 1;
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Fclose(f);
    ckpt_expect x = make_expect(OPT_SGD);
    CHECK(ckpt_read(path, &x, p2, NULL, 0, &r, &e) == 0, "version 1 read: %s", e.msg);
    if (!e.msg[0]) {
        CHECK(r.format_version == 1 && !strcmp(r.model_text, m.model_text) &&
                  !strcmp(r.mode, "sync") && !memcmp(params, p2, g_total * sizeof(float)),
              "version 1 checkpoint read back differently");
        ckpt_meta_free(&r);
    }
    CHECK(ckpt_verify(path, &e) == 0, "version 1 verify: %s", e.msg);
    free(params);
    free(p2);
}

/* Writes `text` to `path` (a file another user cares about). */
static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static bool is_regular(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Temporaries are created exclusively under unpredictable names: symlinks
 * planted at the names the old code used (".ckpt-7.h5.tmp.PID",
 * ".latest.tmp.PID") and at DIR/lock never write through to their
 * targets. */
static void test_planted_symlinks(const char *root)
{
    char dir[1024], victim[1024], p[4200], text[256];
    snprintf(dir, sizeof dir, "%s/shared", root);
    snprintf(victim, sizeof victim, "%s/victim.txt", root);
    mkdir(dir, 0777);
    write_text(victim, "precious\n");
    snprintf(p, sizeof p, "%s/.ckpt-7.h5.tmp.%ld", dir, (long)getpid());
    CHECK(symlink(victim, p) == 0, "symlink %s", p);
    snprintf(p, sizeof p, "%s/.latest.tmp.%ld", dir, (long)getpid());
    CHECK(symlink(victim, p) == 0, "symlink %s", p);
    float *params = malloc(g_total * sizeof(float));
    ops_fill(params, g_total, 7);
    ckpt_meta m = make_meta(OPT_SGD, 7);
    pst_err e = {{0}};
    CHECK(ckpt_save(dir, 0, &m, g_vars, g_nvars, params, NULL, 0, NULL, 0, &e) == 0, "save: %s",
          e.msg);
    read_file(victim, text, sizeof text);
    CHECK(!strcmp(text, "precious\n"), "the symlinks' target was overwritten: %zu bytes",
          strlen(text));
    snprintf(p, sizeof p, "%s/ckpt-7.h5", dir);
    CHECK(is_regular(p), "%s is not a regular file (a renamed symlink?)", p);
    CHECK(ckpt_verify(p, &e) == 0, "verify %s: %s", p, e.msg);
    snprintf(p, sizeof p, "%s/latest", dir);
    CHECK(is_regular(p), "%s is not a regular file", p);
    /* a symlink as the lock file is refused, its target untouched */
    snprintf(p, sizeof p, "%s/lock", dir);
    CHECK(symlink(victim, p) == 0, "symlink %s", p);
    CHECK(ckpt_prepare_dir(dir, &e) < 0 && strstr(e.msg, "lock") && strstr(e.msg, "symbolic link"),
          "prepare with a symlinked lock file: '%s'", e.msg);
    read_file(victim, text, sizeof text);
    CHECK(!strcmp(text, "precious\n"), "the lock symlink's target was written");
    ckpt_unlock_dir();
    ops_rmdir(dir);
    unlink(victim);
    free(params);
}

/* One writer per directory: a second ckpt_prepare_dir (another process)
 * is refused naming the holder's pid and host, and succeeds once the
 * holder is gone; temporaries of dead writers are removed at once. */
static void test_dir_lock(const char *root)
{
    char dir[1024], p[4200], host[128] = "";
    snprintf(dir, sizeof dir, "%s/locked", root);
    gethostname(host, sizeof host - 1);
    int up[2], hold[2];
    CHECK(pipe(up) == 0 && pipe(hold) == 0, "pipes");
    pid_t child = fork();
    if (child == 0) {
        close(up[0]);
        close(hold[1]);
        pst_err ce;
        char c = ckpt_prepare_dir(dir, &ce) == 0 ? 'y' : 'n';
        if (write(up[1], &c, 1) != 1) _exit(2);
        while (read(hold[0], &c, 1) > 0) {
        } /* until the parent closes the pipe */
        _exit(0);
    }
    close(up[1]);
    close(hold[0]);
    char c = 0;
    CHECK(read(up[0], &c, 1) == 1 && c == 'y', "the child could not lock %s", dir);
    pst_err e = {{0}};
    char pidstr[32];
    snprintf(pidstr, sizeof pidstr, "pid %ld ", (long)child);
    int rc = ckpt_prepare_dir(dir, &e);
    CHECK(rc < 0 && strstr(e.msg, dir) && strstr(e.msg, pidstr) && strstr(e.msg, host) &&
              strstr(e.msg, "in use"),
          "second writer: rc %d, '%s' (expected %s, host %s)", rc, e.msg, pidstr, host);
    close(hold[1]); /* the holder ends: the kernel drops its lock */
    waitpid(child, NULL, 0);
    close(up[0]);
    /* temporaries of dead writers (old and new names) go, a live writer's stays */
    snprintf(p, sizeof p, "%s/.ckpt-5.h5.tmp.99999999.0123456789ab", dir);
    write_text(p, "x");
    snprintf(p, sizeof p, "%s/.ckpt-6.h5.tmp.99999999", dir);
    write_text(p, "x");
    snprintf(p, sizeof p, "%s/.latest.tmp.99999999.0123456789ab", dir);
    write_text(p, "x");
    snprintf(p, sizeof p, "%s/.ckpt-8.h5.tmp.%ld.0123456789ab", dir, (long)getppid());
    write_text(p, "x");
    CHECK(ckpt_prepare_dir(dir, &e) == 0, "lock after the holder ended: %s", e.msg);
    CHECK(ckpt_prepare_dir(dir, &e) == 0, "the holder locks again: %s", e.msg);
    snprintf(p, sizeof p, "%s/.ckpt-5.h5.tmp.99999999.0123456789ab", dir);
    CHECK(access(p, F_OK) != 0, "stale temporary %s survived", p);
    snprintf(p, sizeof p, "%s/.ckpt-6.h5.tmp.99999999", dir);
    CHECK(access(p, F_OK) != 0, "stale temporary %s survived", p);
    snprintf(p, sizeof p, "%s/.latest.tmp.99999999.0123456789ab", dir);
    CHECK(access(p, F_OK) != 0, "stale temporary %s survived", p);
    snprintf(p, sizeof p, "%s/.ckpt-8.h5.tmp.%ld.0123456789ab", dir, (long)getppid());
    CHECK(access(p, F_OK) == 0, "a live writer's temporary was removed");
    ckpt_unlock_dir();
    ops_rmdir(dir);
}

/* fclose() of this program, to act as a concurrent writer at the worst
 * moment: after a reader listed the directory and read DIR/latest (with
 * stdio), before it opens the files. Armed with the directory and the step
 * to write; fires once. */
static const char *g_race_dir;
static int64_t g_race_step;

int fclose(FILE *f)
{
    static int (*real)(FILE *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "fclose");
    int rc = real(f);
    if (g_race_dir) {
        const char *dir = g_race_dir;
        g_race_dir = NULL; /* once */
        float *params = malloc(g_total * sizeof(float));
        ops_fill(params, g_total, (uint64_t)g_race_step);
        pst_err e;
        for (int64_t s = g_race_step; s < g_race_step + 2; s++) {
            ckpt_meta m = make_meta(OPT_SGD, s);
            if (ckpt_save(dir, 1, &m, g_vars, g_nvars, params, NULL, 0, NULL, 0, &e) < 0)
                fprintf(stderr, "racing writer: %s\n", e.msg);
        }
        free(params);
    }
    return rc;
}

/* A reader (eval, a resume) looking for the newest checkpoint while a
 * writer saves and prunes (keep 1) finds one: every file it listed was
 * pruned before it could read it, and it looks again ("no checkpoint
 * found" before). */
static void test_reader_during_writes(const char *root)
{
    char dir[1024], got[4096], want[4096];
    snprintf(dir, sizeof dir, "%s/busy", root);
    float *params = malloc(g_total * sizeof(float));
    ops_fill(params, g_total, 1);
    pst_err e = {{0}};
    ckpt_meta m = make_meta(OPT_SGD, 1);
    CHECK(ckpt_save(dir, 1, &m, g_vars, g_nvars, params, NULL, 0, NULL, 0, &e) == 0, "%s", e.msg);
    g_race_dir = dir;
    g_race_step = 2; /* writes 2 and 3, pruning 1 and 2 */
    int rc = ckpt_find_latest(dir, got, sizeof got, &e);
    ckpt_path(want, sizeof want, dir, 3);
    CHECK(g_race_dir == NULL, "the racing writer did not run");
    CHECK(rc == 1 && !strcmp(got, want), "reader during writes: rc %d, '%s', expected %s", rc,
          rc == 1 ? got : "", want);
    ops_rmdir(dir);
    free(params);
}

int main(void)
{
    g_nvars = ops_vars(g_vars, 1, &g_total);
    const char *dir = ops_tmpdir("ckpt");
    char d[512];
    snprintf(d, sizeof d, "%s", dir);
    for (opt_kind k = OPT_SGD; k <= OPT_ADAM; k++) test_round_trip(d, k);
    CHECK(ckpt_slot_name(OPT_RMSPROP, 0) && !strcmp(ckpt_slot_name(OPT_RMSPROP, 0), "rms"),
          "slot names");
    CHECK(ckpt_slot_name(OPT_SGD, 0) == NULL && ckpt_slot_name(OPT_ADAM, 2) == NULL,
          "no slot names beyond the count");
    test_refusals(d);
    test_latest_and_prune(d);
    test_bad_attributes(d);
    test_averages(d);
    test_overwrite(d);
    test_version1(d);
    test_planted_symlinks(d);
    test_dir_lock(d);
    test_reader_during_writes(d);
    int rc = check_exit();
    if (rc == 0) {
        char run[4200];
        snprintf(run, sizeof run, "%s/run", d);
        ops_rmdir(run);
        ops_rmdir(d);
    } else {
        fprintf(stderr, "files left in %s\n", d);
    }
    return rc;
}
