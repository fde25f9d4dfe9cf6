/* ckpt_meta.c - the attributes of a checkpoint that describe its run
 * (pstrain/ckpt.h lists them): writing them, the valid range of each, and
 * reading them back checked. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_internal.h"
#include "pstrain/version.h"

/* ---- attributes --------------------------------------------------------- */

static int attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *buf,
                      hsize_t count)
{
    hid_t sp = count ? H5Screate_simple(1, &count, NULL) : H5Screate(H5S_SCALAR);
    if (sp < 0) return -1;
    hid_t a = H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (a >= 0 && H5Awrite(a, mtype, buf) >= 0) ? 0 : -1;
    h5_close(a);
    h5_close(sp);
    return rc;
}

/* A fixed-length string (format_version 2): no global heap. */
static int attr_str(hid_t loc, const char *name, const char *val)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    int rc = -1;
    const char *p = val ? val : "";
    if (H5Tset_size(t, strlen(p) + 1) >= 0 && H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0 &&
        H5Tset_cset(t, H5T_CSET_UTF8) >= 0)
        rc = attr_write(loc, name, t, t, p, 0);
    H5Tclose(t);
    return rc;
}

static int attr_i64(hid_t loc, const char *name, int64_t v)
{
    return attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, 0);
}

static int attr_f32(hid_t loc, const char *name, float v)
{
    return attr_write(loc, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &v, 0);
}

static int attr_f64(hid_t loc, const char *name, double v)
{
    return attr_write(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 0);
}

/* Reads a string attribute (variable- or fixed-length) into a malloc'd
 * string. */
char *ckpt_attr_read_str(hid_t loc, const char *name)
{
    if (H5Aexists(loc, name) <= 0) return NULL;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1;
    hid_t mt = -1;
    char *out = NULL;
    if (ft < 0 || H5Tget_class(ft) != H5T_STRING) goto done;
    if (H5Tis_variable_str(ft) > 0) {
        /* the memory type takes the file's character set: HDF5 does not
         * convert between ASCII and UTF-8 */
        mt = H5Tcopy(H5T_C_S1);
        char *p = NULL;
        if (mt < 0 || H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Tset_cset(mt, H5Tget_cset(ft)) < 0 ||
            H5Aread(a, mt, &p) < 0)
            goto done;
        out = pst_strdup(p ? p : "");
        H5free_memory(p);
    } else {
        size_t n = H5Tget_size(ft);
        mt = H5Tcopy(H5T_C_S1);
        if (mt < 0 || H5Tset_size(mt, n + 1) < 0 || H5Tset_strpad(mt, H5T_STR_NULLTERM) < 0 ||
            H5Tset_cset(mt, H5Tget_cset(ft)) < 0)
            goto done;
        out = pst_calloc(n + 1, 1);
        if (H5Aread(a, mt, out) < 0) {
            free(out);
            out = NULL;
        }
    }
done:
    h5_close(mt);
    h5_close(ft);
    h5_close(a);
    return out;
}

/* Reads a numeric attribute of `count` elements (0 = scalar) as mtype. */
int ckpt_attr_read_num(hid_t loc, const char *name, hid_t mtype, void *buf, hssize_t count)
{
    if (H5Aexists(loc, name) <= 0) return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t sp = a >= 0 ? H5Aget_space(a) : -1;
    int rc = -1;
    if (sp >= 0 && H5Sget_simple_extent_npoints(sp) == (count ? count : 1) &&
        H5Aread(a, mtype, buf) >= 0)
        rc = 0;
    h5_close(sp);
    h5_close(a);
    return rc;
}

