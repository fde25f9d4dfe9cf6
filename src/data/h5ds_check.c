/*
 * h5ds_check.c - checking pstrain data sets (layout in pstrain/h5ds.h): the
 * one pass, h5ds_check_file, that verifies a file and, when asked, fills an
 * h5ds with what it read, so h5ds_verify (here) and h5ds_open (h5ds.c) can
 * never disagree about what a sound data set is. Every problem is one line
 * naming the attribute or dataset and what was expected; the innermost
 * message of HDF5's error stack is folded into it.
 */
#include "h5ds_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const split_names[H5DS_MAX_SPLITS] = {"train", "val", "test"};

/* Decompressed-chunk cache per images dataset. Whole-chunk reads (the fast
 * path) need none, but random reads of single images would otherwise
 * decompress a whole chunk per image (docs/platform.md, "HDF5": the chunk-cache pitfall). */
#define H5DS_CACHE_BYTES ((size_t)32 << 20)
#define H5DS_CACHE_SLOTS 16411 /* prime, ~100x the chunks a 32 MiB cache holds */
/* Labels are range-checked in blocks of this many. */
#define H5DS_LABEL_BLOCK ((int64_t)1 << 20)

/* ---- problems ---------------------------------------------------------------- */

typedef struct vctx {
    h5ds_problem_fn report;
    void *ctx;
    int count;
} vctx;