int ckpt_meta_write(hid_t f, const ckpt_meta *m)
{
    char created[CKPT_NAME_LEN];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const opt_cfg *o = &m->opt;
    int64_t fmtv = CKPT_FORMAT_VERSION;
    int rc = 0;
    rc |= attr_str(f, "format", CKPT_FORMAT);
    rc |= attr_i64(f, "format_version", fmtv);
    rc |= attr_str(f, "model_name", m->model_name);
    rc |= attr_str(f, "model", m->model_text);
    rc |= attr_i64(f, "height", m->height);
    rc |= attr_i64(f, "width", m->width);
    rc |= attr_i64(f, "channels", m->channels);
    rc |= attr_i64(f, "num_classes", m->num_classes);
    rc |= attr_i64(f, "global_step", m->global_step);
    rc |= attr_i64(f, "epoch", m->epoch);
    rc |= attr_i64(f, "epoch_batch", m->epoch_batch);
    rc |= attr_i64(f, "next_batch", m->next_batch);
    rc |= attr_i64(f, "examples", m->examples);
    rc |= attr_write(f, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &m->seed, 0);
    rc |= attr_write(f, "rng_state", H5T_STD_U64LE, H5T_NATIVE_UINT64, m->rng_state, 4);
    rc |= attr_f64(f, "train_seconds", m->train_seconds);
    if (m->augment[0]) rc |= attr_str(f, "augment", m->augment);
    if (m->normalize[0]) rc |= attr_str(f, "normalize", m->normalize);
    rc |= attr_str(f, "mode", m->mode);
    rc |= attr_i64(f, "workers", m->workers);
    rc |= attr_i64(f, "ps", m->ps);
    rc |= attr_i64(f, "batch", m->batch);
    rc |= attr_str(f, "optimizer", g_opt_names[o->kind]);
    rc |= attr_f32(f, "momentum", o->momentum);
    rc |= attr_i64(f, "nesterov", o->nesterov ? 1 : 0);
    rc |= attr_f32(f, "rms_decay", o->rms_decay);
    rc |= attr_f32(f, "rms_eps", o->rms_eps);
    rc |= attr_f32(f, "beta1", o->beta1);
    rc |= attr_f32(f, "beta2", o->beta2);
    rc |= attr_f32(f, "adam_eps", o->adam_eps);
    rc |= attr_f32(f, "lr_base", m->lr.base);
    rc |= attr_f32(f, "lr_decay", m->lr.decay);
    rc |= attr_f32(f, "lr_decay_epochs", m->lr.decay_epochs);
    rc |= attr_i64(f, "steps_per_epoch", m->lr.steps_per_epoch);
    rc |= attr_f32(f, "weight_decay", m->weight_decay);
    rc |= attr_f32(f, "label_smoothing", m->label_smoothing);
    rc |= attr_f32(f, "moving_average_decay", m->ema_decay);
    rc |= attr_f32(f, "lr_warmup_epochs", m->lr.warmup_epochs);
    rc |= attr_str(f, "pstrain_version", pst_version());
    rc |= attr_str(f, "created", created);
    return rc ? -1 : 0;
}

/* ---- the valid range of every attribute ----------------------------------
 * A checkpoint is input like any other: a value outside its range would
 * index before a buffer (global_step = -1 in the last-losses ring), overflow
 * a count (INT64_MAX steps) or be truncated to int (epoch = 2^31). Each is
 * refused on read, with the value as stored, and never written. */

typedef struct int_limit {
    const char *name;
    int64_t lo, hi;
} int_limit;

static const int_limit g_int_limits[] = {
    {"height", 1, CKPT_MAX_SIDE},
    {"width", 1, CKPT_MAX_SIDE},
    {"channels", 1, CKPT_MAX_CHANNELS},
    {"num_classes", 1, INT32_MAX},
    {"global_step", 0, CKPT_MAX_STEPS},
    {"epoch", 0, INT32_MAX - 1},
    {"epoch_batch", 0, CKPT_MAX_STEPS},
    {"next_batch", 0, CKPT_MAX_STEPS},
    {"examples", 0, CKPT_MAX_EXAMPLES},
    {"workers", 1, CKPT_MAX_RANKS},
    {"ps", 0, CKPT_MAX_RANKS},
    {"batch", 1, CKPT_MAX_BATCH},
    {"nesterov", 0, 1},
    {"steps_per_epoch", 0, CKPT_MAX_STEPS},
};

typedef struct real_limit {
    const char *name;
    double lo, hi;
    bool lo_open, hi_open;
} real_limit;

/* The bounds of the corresponding `pstrain train` flags. */
static const real_limit g_real_limits[] = {
    {"momentum", 0, 1, false, false},
    {"rms_decay", 0, 1, false, false},
    {"rms_eps", 0, 1e6, true, false},
    {"beta1", 0, 1, false, true},
    {"beta2", 0, 1, false, true},
    {"adam_eps", 0, 1e6, true, false},
    {"lr_base", 0, 1e6, false, false},
    {"lr_decay", 0, 1, false, false},
    {"lr_decay_epochs", 0, 1e9, false, false},
    {"weight_decay", 0, 1e3, false, false},
    {"label_smoothing", 0, 1, false, true},
    {"train_seconds", 0, 1e15, false, false},
    {"moving_average_decay", 0, 1, false, true}, /* 0: no averages */
    {"lr_warmup_epochs", 0, 1e9, false, false},
};

static const int_limit *int_limit_of(const char *name)
{
    for (size_t i = 0; i < PST_ARRAY_LEN(g_int_limits); i++)
        if (!strcmp(g_int_limits[i].name, name)) return &g_int_limits[i];
    return NULL;
}

static const real_limit *real_limit_of(const char *name)
{
    for (size_t i = 0; i < PST_ARRAY_LEN(g_real_limits); i++)
        if (!strcmp(g_real_limits[i].name, name)) return &g_real_limits[i];
    return NULL;
}

static int int_out_of_range(const char *path, const int_limit *l, const char *shown, pst_err *e)
{
    return pst_fail(e, "%s: attribute %s is %s, expected an integer in [%" PRId64 ", %" PRId64 "]",
                    path, l->name, shown, l->lo, l->hi);
}

static bool real_in_range(const real_limit *l, double v)
{
    return isfinite(v) && (l->lo_open ? v > l->lo : v >= l->lo) &&
           (l->hi_open ? v < l->hi : v <= l->hi);
}

static int real_out_of_range(const char *path, const real_limit *l, double v, pst_err *e)
{
    return pst_fail(e, "%s: attribute %s is %.9g, expected a number in %c%g, %g%c", path, l->name,
                    v, l->lo_open ? '(' : '[', l->lo, l->hi, l->hi_open ? ')' : ']');
}

/* Reads scalar integer attribute `name` exactly, whatever its stored width
 * and sign: *neg says whether it is below zero; then *s holds it, else *u. */
static int attr_int_exact(hid_t f, const char *path, const char *name, bool *neg, int64_t *s,
                          uint64_t *u, pst_err *e)
{
    if (H5Aexists(f, name) <= 0)
        return pst_fail(e, "%s: root attribute '%s' is missing", path, name);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : -1;
    hid_t sp = a >= 0 ? H5Aget_space(a) : -1;
    int rc = -1;
    if (t < 0 || sp < 0) {
        pst_fail(e, "%s: root attribute '%s' is malformed", path, name);
    } else if (H5Tget_class(t) != H5T_INTEGER || H5Sget_simple_extent_npoints(sp) != 1) {
        pst_fail(e, "%s: attribute %s is not a single integer, expected one integer", path, name);
    } else if (H5Tget_sign(t) == H5T_SGN_NONE) {
        *neg = false;
        if (H5Aread(a, H5T_NATIVE_UINT64, u) >= 0) rc = 0;
    } else if (H5Aread(a, H5T_NATIVE_INT64, s) >= 0) {
        *neg = *s < 0;
        if (!*neg) *u = (uint64_t)*s;
        rc = 0;
    }
    if (rc < 0 && t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_INTEGER)
        pst_fail(e, "%s: root attribute '%s' cannot be read", path, name);
    h5_close(sp);
    h5_close(t);
    h5_close(a);
    return rc;
}