static void __attribute__((format(printf, 2, 3))) problem(vctx *v, const char *fmt, ...)
{
    char msg[PST_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    v->count++;
    if (v->report) v->report(v->ctx, msg);
}

/* "uint8", "int32", "float64", "string", ... for messages. */
static const char *type_desc(hid_t t, char buf[32])
{
    H5T_class_t cls = H5Tget_class(t);
    size_t size = H5Tget_size(t);
    switch (cls) {
    case H5T_INTEGER:
        snprintf(buf, 32, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", size * 8);
        break;
    case H5T_FLOAT:
        snprintf(buf, 32, "float%zu", size * 8);
        break;
    case H5T_STRING:
        snprintf(buf, 32, "string");
        break;
    case H5T_COMPOUND:
        snprintf(buf, 32, "compound");
        break;
    case H5T_ENUM:
        snprintf(buf, 32, "enum");
        break;
    case H5T_VLEN:
        snprintf(buf, 32, "vlen");
        break;
    case H5T_ARRAY:
        snprintf(buf, 32, "array");
        break;
    default:
        snprintf(buf, 32, "an unsupported type");
        break;
    }
    return buf;
}

static bool is_int_type(hid_t t, size_t size, bool is_signed)
{
    return H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == size &&
           (H5Tget_sign(t) == H5T_SGN_2) == is_signed;
}

static const char *shape_desc(int rank, const hsize_t *dims, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    if (rank == 0) snprintf(buf, n, "a scalar");
    for (int i = 0; i < rank && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "[%llu]", (unsigned long long)dims[i]);
    return buf;
}

/* ---- root attributes ----------------------------------------------------------- */

/* Opens attribute `name` of `obj`, or reports it missing and returns -1. */
static hid_t attr_open(vctx *v, hid_t obj, const char *name, const char *expect)
{
    char why[256];
    htri_t ex = H5Aexists(obj, name);
    if (ex <= 0) {
        if (ex < 0)
            problem(v, "root attribute '%s': cannot be checked (%s)", name, h5u_reason(why));
        else
            problem(v, "root attribute '%s': missing (expected %s)", name, expect);
        return -1;
    }
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) problem(v, "root attribute '%s': cannot be opened (%s)", name, h5u_reason(why));
    return a;
}

/* Number of elements of an attribute's dataspace, or -1. */
static hssize_t attr_npoints(hid_t a)
{
    hid_t s = H5Aget_space(a);
    if (s < 0) return -1;
    hssize_t n = H5Sget_simple_extent_npoints(s);
    H5Sclose(s);
    return n;
}

/* An integer scalar attribute within [lo, hi]. Returns 0 and sets *out, or
 * -1 after reporting the problem. */
static int check_attr_int(vctx *v, hid_t root, const char *name, int64_t lo, int64_t hi,
                          int64_t *out)
{
    char expect[96], tbuf[32], why[256];
    snprintf(expect, sizeof expect, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    hid_t a = attr_open(v, root, name, expect), t = -1;
    int rc = -1;
    if (a < 0) return -1;
    t = H5Aget_type(a);
    if (t < 0 || H5Tget_class(t) != H5T_INTEGER) {
        problem(v, "root attribute '%s': type %s, expected %s", name,
                t < 0 ? "unknown" : type_desc(t, tbuf), expect);
        goto done;
    }
    if (attr_npoints(a) != 1) {
        problem(v, "root attribute '%s': has %lld values, expected one", name,
                (long long)attr_npoints(a));
        goto done;
    }
    int64_t x;
    if (H5Aread(a, H5T_NATIVE_INT64, &x) < 0) {
        problem(v, "root attribute '%s': cannot be read (%s)", name, h5u_reason(why));
        goto done;
    }
    if (x < lo || x > hi) {
        problem(v, "root attribute '%s' = %lld, expected %s", name, (long long)x, expect);
        goto done;
    }
    *out = x;
    rc = 0;
done:
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* A scalar string attribute (fixed or variable length) copied into buf
 * (truncated to n-1 bytes). `expect` describes it for messages. 0 or -1
 * after reporting. */
static int check_attr_str(vctx *v, hid_t root, const char *name, const char *expect, char *buf,
                          size_t n)
{
    char tbuf[32], why[256];
    hid_t a = attr_open(v, root, name, expect), t = -1, mt = -1;
    int rc = -1;
    if (a < 0) return -1;
    t = H5Aget_type(a);
    if (t < 0 || H5Tget_class(t) != H5T_STRING) {
        problem(v, "root attribute '%s': type %s, expected a string", name,
                t < 0 ? "unknown" : type_desc(t, tbuf));
        goto done;
    }
    if (attr_npoints(a) != 1) {
        problem(v, "root attribute '%s': has %lld values, expected one string", name,
                (long long)attr_npoints(a));
        goto done;
    }
    mt = H5Tcopy(H5T_C_S1);
    if (H5Tis_variable_str(t) > 0) {
        char *s = NULL;
        if (H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Tset_cset(mt, H5Tget_cset(t)) < 0 ||
            H5Aread(a, mt, &s) < 0 || !s) {
            problem(v, "root attribute '%s': cannot be read (%s)", name, h5u_reason(why));
            goto done;
        }
        snprintf(buf, n, "%s", s);
        H5free_memory(s);
    } else {
        size_t size = H5Tget_size(t);
        char *s = pst_calloc(1, size + 1);
        if (H5Tset_size(mt, size) < 0 || H5Tset_cset(mt, H5Tget_cset(t)) < 0 ||
            H5Aread(a, mt, s) < 0) {
            free(s);
            problem(v, "root attribute '%s': cannot be read (%s)", name, h5u_reason(why));
            goto done;
        }
        snprintf(buf, n, "%s", s);
        free(s);
    }
    rc = 0;
done:
    if (mt >= 0) H5Tclose(mt);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* A float attribute with `count` finite values in [lo, hi]. */
static int check_attr_floats(vctx *v, hid_t root, const char *name, int count, double lo, double hi,
                             float *out)
{
    char expect[128], tbuf[32], why[256];
    snprintf(expect, sizeof expect, "%d finite float%s in [%g, %g] (one per channel)", count,
             count == 1 ? "" : "s", lo, hi);
    hid_t a = attr_open(v, root, name, expect), t = -1;
    int rc = -1;
    if (a < 0) return -1;
    t = H5Aget_type(a);
    if (t < 0 || H5Tget_class(t) != H5T_FLOAT) {
        problem(v, "root attribute '%s': type %s, expected %s", name,
                t < 0 ? "unknown" : type_desc(t, tbuf), expect);
        goto done;
    }
    hssize_t np = attr_npoints(a);
    if (np != count) {
        problem(v, "root attribute '%s': has %lld values, expected %s", name, (long long)np,
                expect);
        goto done;
    }
    double x[H5DS_MAX_CHANNELS];
    if (H5Aread(a, H5T_NATIVE_DOUBLE, x) < 0) {
        problem(v, "root attribute '%s': cannot be read (%s)", name, h5u_reason(why));
        goto done;
    }
    rc = 0;
    for (int c = 0; c < count; c++) {
        if (!isfinite(x[c]) || x[c] < lo || x[c] > hi) {
            problem(v, "root attribute '%s'[%d] = %g, expected %s", name, c, x[c], expect);
            rc = -1;
        }
        out[c] = (float)x[c];
    }
done:
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* ---- /classes ---------------------------------------------------------------- */

static int cmp_name_idx(const void *a, const void *b, void *names)
{
    char **nm = names;
    int ia = *(const int *)a, ib = *(const int *)b;
    int c = strcmp(nm[ia], nm[ib]);
    return c ? c : (ia > ib) - (ia < ib);
}

/* Reads the strings of 1-D string dataset `d` (fixed or variable length)
 * into K malloc'd C strings. */
static int read_strings(hid_t d, hid_t ftype, int64_t k, char ***out)
{
    hid_t mt = H5Tcopy(H5T_C_S1);
    int rc = -1;
    char **names = pst_calloc((size_t)k, sizeof *names);
    if (mt < 0 || H5Tset_cset(mt, H5Tget_cset(ftype)) < 0) goto done;
    if (H5Tis_variable_str(ftype) > 0) {
        char **raw = pst_calloc((size_t)k, sizeof *raw);
        if (H5Tset_size(mt, H5T_VARIABLE) < 0 ||
            H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0) {
            free(raw);
            goto done;
        }
        for (int64_t i = 0; i < k; i++) {
            names[i] = pst_strdup(raw[i] ? raw[i] : "");
            if (raw[i]) H5free_memory(raw[i]);
        }
        free(raw);
    } else {
        size_t size = H5Tget_size(ftype);
        char *raw = pst_calloc((size_t)k, size);
        if (H5Tset_size(mt, size) < 0 || H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0) {
            free(raw);
            goto done;
        }
        for (int64_t i = 0; i < k; i++) {
            names[i] = pst_malloc(size + 1);
            memcpy(names[i], raw + (size_t)i * size, size);
            names[i][size] = 0;
        }
        free(raw);
    }
    rc = 0;
done:
    if (mt >= 0) H5Tclose(mt);
    if (rc < 0) {
        for (int64_t i = 0; i < k; i++) free(names[i]);
        free(names);
        names = NULL;
    }
    *out = names;
    return rc;
}

/* Checks /classes against num_classes (k, or -1 when the attribute itself
 * is bad) and returns the names (k strings) when sound, else NULL. */
static char **check_classes(vctx *v, hid_t file, int64_t k)
{
    char tbuf[32], why[256], shape[96];
    hid_t d = -1, t = -1, s = -1;
    char **names = NULL;
    if (H5Lexists(file, "classes", H5P_DEFAULT) <= 0) {
        problem(v, "/classes: missing (expected num_classes variable-length UTF-8 strings)");
        return NULL;
    }
    d = H5Dopen2(file, "classes", H5P_DEFAULT);
    if (d < 0) {
        problem(v, "/classes: not a dataset (%s)", h5u_reason(why));
        return NULL;
    }
    t = H5Dget_type(d);
    s = H5Dget_space(d);
    if (t < 0 || s < 0) {
        problem(v, "/classes: cannot be inspected (%s)", h5u_reason(why));
        goto done;
    }
    if (H5Tget_class(t) != H5T_STRING) {
        problem(v, "/classes: dtype %s, expected strings", type_desc(t, tbuf));
        goto done;
    }
    hsize_t dims[H5S_MAX_RANK];
    int rank = H5Sget_simple_extent_dims(s, dims, NULL);
    if (rank != 1) {
        problem(v, "/classes: shape %s, expected [num_classes]",
                shape_desc(rank, dims, shape, sizeof shape));
        goto done;
    }
    if (k >= 0 && (int64_t)dims[0] != k) {
        problem(v, "/classes: %llu names, expected num_classes = %lld", (unsigned long long)dims[0],
                (long long)k);
        goto done;
    }
    if (k < 0) goto done; /* num_classes already reported */
    if (read_strings(d, t, k, &names) < 0) {
        problem(v, "/classes: cannot be read (%s)", h5u_reason(why));
        goto done;
    }
    int bad = 0;
    int *order = pst_malloc((size_t)k * sizeof *order);
    for (int i = 0; i < k; i++) {
        order[i] = i;
        if (!names[i][0]) {
            problem(v, "/classes[%d]: empty name", i);
            bad++;
        }
    }
    qsort_r(order, (size_t)k, sizeof *order, cmp_name_idx, names);
    for (int64_t i = 1; i < k; i++) {
        if (names[order[i]][0] && !strcmp(names[order[i]], names[order[i - 1]])) {
            problem(v, "/classes[%d] and [%d]: both named '%s', expected distinct names",
                    order[i - 1], order[i], names[order[i]]);
            bad++;
        }
    }
    free(order);
    if (bad) {
        for (int64_t i = 0; i < k; i++) free(names[i]);
        free(names);
        names = NULL;
    }
done:
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
    return names;
}

/* ---- splits ---------------------------------------------------------------- */

typedef struct shape_attrs {
    int64_t h, w, c, k; /* -1 where the attribute is bad */
} shape_attrs;

/* Images and labels must be stored in this file, chunked or contiguous: a
 * virtual dataset whose source file is missing reads as fill values (zeros)
 * and trained silently; external raw files and compact storage are refused
 * with it. 0, or -1 after reporting. */
static int check_storage(vctx *v, hid_t d, const char *split, const char *dset)
{
    char why[256];
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) {
        problem(v, "/%s/%s: storage cannot be inspected (%s)", split, dset, h5u_reason(why));
        return -1;
    }
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int next = H5Pget_external_count(dcpl);
    H5Pclose(dcpl);
    const char *bad = NULL;
    if (layout == H5D_VIRTUAL)
        bad = "a virtual dataset (its data live in other files)";
    else if (next != 0)
        bad = "external storage (its data live in raw files beside the HDF5 file)";
    else if (layout != H5D_CHUNKED && layout != H5D_CONTIGUOUS)
        bad = layout == H5D_COMPACT ? "compact storage" : "an unknown storage layout";
    if (!bad) return 0;
    problem(v, "/%s/%s: %s, expected chunked or contiguous storage in this file", split, dset, bad);
    return -1;
}

/* Reads image `i` of images dataset `d` (a probe that the data decompress). */
static int probe_image(hid_t d, int64_t i, size_t image_bytes, const hsize_t *dims)
{
    uint8_t *buf = pst_malloc(image_bytes);
    hid_t fs = H5Dget_space(d), ms = -1;
    int rc = -1;
    hsize_t start[4] = {(hsize_t)i, 0, 0, 0}, count[4] = {1, dims[1], dims[2], dims[3]};
    /* memory space of the selection's own shape: HDF5 then copies whole
     * rows instead of mapping element by element (10x faster) */
    if (fs < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0) goto done;
    ms = H5Screate_simple(4, count, NULL);
    if (ms < 0 || H5Dread(d, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, buf) < 0) goto done;
    rc = 0;
done:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    free(buf);
    return rc;
}

/* Checks /<name>/images. Returns the open dataset (with a chunk cache)
 * and sets *n and *chunk_images, or -1 after reporting. */
static hid_t check_images(vctx *v, hid_t g, const char *name, const shape_attrs *sa, int64_t *n,
                          int64_t *chunk_images)
{
    char tbuf[32], why[256], shape[96];
    hid_t dapl = -1, d = -1, t = -1, s = -1, dcpl = -1;
    bool ok = false;
    if (H5Lexists(g, "images", H5P_DEFAULT) <= 0) {
        problem(v, "/%s/images: missing (expected uint8 [N][H][W][C])", name);
        return -1;
    }
    dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (dapl >= 0) H5Pset_chunk_cache(dapl, H5DS_CACHE_SLOTS, H5DS_CACHE_BYTES, 1.0);
    d = H5Dopen2(g, "images", dapl >= 0 ? dapl : H5P_DEFAULT);
    if (d < 0) {
        problem(v, "/%s/images: not a dataset (%s)", name, h5u_reason(why));
        goto done;
    }
    t = H5Dget_type(d);
    s = H5Dget_space(d);
    if (t < 0 || s < 0) {
        problem(v, "/%s/images: cannot be inspected (%s)", name, h5u_reason(why));
        goto done;
    }
    if (!is_int_type(t, 1, false)) {
        problem(v, "/%s/images: dtype %s, expected uint8", name, type_desc(t, tbuf));
        goto done;
    }
    if (check_storage(v, d, name, "images") < 0) goto done;
    hsize_t dims[H5S_MAX_RANK];
    int rank = H5Sget_simple_extent_dims(s, dims, NULL);
    if (rank != 4) {
        problem(v, "/%s/images: shape %s, expected [N][H][W][C] (4 dimensions)", name,
                shape_desc(rank, dims, shape, sizeof shape));
        goto done;
    }
    if (sa->h < 0 || sa->w < 0 || sa->c < 0) goto done; /* attributes already reported */
    if ((int64_t)dims[1] != sa->h || (int64_t)dims[2] != sa->w || (int64_t)dims[3] != sa->c) {
        problem(v,
                "/%s/images: shape %s, expected [N][%lld][%lld][%lld] (height, width, "
                "channels attributes)",
                name, shape_desc(rank, dims, shape, sizeof shape), (long long)sa->h,
                (long long)sa->w, (long long)sa->c);
        goto done;
    }
    if (dims[0] == 0) {
        problem(v, "/%s/images: no images (expected at least one)", name);
        goto done;
    }
    *n = (int64_t)dims[0];
    size_t image_bytes = (size_t)(sa->h * sa->w * sa->c);
    /* images per chunk: whole-image chunks give their first dimension;
     * other layouts get a read unit of about 1 MiB */
    int64_t per_mib = PST_MAX((int64_t)1, (int64_t)(((size_t)1 << 20) / image_bytes));
    *chunk_images = PST_MIN(per_mib, *n);
    dcpl = H5Dget_create_plist(d);
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t cd[4];
        if (H5Pget_chunk(dcpl, 4, cd) == 4 && cd[1] == dims[1] && cd[2] == dims[2] &&
            cd[3] == dims[3])
            *chunk_images = PST_MIN((int64_t)cd[0], *n);
    }
    if (probe_image(d, 0, image_bytes, dims) < 0 || probe_image(d, *n - 1, image_bytes, dims) < 0) {
        problem(v, "/%s/images: image data cannot be read (%s)", name, h5u_reason(why));
        goto done;
    }
    ok = true;
done:
    if (dcpl >= 0) H5Pclose(dcpl);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (dapl >= 0) H5Pclose(dapl);
    if (!ok && d >= 0) {
        H5Dclose(d);
        d = -1;
    }
    return d;
}

/* Checks /<name>/labels: int32 [n] (n = -1 when the images were bad), all
 * in [0, k) (k = -1 when num_classes was bad). Returns the open dataset or
 * -1 after reporting. */
static hid_t check_labels(vctx *v, hid_t g, const char *name, int64_t n, int64_t k, const char *per)
{
    char tbuf[32], why[256], shape[96];
    hid_t d = -1, t = -1, s = -1, ms = -1;
    int32_t *buf = NULL;
    bool ok = false;
    if (H5Lexists(g, "labels", H5P_DEFAULT) <= 0) {
        problem(v, "/%s/labels: missing (expected int32 [N])", name);
        return -1;
    }
    d = H5Dopen2(g, "labels", H5P_DEFAULT);
    if (d < 0) {
        problem(v, "/%s/labels: not a dataset (%s)", name, h5u_reason(why));
        return -1;
    }
    t = H5Dget_type(d);
    s = H5Dget_space(d);
    if (t < 0 || s < 0) {
        problem(v, "/%s/labels: cannot be inspected (%s)", name, h5u_reason(why));
        goto done;
    }
    if (!is_int_type(t, 4, true)) {
        problem(v, "/%s/labels: dtype %s, expected int32", name, type_desc(t, tbuf));
        goto done;
    }
    if (check_storage(v, d, name, "labels") < 0) goto done;
    hsize_t dims[H5S_MAX_RANK];
    int rank = H5Sget_simple_extent_dims(s, dims, NULL);
    if (rank != 1) {
        problem(v, "/%s/labels: shape %s, expected [N] (1 dimension)", name,
                shape_desc(rank, dims, shape, sizeof shape));
        goto done;
    }
    if (n >= 0 && (int64_t)dims[0] != n) {
        problem(v, "/%s/labels: %llu labels, expected %lld (one per image of /%s/%s)", name,
                (unsigned long long)dims[0], (long long)n, name, per);
        goto done;
    }
    if (k < 0) goto done;
    /* range check, block by block */
    int64_t total = (int64_t)dims[0], nbad = 0, first_bad = -1;
    int32_t first_val = 0;
    int64_t block = PST_MIN(total, H5DS_LABEL_BLOCK);
    buf = pst_malloc((size_t)PST_MAX(block, (int64_t)1) * sizeof *buf);
    for (int64_t at = 0; at < total; at += block) {
        hsize_t start = (hsize_t)at, cnt = (hsize_t)PST_MIN(block, total - at);
        if (ms >= 0) H5Sclose(ms);
        ms = H5Screate_simple(1, &cnt, NULL);
        if (ms < 0 || H5Sselect_hyperslab(s, H5S_SELECT_SET, &start, NULL, &cnt, NULL) < 0 ||
            H5Dread(d, H5T_NATIVE_INT32, ms, s, H5P_DEFAULT, buf) < 0) {
            problem(v, "/%s/labels: cannot be read (%s)", name, h5u_reason(why));
            goto done;
        }
        for (hsize_t i = 0; i < cnt; i++) {
            if (buf[i] < 0 || buf[i] >= k) {
                if (!nbad++) {
                    first_bad = at + (int64_t)i;
                    first_val = buf[i];
                }
            }
        }
    }
    if (nbad) {
        problem(v, "/%s/labels: %lld label%s outside [0, %lld) (num_classes), first [%lld] = %d",
                name, (long long)nbad, nbad == 1 ? "" : "s", (long long)k, (long long)first_bad,
                first_val);
        goto done;
    }
    ok = true;
done:
    free(buf);
    if (ms >= 0) H5Sclose(ms);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (!ok) {
        H5Dclose(d);
        d = -1;
    }
    return d;
}

/* ---- encoded splits ----------------------------------------------------------- */

/* Opens 1-D dataset /<split>/<dset> of integer type (`size` bytes, signed
 * or not; `tname` for messages), stored in this file, and sets *len. The
 * open dataset, or -1 after reporting. */
static hid_t open_1d(vctx *v, hid_t g, const char *split, const char *dset, size_t size,
                     bool is_signed, const char *tname, const char *shape_expect, hid_t dapl,
                     int64_t *len)
{
    char tbuf[32], why[256], shape[96];
    hid_t d = -1, t = -1, s = -1;
    bool ok = false;
    if (H5Lexists(g, dset, H5P_DEFAULT) <= 0) {
        problem(v, "/%s/%s: missing (expected %s %s)", split, dset, tname, shape_expect);
        return -1;
    }
    d = H5Dopen2(g, dset, dapl >= 0 ? dapl : H5P_DEFAULT);
    if (d < 0) {
        problem(v, "/%s/%s: not a dataset (%s)", split, dset, h5u_reason(why));
        return -1;
    }
    t = H5Dget_type(d);
    s = H5Dget_space(d);
    if (t < 0 || s < 0) {
        problem(v, "/%s/%s: cannot be inspected (%s)", split, dset, h5u_reason(why));
        goto done;
    }
    if (!is_int_type(t, size, is_signed)) {
        problem(v, "/%s/%s: dtype %s, expected %s", split, dset, type_desc(t, tbuf), tname);
        goto done;
    }
    if (check_storage(v, d, split, dset) < 0) goto done;
    hsize_t dims[H5S_MAX_RANK];
    int rank = H5Sget_simple_extent_dims(s, dims, NULL);
    if (rank != 1) {
        problem(v, "/%s/%s: shape %s, expected %s (1 dimension)", split, dset,
                shape_desc(rank, dims, shape, sizeof shape), shape_expect);
        goto done;
    }
    *len = (int64_t)dims[0];
    ok = true;
done:
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (!ok && d >= 0) {
        H5Dclose(d);
        d = -1;
    }
    return d;
}

/* /<split>/offsets [n+1]: 0 first, strictly increasing, the last = total
 * (the length of /<split>/encoded). 0, or -1 after reporting. */
static int check_offsets(vctx *v, hid_t d, const char *name, int64_t n, int64_t total)
{
    char why[256];
    int64_t block = PST_MIN(n + 1, H5DS_LABEL_BLOCK), prev = 0;
    int64_t *buf = pst_malloc((size_t)block * sizeof *buf);
    int rc = -1;
    for (int64_t at = 0; at <= n; at += block) {
        int64_t cnt = PST_MIN(block, n + 1 - at);
        if (h5ds_read_1d(d, H5T_NATIVE_INT64, at, cnt, buf) < 0) {
            problem(v, "/%s/offsets: cannot be read (%s)", name, h5u_reason(why));
            goto done;
        }
        for (int64_t i = 0; i < cnt; i++) {
            int64_t x = buf[i], j = at + i;
            if (j == 0 && x != 0) {
                problem(v, "/%s/offsets[0] = %lld, expected 0", name, (long long)x);
                goto done;
            }
            if (j > 0 && x <= prev) {
                problem(v,
                        "/%s/offsets[%lld] = %lld after offsets[%lld] = %lld, expected strictly "
                        "increasing offsets (every image at least one byte)",
                        name, (long long)j, (long long)x, (long long)(j - 1), (long long)prev);
                goto done;
            }
            prev = x;
        }
    }
    if (prev != total) {
        problem(v,
                "/%s/offsets[%lld] = %lld, expected %lld (the last offset is the size of "
                "/%s/encoded)",
                name, (long long)n, (long long)prev, (long long)total, name);
        goto done;
    }
    rc = 0;
done:
    free(buf);
    return rc;
}

/* /<split>/heights or widths [n]: every value in [1, 65535] (a JPEG's side). */
static int check_sides(vctx *v, hid_t d, const char *name, const char *dset, int64_t n)
{
    char why[256];
    int64_t block = PST_MIN(n, H5DS_LABEL_BLOCK), nbad = 0, first_bad = -1;
    int32_t first_val = 0;
    int32_t *buf = pst_malloc((size_t)block * sizeof *buf);
    int rc = -1;
    for (int64_t at = 0; at < n; at += block) {
        int64_t cnt = PST_MIN(block, n - at);
        if (h5ds_read_1d(d, H5T_NATIVE_INT32, at, cnt, buf) < 0) {
            problem(v, "/%s/%s: cannot be read (%s)", name, dset, h5u_reason(why));
            goto done;
        }
        for (int64_t i = 0; i < cnt; i++)
            if (buf[i] < 1 || buf[i] > 65535) {
                if (!nbad++) {
                    first_bad = at + i;
                    first_val = buf[i];
                }
            }
    }
    if (nbad) {
        problem(v, "/%s/%s: %lld value%s outside [1, 65535] (an image's side), first [%lld] = %d",
                name, dset, (long long)nbad, nbad == 1 ? "" : "s", (long long)first_bad, first_val);
        goto done;
    }
    rc = 0;
done:
    free(buf);
    return rc;
}

/* Checks the datasets of encoded split `name` (not labels) and fills sp's
 * encoded fields and ids; sp->count = N, or -1 when it cannot be known.
 * Returns 0 when sound, -1 after reporting. */
static int check_encoded_split(vctx *v, hid_t g, const char *name, h5ds_split *sp)
{
    char why[256];
    int64_t total = -1, noff = -1, nh = -1, nw = -1;
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS), dcpl = -1;
    int bad = 0;
    sp->count = -1;
    /* No chunk cache: HDF5 1.10's kept far more than its limit when parts of
     * Fletcher-32 chunks were read in a shuffled order (330 MB of RSS after
     * reading a 331 MB split with a 32 MiB cache, bench_encoded), and reading
     * without one was faster too (1.4 GB/s per core against 0.33). Each read
     * reads, checks and copies the chunks it touches. */
    if (dapl >= 0) H5Pset_chunk_cache(dapl, 0, 0, 1.0);
    sp->encoded_id =
        open_1d(v, g, name, "encoded", 1, false, "uint8", "[total_bytes]", dapl, &total);
    H5Pclose(dapl);
    sp->offsets_id = open_1d(v, g, name, "offsets", 8, true, "int64", "[N+1]", -1, &noff);
    sp->heights_id = open_1d(v, g, name, "heights", 4, true, "int32", "[N]", -1, &nh);
    sp->widths_id = open_1d(v, g, name, "widths", 4, true, "int32", "[N]", -1, &nw);
    if (sp->encoded_id < 0 || sp->offsets_id < 0 || sp->heights_id < 0 || sp->widths_id < 0)
        return -1;
    if (noff < 2) {
        problem(v, "/%s/offsets: %lld values, expected N+1 >= 2 (at least one image)", name,
                (long long)noff);
        return -1;
    }
    int64_t n = noff - 1;
    sp->count = n;
    if (nh != n) {
        problem(v, "/%s/heights: %lld values, expected %lld (one per image of /%s/offsets)", name,
                (long long)nh, (long long)n, name);
        bad++;
    }
    if (nw != n) {
        problem(v, "/%s/widths: %lld values, expected %lld (one per image of /%s/offsets)", name,
                (long long)nw, (long long)n, name);
        bad++;
    }
    if (check_offsets(v, sp->offsets_id, name, n, total) < 0) bad++;
    if (nh == n && check_sides(v, sp->heights_id, name, "heights", n) < 0) bad++;
    if (nw == n && check_sides(v, sp->widths_id, name, "widths", n) < 0) bad++;
    if (bad) return -1;
    /* a probe that the bytes are readable at both ends (two chunks, their checksums) */
    uint8_t b;
    if (h5ds_read_1d(sp->encoded_id, H5T_NATIVE_UINT8, 0, 1, &b) < 0 ||
        h5ds_read_1d(sp->encoded_id, H5T_NATIVE_UINT8, total - 1, 1, &b) < 0) {
        problem(v, "/%s/encoded: cannot be read (%s)", name, h5u_reason(why));
        return -1;
    }
    sp->encoded_bytes = total;
    sp->encoded_chunk_bytes = (int64_t)1 << 20;
    dcpl = H5Dget_create_plist(sp->encoded_id);
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t cd;
        if (H5Pget_chunk(dcpl, 1, &cd) == 1) sp->encoded_chunk_bytes = (int64_t)cd;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    /* images per chunk, on average */
    double per = (double)n * (double)sp->encoded_chunk_bytes / (double)total;
    sp->chunk_images = PST_MAX((int64_t)1, PST_MIN(n, (int64_t)per));
    return 0;
}

/* ---- the file, its root attributes, its splits ----------------------------------- */

/* Opens `path` read-only as HDF5 after the checks that give a clear reason
 * (missing, a directory, not a regular file, unreadable, no HDF5
 * signature). Returns the file, or -1 with `e` set. */
static hid_t open_h5_file(const char *path, pst_err *e)
{
    char why[256];
    struct stat st;
    if (stat(path, &st) < 0) return pst_fail(e, "%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return pst_fail(e, "%s: is a directory, expected an HDF5 file", path);
    /* open() would block on a FIFO, and HDF5 needs a seekable file anyway */
    if (!S_ISREG(st.st_mode))
        return pst_fail(e, "%s: not a regular file, expected an HDF5 file", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC); /* a clear reason for unreadable files */
    if (fd < 0) return pst_fail(e, "%s: cannot open: %s", path, strerror(errno));
    close(fd);
    htri_t is_h5 = H5Fis_hdf5(path);
    if (is_h5 <= 0)
        return pst_fail(e, "%s: not an HDF5 file (%s)", path,
                        is_h5 < 0 ? h5u_reason(why) : "no HDF5 signature");
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0)
        return pst_fail(e, "%s: HDF5 setup failed (%s)", path, h5u_reason(why));
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (file < 0) return pst_fail(e, "%s: cannot open as HDF5 (%s)", path, h5u_reason(why));
    return file;
}

/* The root attributes 'format', 'format_version' and 'storage', and their
 * agreement (encoded storage has its own version). *version: the
 * format_version read (0 if unreadable). Returns the storage
 * (H5DS_STORE_PIXELS when the attribute is missing, as in older files), or
 * -1 when it is bad (reported). */
static int check_format(vctx *v, hid_t file, int64_t *version)
{
    char why[256];
    char format[64] = "";
    if (check_attr_str(v, file, "format", "the string '" H5DS_FORMAT "'", format, sizeof format) ==
            0 &&
        strcmp(format, H5DS_FORMAT) != 0)
        problem(v, "root attribute 'format' = '%s', expected '%s'", format, H5DS_FORMAT);
    bool version_ok = false;
    if (check_attr_int(v, file, "format_version", 1, INT32_MAX, version) == 0) {
        if (*version < H5DS_FORMAT_VERSION_MIN || *version > H5DS_FORMAT_VERSION_MAX)
            problem(v,
                    "root attribute 'format_version' = %lld, expected %d to %d (the versions "
                    "this pstrain reads)",
                    (long long)*version, H5DS_FORMAT_VERSION_MIN, H5DS_FORMAT_VERSION_MAX);
        else
            version_ok = true;
    }
    int storage = H5DS_STORE_PIXELS;
    htri_t has_storage = H5Aexists(file, "storage");
    if (has_storage > 0) {
        char st_name[64] = "";
        if (check_attr_str(v, file, "storage", "the string 'pixels' or 'encoded'", st_name,
                           sizeof st_name) < 0) {
            storage = -1;
        } else if (!strcmp(st_name, "encoded")) {
            storage = H5DS_STORE_ENCODED;
        } else if (strcmp(st_name, "pixels") != 0) {
            problem(v, "root attribute 'storage' = '%s', expected 'pixels' or 'encoded'", st_name);
            storage = -1;
        }
    } else if (has_storage < 0) {
        problem(v, "root attribute 'storage': cannot be checked (%s)", h5u_reason(why));
        storage = -1;
    }
    if (version_ok && storage == H5DS_STORE_ENCODED && *version != H5DS_FORMAT_VERSION_ENCODED)
        problem(v, "root attribute 'format_version' = %lld, expected %d (storage 'encoded')",
                (long long)*version, H5DS_FORMAT_VERSION_ENCODED);
    if (version_ok && storage == H5DS_STORE_PIXELS && *version == H5DS_FORMAT_VERSION_ENCODED) {
        if (has_storage > 0)
            problem(v,
                    "root attribute 'format_version' = %lld, expected %d to %d (storage "
                    "'pixels'; version %d is encoded storage)",
                    (long long)*version, H5DS_FORMAT_VERSION_MIN, H5DS_FORMAT_VERSION,
                    H5DS_FORMAT_VERSION_ENCODED);
        else
            problem(v,
                    "root attribute 'storage': missing (expected 'encoded': format_version %d "
                    "is encoded storage)",
                    H5DS_FORMAT_VERSION_ENCODED);
    }
    return storage;
}

/* The root attributes that describe the images (height, width, channels,
 * num_classes; -1 in *sa where bad), the normalisation (into ds->mean,
 * ds->std), source, created and the class names (ds->class_names). */
static void check_shape(vctx *v, hid_t file, bool enc, shape_attrs *sa, h5ds *ds)
{
    /* encoded: images vary in size (the training pipeline's --image-size decides) */
    if (check_attr_int(v, file, "height", enc ? 0 : 1, enc ? 0 : 1 << 16, &sa->h) < 0) sa->h = -1;
    if (check_attr_int(v, file, "width", enc ? 0 : 1, enc ? 0 : 1 << 16, &sa->w) < 0) sa->w = -1;
    if (check_attr_int(v, file, "channels", 1, H5DS_MAX_CHANNELS, &sa->c) < 0) {
        sa->c = -1;
    } else if (enc && sa->c != 1 && sa->c != 3) {
        problem(v, "root attribute 'channels' = %lld, expected 1 or 3 (storage 'encoded')",
                (long long)sa->c);
    }
    if (check_attr_int(v, file, "num_classes", 1, INT32_MAX, &sa->k) < 0) sa->k = -1;
    if (sa->c > 0) {
        check_attr_floats(v, file, "mean", (int)sa->c, 0.0, 1.0, ds->mean);
        check_attr_floats(v, file, "std", (int)sa->c, 0.0, 0.5, ds->std);
    }
    check_attr_str(v, file, "source", "a string saying where the data came from", ds->source,
                   sizeof ds->source);
    check_attr_str(v, file, "created", "a string, the ISO 8601 creation time", ds->created,
                   sizeof ds->created);
    ds->class_names = check_classes(v, file, sa->k);
}

/* Every split group present (train is required): its datasets as `storage`
 * lays them out (nothing when storage is -1: already reported). Fills
 * ds->splits and ds->nsplits with the ids it opened. */
static void check_splits(vctx *v, hid_t file, int storage, const shape_attrs *sa, h5ds *ds)
{
    char why[256];
    for (int i = 0; i < H5DS_MAX_SPLITS; i++) {
        const char *name = split_names[i];
        htri_t ex = H5Lexists(file, name, H5P_DEFAULT);
        if (ex <= 0) {
            if (i == 0) problem(v, "/train: missing (every data set needs a train split)");
            continue;
        }
        hid_t g = H5Gopen2(file, name, H5P_DEFAULT);
        if (g < 0) {
            problem(v, "/%s: not a group (%s)", name, h5u_reason(why));
            continue;
        }
        h5ds_split *sp = &ds->splits[ds->nsplits++];
        snprintf(sp->name, sizeof sp->name, "%s", name);
        if (storage < 0) { /* already reported; what the split should hold is unknown */
            H5Gclose(g);
            continue;
        }
        if (storage == H5DS_STORE_ENCODED) {
            check_encoded_split(v, g, name, sp);
            sp->labels_id = check_labels(v, g, name, sp->count, sa->k, "offsets");
        } else {
            int64_t n = -1, chunk = 0;
            sp->images_id = check_images(v, g, name, sa, &n, &chunk);
            sp->labels_id = check_labels(v, g, name, n, sa->k, "images");
            sp->count = n;
            sp->chunk_images = chunk;
        }
        H5Gclose(g);
    }
}

/* ---- the one check ------------------------------------------------------------ */

/* Checks the file at `path`; when `ds` is given and the file is sound,
 * fills it and leaves the file open. Returns the number of problems, or -1
 * with `e` set when the file cannot be opened as HDF5. */
int h5ds_check_file(const char *path, h5ds_problem_fn report, void *ctx, pst_err *e, h5ds *ds)
{
    vctx v = {report, ctx, 0};
    h5ds_quiet();
    hid_t file = open_h5_file(path, e);
    if (file < 0) return -1;

    h5ds tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.file = file;
    snprintf(tmp.path, sizeof tmp.path, "%s", path);
    for (int i = 0; i < H5DS_MAX_SPLITS; i++) {
        h5ds_split *sp = &tmp.splits[i];
        sp->images_id = sp->labels_id = sp->encoded_id = -1;
        sp->offsets_id = sp->heights_id = sp->widths_id = -1;
    }
    int64_t version = 0;
    const int storage = check_format(&v, file, &version);
    shape_attrs sa = {-1, -1, -1, -1};
    check_shape(&v, file, storage == H5DS_STORE_ENCODED, &sa, &tmp);
    check_splits(&v, file, storage, &sa, &tmp);

    if (ds && v.count == 0) {
        tmp.height = (int)sa.h;
        tmp.width = (int)sa.w;
        tmp.channels = (int)sa.c;
        tmp.num_classes = (int)sa.k;
        tmp.format_version = (int)version;
        tmp.storage = storage;
        *ds = tmp;
    } else {
        h5ds_close_ids(&tmp);
        h5ds_free_names(tmp.class_names, (int)sa.k);
    }
    return v.count;
}

int h5ds_verify(const char *path, h5ds_problem_fn report, void *ctx, pst_err *e)
{
    h5u_lock();
    int n = h5ds_check_file(path, report, ctx, e, NULL);
    h5u_unlock();
    return n;
}