/* An integer attribute within its g_int_limits range. */
static int attr_int_checked(hid_t f, const char *path, const char *name, int64_t *out, pst_err *e)
{
    const int_limit *l = int_limit_of(name);
    bool neg;
    int64_t s = 0;
    uint64_t u = 0;
    if (attr_int_exact(f, path, name, &neg, &s, &u, e) < 0) return -1;
    char shown[32];
    if (neg)
        snprintf(shown, sizeof shown, "%" PRId64, s);
    else
        snprintf(shown, sizeof shown, "%" PRIu64, u);
    if (neg ? s < l->lo : (u > (uint64_t)l->hi || (int64_t)u < l->lo))
        return int_out_of_range(path, l, shown, e);
    *out = neg ? s : (int64_t)u;
    return 0;
}

/* A floating-point attribute (float or double as stored) within its
 * g_real_limits range. */
static int attr_real_checked(hid_t f, const char *path, const char *name, double *out, pst_err *e)
{
    const real_limit *l = real_limit_of(name);
    if (H5Aexists(f, name) <= 0)
        return pst_fail(e, "%s: root attribute '%s' is missing", path, name);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : -1;
    hid_t sp = a >= 0 ? H5Aget_space(a) : -1;
    bool ok = t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_FLOAT &&
              H5Sget_simple_extent_npoints(sp) == 1 && H5Aread(a, H5T_NATIVE_DOUBLE, out) >= 0;
    h5_close(sp);
    h5_close(t);
    h5_close(a);
    if (!ok)
        return pst_fail(e, "%s: attribute %s is not a single number, expected one", path, name);
    if (!real_in_range(l, *out)) return real_out_of_range(path, l, *out, e);
    return 0;
}

/* Checks a meta about to be written against the limits a reader applies:
 * what pstrain writes, it reads back. */
int ckpt_meta_check_limits(const char *path, const ckpt_meta *m, pst_err *e)
{
    const struct {
        const char *name;
        int64_t v;
    } ints[] = {{"height", m->height},
                {"width", m->width},
                {"channels", m->channels},
                {"num_classes", m->num_classes},
                {"global_step", m->global_step},
                {"epoch", m->epoch},
                {"epoch_batch", m->epoch_batch},
                {"next_batch", m->next_batch},
                {"examples", m->examples},
                {"workers", m->workers},
                {"ps", m->ps},
                {"batch", m->batch},
                {"steps_per_epoch", m->lr.steps_per_epoch}};
    for (size_t i = 0; i < PST_ARRAY_LEN(ints); i++) {
        const int_limit *l = int_limit_of(ints[i].name);
        if (ints[i].v < l->lo || ints[i].v > l->hi) {
            char shown[32];
            snprintf(shown, sizeof shown, "%" PRId64, ints[i].v);
            int_out_of_range(path, l, shown, e);
            return pst_err_prefix(e, "refusing to write a checkpoint");
        }
    }
    const opt_cfg *o = &m->opt;
    const struct {
        const char *name;
        double v;
    } reals[] = {{"momentum", o->momentum},
                 {"rms_decay", o->rms_decay},
                 {"rms_eps", o->rms_eps},
                 {"beta1", o->beta1},
                 {"beta2", o->beta2},
                 {"adam_eps", o->adam_eps},
                 {"lr_base", m->lr.base},
                 {"lr_decay", m->lr.decay},
                 {"lr_decay_epochs", m->lr.decay_epochs},
                 {"weight_decay", m->weight_decay},
                 {"label_smoothing", m->label_smoothing},
                 {"train_seconds", m->train_seconds},
                 {"moving_average_decay", m->ema_decay},
                 {"lr_warmup_epochs", m->lr.warmup_epochs}};
    for (size_t i = 0; i < PST_ARRAY_LEN(reals); i++) {
        const real_limit *l = real_limit_of(reals[i].name);
        if (!real_in_range(l, reals[i].v)) {
            real_out_of_range(path, l, reals[i].v, e);
            return pst_err_prefix(e, "refusing to write a checkpoint");
        }
    }
    return 0;
}

/* The helpers of ckpt_meta_read: each reads its attributes into m, in the
 * order of the file's contract, and returns 0 or -1 with e set. */
#define GET_INT(name, dst)                                                                         \
    do {                                                                                           \
        if (attr_int_checked(f, path, name, &v, e) < 0) return -1;                                 \
        dst = v;                                                                                   \
    } while (0)
#define GET_REAL(name, dst)                                                                        \
    do {                                                                                           \
        if (attr_real_checked(f, path, name, &d, e) < 0) return -1;                                \
        dst = d;                                                                                   \
    } while (0)

static int missing_attr(const char *path, const char *name, pst_err *e)
{
    pst_fail(e, "%s: root attribute '%s' is missing or malformed", path, name);
    return -1;
}

/* Any 64-bit value is a seed, but not a negative one (HDF5 would convert -1
 * to 0 without a word). */
static int read_seed(hid_t f, const char *path, ckpt_meta *m, pst_err *e)
{
    bool neg;
    int64_t s = 0;
    if (attr_int_exact(f, path, "seed", &neg, &s, &m->seed, e) < 0) return -1;
    if (neg)
        return pst_fail(
            e, "%s: attribute seed is %" PRId64 ", expected an integer in [0, %" PRIu64 "]", path,
            s, UINT64_MAX);
    return 0;
}

/* The input's shape, where the run stands, and its random streams. */
static int read_progress(hid_t f, const char *path, ckpt_meta *m, pst_err *e)
{
    int64_t v;
    double d;
    GET_INT("height", m->height);
    GET_INT("width", m->width);
    GET_INT("channels", m->channels);
    GET_INT("num_classes", m->num_classes);
    GET_INT("global_step", m->global_step);
    GET_INT("epoch", m->epoch);
    GET_INT("epoch_batch", m->epoch_batch);
    GET_INT("next_batch", m->next_batch);
    GET_INT("examples", m->examples);
    if (read_seed(f, path, m, e) < 0) return -1;
    if (ckpt_attr_read_num(f, "rng_state", H5T_NATIVE_UINT64, m->rng_state, 4) < 0)
        return missing_attr(path, "rng_state", e);
    GET_REAL("train_seconds", m->train_seconds);
    GET_INT("workers", m->workers);
    GET_INT("ps", m->ps);
    GET_INT("batch", m->batch);
    return 0;
}

/* The optimizer's hyper-parameters, the schedule and the regularisation. */
static int read_recipe(hid_t f, const char *path, ckpt_meta *m, pst_err *e)
{
    int64_t v;
    double d;
    GET_REAL("momentum", m->opt.momentum);
    GET_INT("nesterov", v);
    m->opt.nesterov = v != 0;
    GET_REAL("rms_decay", m->opt.rms_decay);
    GET_REAL("rms_eps", m->opt.rms_eps);
    GET_REAL("beta1", m->opt.beta1);
    GET_REAL("beta2", m->opt.beta2);
    GET_REAL("adam_eps", m->opt.adam_eps);
    GET_REAL("lr_base", m->lr.base);
    GET_REAL("lr_decay", m->lr.decay);
    GET_REAL("lr_decay_epochs", m->lr.decay_epochs);
    GET_INT("steps_per_epoch", m->lr.steps_per_epoch);
    GET_REAL("weight_decay", m->weight_decay);
    GET_REAL("label_smoothing", m->label_smoothing);
    /* optional: files of an earlier format lack them (and had neither: 0) */
#define GET_REAL_OPT(name, dst)                                                                    \
    do {                                                                                           \
        dst = 0;                                                                                   \
        if (H5Aexists(f, name) > 0) GET_REAL(name, dst);                                           \
    } while (0)
    GET_REAL_OPT("moving_average_decay", m->ema_decay);
    GET_REAL_OPT("lr_warmup_epochs", m->lr.warmup_epochs);
#undef GET_REAL_OPT
    return 0;
}
#undef GET_INT
#undef GET_REAL

/* The moving averages (group /averages, exactly when moving_average_decay >
 * 0), the augmentation and the normalisation (optional). */
static int read_averages(hid_t f, const char *path, ckpt_meta *m, pst_err *e)
{
    m->has_averages = H5Lexists(f, "/averages", H5P_DEFAULT) > 0;
    /* optional: checkpoints before the recipes were recorded have none */
    char *aug = ckpt_attr_read_str(f, "augment");
    snprintf(m->augment, sizeof m->augment, "%s", aug ? aug : "");
    free(aug);
    char *norm = ckpt_attr_read_str(f, "normalize");
    snprintf(m->normalize, sizeof m->normalize, "%s", norm ? norm : "");
    free(norm);
    if (m->has_averages == (m->ema_decay > 0)) return 0;
    if (m->has_averages)
        return pst_fail(e, "%s: group /averages is present but attribute moving_average_decay is 0",
                        path);
    return pst_fail(e, "%s: attribute moving_average_decay is %.9g but group /averages is missing",
                    path, (double)m->ema_decay);
}

static int read_optimizer(hid_t f, const char *path, ckpt_meta *m, pst_err *e)
{
    char *opt = ckpt_attr_read_str(f, "optimizer");
    if (!opt) return missing_attr(path, "optimizer", e);
    int kind = -1;
    for (size_t i = 0; i < PST_ARRAY_LEN(g_opt_names); i++)
        if (!strcmp(opt, g_opt_names[i])) kind = (int)i;
    if (kind < 0) {
        pst_fail(e, "%s: attribute optimizer is '%s', expected sgd, momentum, rmsprop or adam",
                 path, opt);
        free(opt);
        return -1;
    }
    free(opt);
    m->opt.kind = (opt_kind)kind;
    return 0;
}

/* The model, the mode, and who wrote the file when. */
static int read_names(hid_t f, const char *path, ckpt_meta *m, pst_err *e)
{
    static const char *const str_names[] = {"model_name", "model", "mode"};
    for (int i = 0; i < 3; i++) {
        m->owned_[i] = ckpt_attr_read_str(f, str_names[i]);
        if (!m->owned_[i]) return missing_attr(path, str_names[i], e);
    }
    m->model_name = m->owned_[0];
    m->model_text = m->owned_[1];
    m->mode = m->owned_[2];
    static const struct {
        const char *name;
        size_t off;
    } fixed[] = {{"pstrain_version", offsetof(ckpt_meta, pstrain_version)},
                 {"created", offsetof(ckpt_meta, created)}};
    for (size_t i = 0; i < PST_ARRAY_LEN(fixed); i++) {
        char *s = ckpt_attr_read_str(f, fixed[i].name);
        if (!s) return missing_attr(path, fixed[i].name, e);
        snprintf((char *)m + fixed[i].off, CKPT_NAME_LEN, "%s", s);
        free(s);
    }
    return 0;
}

/* Reads the root attributes of an open checkpoint (format already checked
 * by the caller), each within its range. */
int ckpt_meta_read(hid_t f, const char *path, ckpt_meta *m, pst_err *e)
{
    memset(m, 0, sizeof *m);
    int64_t v;
    if (ckpt_attr_read_num(f, "format_version", H5T_NATIVE_INT64, &v, 0) < 0) {
        missing_attr(path, "format_version", e);
        goto fail;
    }
    m->format_version = (int)v; /* open_ckpt checked it */
    if (read_progress(f, path, m, e) < 0 || read_recipe(f, path, m, e) < 0 ||
        read_averages(f, path, m, e) < 0 || read_optimizer(f, path, m, e) < 0 ||
        read_names(f, path, m, e) < 0)
        goto fail;
    return 0;
fail:
    ckpt_meta_free(m);
    return -1;
}
