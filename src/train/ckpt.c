/* ckpt.c - HDF5 checkpoint files: atomic write, validated read, verify.
 * The attributes that describe a run and their valid ranges are
 * ckpt_meta.c, the checkpoint directory (latest, prune, lock) ckpt_dir.c.
 * Layout and guarantees: pstrain/ckpt.h. */
#include "pstrain/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h> /* kill(pid, 0) */
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "pstrain/h5util.h"
#include "pstrain/version.h"

#if H5_VERSION_GE(1, 12, 0)
#define CKPT_LVISIT H5Lvisit2
typedef H5L_info2_t ckpt_linfo;
#else
#define CKPT_LVISIT H5Lvisit
typedef H5L_info_t ckpt_linfo;
#endif

#define PATH_LEN 4096

/* ---- HDF5 error stack: keep it off the terminal ------------------------
 * Failures are reported through pst_err; HDF5's own stack dumps would only
 * add noise (and do so for every corrupt candidate in ckpt_find_latest). */
typedef struct h5quiet {
    H5E_auto2_t func;
    void *data;
} h5quiet;

static h5quiet h5_quiet_begin(void)
{
    h5quiet q = {0};
    H5Eget_auto2(H5E_DEFAULT, &q.func, &q.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return q;
}

static void h5_quiet_end(h5quiet q)
{
    H5Eset_auto2(H5E_DEFAULT, q.func, q.data);
}

/* A file-access property list: strong close (no id outlives its file), and
 * no HDF5 file locking. Checkpoints are never modified in place (one writer
 * makes a new file and renames it), so the lock protects nothing, while
 * flock() fails on some parallel file systems (Lustre, NFS mounts without
 * locking) and would make checkpoints impossible there. */
static hid_t ckpt_fapl(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return -1;
    if (H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) goto fail;
#if H5_VERSION_GE(1, 10, 7)
    if (H5Pset_file_locking(fapl, 0, 1) < 0) goto fail;
#endif
    return fapl;
fail:
    H5Pclose(fapl);
    return -1;
}

/* ---- small helpers ------------------------------------------------------ */

static const char *const g_slot_names[][2] = {
    [OPT_SGD] = {NULL, NULL},
    [OPT_MOMENTUM] = {"momentum", NULL},
    [OPT_RMSPROP] = {"rms", "mom"},
    [OPT_ADAM] = {"m", "v"},
};

static int slot_count(opt_kind k)
{
    int n = 0;
    while (n < 2 && g_slot_names[k][n]) n++;
    return n;
}

const char *ckpt_slot_name(opt_kind kind, int s)
{
    if ((int)kind < 0 || (size_t)kind >= PST_ARRAY_LEN(g_slot_names) || s < 0 || s >= 2)
        return NULL;
    return g_slot_names[kind][s];
}

void ckpt_meta_free(ckpt_meta *m)
{
    if (!m) return;
    for (size_t i = 0; i < PST_ARRAY_LEN(m->owned_); i++) {
        free(m->owned_[i]);
        m->owned_[i] = NULL;
    }
}

/* "[5,5,1,6]" */
static void shape_str(char *out, size_t n, int ndim, const hsize_t *dims)
{
    size_t k = 0;
    k += (size_t)snprintf(out + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%llu", i ? "," : "", (unsigned long long)dims[i]);
    if (k < n) snprintf(out + k, n - k, "]");
}

static void var_dims(const nn_var *v, hsize_t *dims)
{
    for (int i = 0; i < v->ndim; i++) dims[i] = (hsize_t)v->shape[i];
}

/* A variable name must make a clean HDF5 path below /variables. */
static int check_var(const char *path, const nn_var *v, pst_err *e)
{
    const char *s = v->name;
    size_t len = strnlen(s, NN_VAR_NAME_LEN);
    if (len == 0 || len == NN_VAR_NAME_LEN || s[0] == '/' || s[len - 1] == '/' || strstr(s, "//") ||
        !strcmp(s, ".") || strstr(s, "/./") || !strncmp(s, "./", 2))
        return pst_fail(e, "%s: variable name '%.*s' is not a valid HDF5 path", path,
                        (int)PST_MIN(len, (size_t)NN_VAR_NAME_LEN), s);
    if (v->ndim < 1 || v->ndim > 4)
        return pst_fail(e, "%s: variable %s has %d dimensions, expected 1 to 4", path, s, v->ndim);
    size_t count = 1;
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] <= 0)
            return pst_fail(e, "%s: variable %s has dimension %d of size %d", path, s, i,
                            v->shape[i]);
        count *= (size_t)v->shape[i];
    }
    if (count != v->size)
        return pst_fail(e, "%s: variable %s has %zu elements by its shape but size %zu", path, s,
                        count, v->size);
    return 0;
}

/* ---- files and directories ---------------------------------------------- */

/* Creates a dataset `name` (intermediate groups too) with the shape of v,
 * chunked as one piece with a Fletcher-32 checksum, from data[v->size]. */
static int write_dataset(hid_t f, const char *name, const nn_var *v, const float *data)
{
    hsize_t dims[4];
    var_dims(v, dims);
    hid_t sp = H5Screate_simple(v->ndim, dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = -1;
    int rc = -1;
    if (sp < 0 || lcpl < 0 || dcpl < 0) goto done;
    if (H5Pset_create_intermediate_group(lcpl, 1) < 0 || H5Pset_chunk(dcpl, v->ndim, dims) < 0 ||
        H5Pset_fletcher32(dcpl) < 0)
        goto done;
    d = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
    if (d < 0) goto done;
    if (H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) goto done;
    rc = 0;
done:
    h5_close(d);
    h5_close(dcpl);
    h5_close(lcpl);
    h5_close(sp);
    return rc;
}

/* The core driver's buffer, kept when HDF5 frees it at close: only then
 * does the superblock say "closed" (an image taken while the file is open
 * is marked as open for writing, and readers refuse it). Guarded by the
 * HDF5 lock, like every HDF5 call. Buffers are zero-filled, so the bytes
 * past the end of the file are zeros. */
static struct {
    bool capture;
    void *buf;
    size_t size; /* of the one live buffer */
} g_sink;

static void *sink_malloc(size_t size, H5FD_file_image_op_t op, void *udata)
{
    (void)op, (void)udata;
    void *p = calloc(1, size ? size : 1);
    if (p) g_sink.size = size;
    return p;
}

static void *sink_memcpy(void *dst, const void *src, size_t size, H5FD_file_image_op_t op,
                         void *udata)
{
    (void)op, (void)udata;
    return memcpy(dst, src, size);
}

static void *sink_realloc(void *ptr, size_t size, H5FD_file_image_op_t op, void *udata)
{
    (void)op, (void)udata;
    void *p = realloc(ptr, size ? size : 1);
    if (!p) return NULL;
    if (size > g_sink.size) memset((char *)p + g_sink.size, 0, size - g_sink.size);
    g_sink.size = size;
    return p;
}

static herr_t sink_free(void *ptr, H5FD_file_image_op_t op, void *udata)
{
    (void)udata;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && g_sink.capture) {
        free(g_sink.buf); /* the last file closed is ours */
        g_sink.buf = ptr;
    } else {
        free(ptr);
    }
    return 0;
}

/* The length of an HDF5 file image: its end-of-file address, from a
 * version 2/3 superblock at offset 0 (the 1.10 format written here:
 * signature, version, sizes of offsets and lengths, flags, base address,
 * extension address, then the end-of-file address). 0 if the image has
 * another form. The core driver's buffer is longer (rounded up). */
static size_t image_eof(const unsigned char *b, size_t n)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    if (n < 48 || memcmp(b, sig, 8) || b[8] < 2 || b[9] != 8) return 0;
    uint64_t base = 0, eof = 0;
    for (int i = 7; i >= 0; i--) base = base << 8 | b[12 + i], eof = eof << 8 | b[28 + i];
    return base == 0 && eof >= 48 && eof <= n ? (size_t)eof : 0;
}

/* What ckpt_write refuses before it builds anything: 0, or -1 with e set. */
static int check_write_args(const char *path, const ckpt_meta *meta, const nn_var *vars, int nvars,
                            const float *slots, pst_err *e)
{
    if ((int)meta->opt.kind < 0 || (size_t)meta->opt.kind >= PST_ARRAY_LEN(g_opt_names))
        return pst_fail(e, "%s: unknown optimizer kind %d", path, (int)meta->opt.kind);
    int nslots = slot_count(meta->opt.kind);
    if (nslots && !slots)
        return pst_fail(e, "%s: optimizer %s has %d slots but none were given", path,
                        g_opt_names[meta->opt.kind], nslots);
    if (ckpt_meta_check_limits(path, meta, e) < 0) return -1;
    if (meta->ema_decay > 0 && !meta->averages)
        return pst_fail(e, "%s: moving_average_decay %g but no averages were given", path,
                        (double)meta->ema_decay);
    for (int i = 0; i < nvars; i++)
        if (check_var(path, &vars[i], e) < 0) return -1;
    return 0;
}

/* The datasets of every variable: /variables, /averages (with moving
 * averages) and the optimizer's /slots. -1 with *step naming the variable
 * whose dataset failed. */
static int write_variables(hid_t f, const ckpt_meta *meta, const nn_var *vars, int nvars,
                           const float *params, const float *slots, size_t slot_stride,
                           const char **step)
{
    char name[PATH_LEN];
    int nslots = slot_count(meta->opt.kind);
    for (int i = 0; i < nvars; i++) {
        const nn_var *v = &vars[i];
        snprintf(name, sizeof name, "/variables/%s", v->name);
        *step = v->name;
        if (write_dataset(f, name, v, params + v->offset) < 0) return -1;
        if (meta->ema_decay > 0) {
            snprintf(name, sizeof name, "/averages/%s", v->name);
            if (write_dataset(f, name, v, meta->averages + v->offset) < 0) return -1;
        }
        if (!v->trainable) continue;
        for (int s = 0; s < nslots; s++) {
            snprintf(name, sizeof name, "/slots/%s/%s", v->name, g_slot_names[meta->opt.kind][s]);
            if (write_dataset(f, name, v, slots + (size_t)s * slot_stride + v->offset) < 0)
                return -1;
        }
    }
    return 0;
}

/* Builds the checkpoint file in memory (the core driver, no backing store):
 * *image (malloc'ed, the caller frees it) holds *len bytes of a closed HDF5
 * file. HDF5 thus never sees a disk error: the file is written out with
 * plain write() afterwards. On a full disk a close of a file on disk can
 * fail half-way and leave a file object that crashes libhdf5 at exit
 * (H5F__close_cb in MPI_Finalize). Costs one copy of the checkpoint in
 * memory. 0, or -1 with e set. */
static int build_image(const char *path, const ckpt_meta *meta, const nn_var *vars, int nvars,
                       const float *params, const float *slots, size_t slot_stride, void **image,
                       size_t *len, pst_err *e)
{
    hid_t fapl = -1, f = -1;
    h5quiet q = h5_quiet_begin();
    const char *step = "create";
    *image = NULL;
    *len = 0;
    H5FD_file_image_callbacks_t cb = {sink_malloc, sink_memcpy, sink_realloc, sink_free,
                                      NULL,        NULL,        NULL};
    g_sink.capture = true, g_sink.buf = NULL, g_sink.size = 0;
    fapl = ckpt_fapl();
    /* the 1.10 file format: checksummed metadata (object headers, B-trees) */
    if (fapl < 0 || H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0 ||
        H5Pset_fapl_core(fapl, (size_t)1 << 20, 0) < 0 ||
        H5Pset_file_image_callbacks(fapl, &cb) < 0)
        goto fail;
    /* In memory, under a name no file can have: H5Fcreate first opens an
     * existing file of its name to see whether it is already open, and the
     * in-memory driver would load it (a stale ckpt-N.h5 under the target's
     * name became the "new" checkpoint) or block on a FIFO there. */
    f = H5Fcreate("/dev/null/pstrain-checkpoint-image", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) goto fail;
    step = "write attributes";
    if (ckpt_meta_write(f, meta) < 0) goto fail;
    if (write_variables(f, meta, vars, nvars, params, slots, slot_stride, &step) < 0) goto fail;
    step = "close";
    hid_t fc = f;
    f = -1;
    if (H5Fclose(fc) < 0) goto fail;
    *image = g_sink.buf;
    g_sink.capture = false, g_sink.buf = NULL;
    step = "image";
    if (!*image || !(*len = image_eof(*image, g_sink.size))) goto fail;
    h5_quiet_end(q);
    H5Pclose(fapl);
    return 0;

fail:
    h5_close(f);
    h5_close(fapl);
    h5_quiet_end(q);
    free(g_sink.buf);
    free(*image);
    *image = NULL;
    g_sink.capture = false, g_sink.buf = NULL;
    return pst_fail(e, "%s: HDF5 error building the checkpoint (at %s)", path, step);
}

/* Writes the image to a temporary file beside path, fsyncs it, renames it
 * to path and fsyncs the directory: 0, or -1 with e set and the previous
 * file of that name untouched. */
static int write_image_file(const char *path, const void *image, size_t len, pst_err *e)
{
    char dir[PATH_LEN], tmp[PATH_LEN];
    const char *base;
    pst_split_path(path, dir, sizeof dir, &base);
    (void)base;
    /* Exclusively (O_EXCL|O_NOFOLLOW), under a name nobody can predict: in
     * a shared directory a planted file or symlink is never opened, let
     * alone truncated or written through. */
    int fd = pst_tmp_create(path, true, tmp, sizeof tmp);
    if (fd < 0)
        return pst_fail(e, "%s: cannot create a temporary file in %s: %s", path, dir,
                        strerror(errno));
    if (pst_write_all(fd, image, len) < 0 || fsync(fd) < 0) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return pst_fail(e,
                        "%s: cannot write the checkpoint: %s (the previous checkpoints are kept)",
                        path, strerror(err));
    }
    if (close(fd) < 0) {
        pst_fail(e, "%s: cannot write the checkpoint: %s (the previous checkpoints are kept)", path,
                 strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) < 0) {
        pst_fail(e, "%s: rename from %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (pst_fsync_path(dir, true) < 0)
        return pst_fail(e, "%s: fsync of directory %s: %s", path, dir, strerror(errno));
    return 0;
}

static int write_unlocked(const char *path, const ckpt_meta *meta, const nn_var *vars, int nvars,
                          const float *params, const float *slots, size_t slot_stride, pst_err *e)
{
    if (check_write_args(path, meta, vars, nvars, slots, e) < 0) return -1;
    void *image;
    size_t len;
    if (build_image(path, meta, vars, nvars, params, slots, slot_stride, &image, &len, e) < 0)
        return -1;
    int rc = write_image_file(path, image, len, e);
    free(image);
    return rc;
}

/* Does every component of an absolute HDF5 path exist? */
static bool h5_path_exists(hid_t f, const char *path)
{
    char buf[PATH_LEN];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (H5Lexists(f, buf, H5P_DEFAULT) <= 0) return false;
            if (!c) return true;
            *p = c;
        }
    }
}

/* Opens `name`, checks that it is a float dataset with v's shape, and reads
 * it into out[v->size]. `what` names it in messages ("variable conv1/kernel"). */
static int read_dataset(hid_t f, const char *file, const char *name, const char *what,
                        const nn_var *v, float *out, pst_err *e)
{
    if (!h5_path_exists(f, name)) return pst_fail(e, "%s: %s is missing (%s)", file, what, name);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t t = d >= 0 ? H5Dget_type(d) : -1;
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    int rc = -1;
    if (d < 0 || t < 0 || sp < 0) {
        pst_fail(e, "%s: %s (%s) is not a readable dataset", file, what, name);
        goto done;
    }
    if (H5Tget_class(t) != H5T_FLOAT) {
        pst_fail(e, "%s: %s is not a floating-point dataset", file, what);
        goto done;
    }
    hsize_t fdims[H5S_MAX_RANK], vdims[4];
    int nd = H5Sget_simple_extent_dims(sp, fdims, NULL);
    var_dims(v, vdims);
    bool same = nd == v->ndim;
    for (int i = 0; same && i < nd; i++) same = fdims[i] == vdims[i];
    if (!same) {
        char fs[96], vs[96];
        shape_str(fs, sizeof fs, nd < 0 ? 0 : nd, fdims);
        shape_str(vs, sizeof vs, v->ndim, vdims);
        pst_fail(e, "%s: %s has shape %s in the checkpoint, the model expects %s", file, what, fs,
                 vs);
        goto done;
    }
    if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
        pst_fail(e, "%s: reading %s failed (corrupt data or checksum mismatch)", file, what);
        goto done;
    }
    rc = 0;
done:
    h5_close(sp);
    h5_close(t);
    h5_close(d);
    return rc;
}

/* Opens a checkpoint and checks its format attributes. */
static hid_t open_ckpt(const char *path, pst_err *e)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        pst_fail(e, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) { /* a FIFO would block H5Fopen */
        pst_fail(e, "%s: not a regular file, expected a pstrain checkpoint", path);
        return -1;
    }
    hid_t fapl = ckpt_fapl();
    if (fapl < 0) {
        pst_fail(e, "%s: HDF5 property list", path);
        return -1;
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        pst_fail(e, "%s: not a readable HDF5 file (truncated or corrupt?)", path);
        return -1;
    }
    char *fmt = ckpt_attr_read_str(f, "format");
    int64_t ver = 0;
    if (!fmt || strcmp(fmt, CKPT_FORMAT)) {
        pst_fail(e, "%s: attribute format is '%s', expected '%s' (not a pstrain checkpoint)", path,
                 fmt ? fmt : "(missing)", CKPT_FORMAT);
        goto fail;
    }
    if (ckpt_attr_read_num(f, "format_version", H5T_NATIVE_INT64, &ver, 0) < 0 ||
        ver < CKPT_FORMAT_VERSION_MIN || ver > CKPT_FORMAT_VERSION) {
        pst_fail(e, "%s: format_version is %" PRId64 ", this pstrain reads versions %d to %d", path,
                 ver, CKPT_FORMAT_VERSION_MIN, CKPT_FORMAT_VERSION);
        goto fail;
    }
    free(fmt);
    return f;
fail:
    free(fmt);
    H5Fclose(f);
    return -1;
}

/* Collects the dataset paths below a group (relative to it). */
typedef struct name_list {
    char **names;
    int n, cap;
} name_list;

static herr_t collect_cb(hid_t g, const char *name, const ckpt_linfo *info, void *data)
{
    name_list *l = data;
    if (info->type != H5L_TYPE_HARD) return 0;
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    if (o < 0) return -1;
    bool ds = H5Iget_type(o) == H5I_DATASET;
    H5Oclose(o);
    if (!ds) return 0;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->names = pst_realloc(l->names, (size_t)l->cap * sizeof *l->names);
    }
    l->names[l->n++] = pst_strdup(name);
    return 0;
}

static void name_list_free(name_list *l)
{
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static int collect(hid_t f, const char *group, name_list *l)
{
    if (H5Lexists(f, group, H5P_DEFAULT) <= 0) return 0;
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    if (g < 0) return -1;
    herr_t rc = CKPT_LVISIT(g, H5_INDEX_NAME, H5_ITER_INC, collect_cb, l);
    H5Gclose(g);
    return rc < 0 ? -1 : 0;
}

static int check_expect_meta(const char *path, const ckpt_expect *x, const ckpt_meta *m, pst_err *e)
{
    if (x->model_name && strcmp(x->model_name, m->model_name))
        return pst_fail(e, "%s: checkpoint of model '%s', this run uses model '%s'", path,
                        m->model_name, x->model_name);
    const struct {
        const char *name;
        int want, got;
    } dims[] = {{"height", x->height, m->height},
                {"width", x->width, m->width},
                {"channels", x->channels, m->channels},
                {"num_classes", x->num_classes, m->num_classes}};
    for (size_t i = 0; i < PST_ARRAY_LEN(dims); i++)
        if (dims[i].want && dims[i].want != dims[i].got)
            return pst_fail(e, "%s: checkpoint has %s=%d, this run has %s=%d", path, dims[i].name,
                            dims[i].got, dims[i].name, dims[i].want);
    return 0;
}

ckpt_expect ckpt_expect_model(const nn_model *m, const opt_cfg *opt)
{
    const nn_model_cfg *c = nn_model_config(m);
    return (ckpt_expect){.model_name = c->name,
                         .height = c->height,
                         .width = c->width,
                         .channels = c->channels,
                         .num_classes = c->num_classes,
                         .vars = nn_model_vars(m),
                         .nvars = nn_model_nvars(m),
                         .check_opt = opt != NULL,
                         .opt_kind = opt ? opt->kind : OPT_SGD};
}

/* The moving averages: one per variable, with its shape, and nothing else. */
static int read_averages(hid_t f, const char *path, const ckpt_expect *x, pst_err *e)
{
    char name[PATH_LEN], what[PATH_LEN];
    name_list l = {0};
    int rc = -1;
    for (int i = 0; i < x->nvars; i++) {
        const nn_var *v = &x->vars[i];
        snprintf(name, sizeof name, "/averages/%s", v->name);
        snprintf(what, sizeof what, "average /averages/%s", v->name);
        if (read_dataset(f, path, name, what, v, x->averages + v->offset, e) < 0) goto done;
    }
    if (collect(f, "/averages", &l) < 0) {
        pst_fail(e, "%s: cannot list /averages", path);
        goto done;
    }
    for (int k = 0; k < l.n; k++) {
        bool known = false;
        for (int i = 0; i < x->nvars && !known; i++) known = !strcmp(l.names[k], x->vars[i].name);
        if (!known) {
            pst_fail(e, "%s: /averages/%s is not a variable of the model", path, l.names[k]);
            goto done;
        }
    }
    rc = 0;
done:
    name_list_free(&l);
    return rc;
}

static int read_unlocked(const char *path, const ckpt_expect *x, float *params, float *slots,
                         size_t slot_stride, ckpt_meta *meta, pst_err *e)
{
    ckpt_meta m = {0};
    name_list l = {0};
    char name[PATH_LEN], what[PATH_LEN];
    int rc = -1;
    h5quiet q = h5_quiet_begin();
    hid_t f = open_ckpt(path, e);
    if (f < 0) goto done;
    if (ckpt_meta_read(f, path, &m, e) < 0) goto done;
    if (check_expect_meta(path, x, &m, e) < 0) goto done;
    if (slots && x->check_opt && m.opt.kind != x->opt_kind) {
        pst_fail(e, "%s: checkpoint was written with optimizer %s, this run uses %s", path,
                 g_opt_names[m.opt.kind], g_opt_names[x->opt_kind]);
        goto done;
    }

    /* every variable the model has, with its shape */
    for (int i = 0; i < x->nvars; i++) {
        const nn_var *v = &x->vars[i];
        snprintf(name, sizeof name, "/variables/%s", v->name);
        snprintf(what, sizeof what, "variable %s", v->name);
        if (read_dataset(f, path, name, what, v, params + v->offset, e) < 0) goto done;
    }
    /* and nothing else */
    if (collect(f, "/variables", &l) < 0) {
        pst_fail(e, "%s: cannot list /variables", path);
        goto done;
    }
    for (int k = 0; k < l.n; k++) {
        bool known = false;
        for (int i = 0; i < x->nvars && !known; i++) known = !strcmp(l.names[k], x->vars[i].name);
        if (!known) {
            pst_fail(e, "%s: variable %s is in the checkpoint but not in model '%s'", path,
                     l.names[k], x->model_name ? x->model_name : m.model_name);
            goto done;
        }
    }
    if (slots) {
        int ns = slot_count(m.opt.kind);
        for (int i = 0; i < x->nvars; i++) {
            const nn_var *v = &x->vars[i];
            if (!v->trainable) continue;
            for (int s = 0; s < ns; s++) {
                const char *sn = g_slot_names[m.opt.kind][s];
                snprintf(name, sizeof name, "/slots/%s/%s", v->name, sn);
                snprintf(what, sizeof what, "slot %s of variable %s", sn, v->name);
                if (read_dataset(f, path, name, what, v,
                                 slots + (size_t)s * slot_stride + v->offset, e) < 0)
                    goto done;
            }
        }
    }
    if (x->averages && m.has_averages && read_averages(f, path, x, e) < 0) goto done;
    rc = 0;
done:
    name_list_free(&l);
    if (f >= 0) H5Fclose(f);
    h5_quiet_end(q);
    if (rc == 0 && meta)
        *meta = m;
    else
        ckpt_meta_free(&m);
    return rc;
}

static int read_meta_unlocked(const char *path, ckpt_meta *meta, pst_err *e)
{
    h5quiet q = h5_quiet_begin();
    hid_t f = open_ckpt(path, e);
    int rc = f < 0 ? -1 : ckpt_meta_read(f, path, meta, e);
    if (f >= 0) H5Fclose(f);
    h5_quiet_end(q);
    return rc;
}

/* Reads every dataset of a group (checksums are verified by the read). */
static int verify_group(hid_t f, const char *path, const char *group, bool required, pst_err *e)
{
    name_list l = {0};
    char full[PATH_LEN];
    int rc = -1;
    float *buf = NULL;
    if (required && H5Lexists(f, group, H5P_DEFAULT) <= 0) {
        pst_fail(e, "%s: group %s is missing", path, group);
        goto done;
    }
    if (collect(f, group, &l) < 0) {
        pst_fail(e, "%s: cannot list %s", path, group);
        goto done;
    }
    for (int k = 0; k < l.n; k++) {
        snprintf(full, sizeof full, "%s/%s", group, l.names[k]);
        hid_t d = H5Dopen2(f, full, H5P_DEFAULT);
        hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
        hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
        bool ok = n >= 0;
        if (ok) {
            buf = pst_realloc(buf, (size_t)(n ? n : 1) * sizeof *buf);
            ok = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0;
        }
        h5_close(sp);
        h5_close(d);
        if (!ok) {
            pst_fail(e, "%s: dataset %s does not read back (corrupt or checksum mismatch)", path,
                     full);
            goto done;
        }
    }
    rc = 0;
done:
    free(buf);
    name_list_free(&l);
    return rc;
}

/* The shape of dataset `name` into dims; its rank, -1 if it is not a
 * readable dataset. */
static int dataset_dims(hid_t f, const char *name, hsize_t *dims)
{
    if (!h5_path_exists(f, name)) return -1;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (nd > H5S_MAX_RANK || (nd >= 0 && H5Sget_simple_extent_dims(sp, dims, NULL) < 0)) nd = -1;
    h5_close(sp);
    h5_close(d);
    return nd;
}

/* Whether dataset `name` (a slot or an average, `what` in the message) has
 * the shape of its variable `vname`; fails naming both shapes if not. */
static int same_shape_as_variable(hid_t f, const char *path, const char *what, const char *name,
                                  const char *vname, pst_err *e)
{
    hsize_t d[H5S_MAX_RANK], vd[H5S_MAX_RANK];
    int n = dataset_dims(f, name, d), nv = dataset_dims(f, vname, vd);
    bool same = n >= 0 && n == nv;
    for (int i = 0; same && i < n; i++) same = d[i] == vd[i];
    if (same) return 0;
    char a[96], b[96];
    shape_str(a, sizeof a, n < 0 ? 0 : n, d);
    shape_str(b, sizeof b, nv < 0 ? 0 : nv, vd);
    return pst_fail(e, "%s: %s %s has shape %s but its variable %s %s", path, what, name, a, vname,
                    nv < 0 ? "is missing" : b);
}

/* Damage the checksums cannot see: every slot is one of the optimizer's
 * and belongs to a variable of the same shape (a resume would otherwise
 * fail on it, or load state into the wrong place, instead of falling back
 * to an older checkpoint). */
static int verify_slots(hid_t f, const char *path, const ckpt_meta *m, pst_err *e)
{
    name_list l = {0};
    char sname[PATH_LEN], vname[PATH_LEN];
    int rc = -1;
    if (collect(f, "/slots", &l) < 0) {
        pst_fail(e, "%s: cannot list /slots", path);
        goto done;
    }
    for (int k = 0; k < l.n; k++) {
        const char *slash = strrchr(l.names[k], '/');
        const char *slot = slash ? slash + 1 : l.names[k];
        bool known = false;
        for (int s = 0; s < slot_count(m->opt.kind); s++)
            known |= !strcmp(slot, g_slot_names[m->opt.kind][s]);
        if (!slash || !known) {
            pst_fail(e, "%s: /slots/%s is not a slot of optimizer %s", path, l.names[k],
                     g_opt_names[m->opt.kind]);
            goto done;
        }
        snprintf(sname, sizeof sname, "/slots/%s", l.names[k]);
        snprintf(vname, sizeof vname, "/variables/%.*s", (int)(slash - l.names[k]), l.names[k]);
        if (same_shape_as_variable(f, path, "slot", sname, vname, e) < 0) goto done;
    }
    rc = 0;
done:
    name_list_free(&l);
    return rc;
}

/* The averages mirror /variables: the same names, each with its variable's
 * shape (read_meta checked that they are there exactly when
 * moving_average_decay says so). */
static int verify_averages(hid_t f, const char *path, pst_err *e)
{
    name_list la = {0}, lv = {0};
    char aname[PATH_LEN], vname[PATH_LEN];
    int rc = -1;
    if (collect(f, "/averages", &la) < 0 || collect(f, "/variables", &lv) < 0) {
        pst_fail(e, "%s: cannot list /averages and /variables", path);
        goto done;
    }
    for (int k = 0; k < la.n; k++) {
        snprintf(aname, sizeof aname, "/averages/%s", la.names[k]);
        snprintf(vname, sizeof vname, "/variables/%s", la.names[k]);
        if (same_shape_as_variable(f, path, "dataset", aname, vname, e) < 0) goto done;
    }
    if (la.n != lv.n) { /* every average has its variable: some variable has none */
        for (int k = 0; k < lv.n; k++) {
            snprintf(aname, sizeof aname, "/averages/%s", lv.names[k]);
            if (!h5_path_exists(f, aname)) {
                pst_fail(e, "%s: dataset %s is missing (variable /variables/%s has no average)",
                         path, aname, lv.names[k]);
                goto done;
            }
        }
    }
    rc = 0;
done:
    name_list_free(&la);
    name_list_free(&lv);
    return rc;
}

static int verify_unlocked(const char *path, pst_err *e)
{
    ckpt_meta m;
    h5quiet q = h5_quiet_begin();
    int rc = -1;
    hid_t f = open_ckpt(path, e);
    if (f < 0) goto done;
    if (ckpt_meta_read(f, path, &m, e) < 0) goto done;
    ckpt_meta_free(&m);
    if (verify_group(f, path, "/variables", true, e) < 0) goto done;
    if (verify_group(f, path, "/slots", false, e) < 0) goto done;
    if (verify_slots(f, path, &m, e) < 0) goto done;
    if (m.has_averages &&
        (verify_group(f, path, "/averages", true, e) < 0 || verify_averages(f, path, e) < 0))
        goto done;
    rc = 0;
done:
    if (f >= 0) H5Fclose(f);
    h5_quiet_end(q);
    return rc;
}

/* ---- the public entry points: one HDF5 user at a time (h5util.h) -------- */

int ckpt_write(const char *path, const ckpt_meta *meta, const nn_var *vars, int nvars,
               const float *params, const float *slots, size_t slot_stride, pst_err *e)
{
    h5u_lock();
    int rc = write_unlocked(path, meta, vars, nvars, params, slots, slot_stride, e);
    h5u_unlock();
    return rc;
}

int ckpt_read(const char *path, const ckpt_expect *x, float *params, float *slots,
              size_t slot_stride, ckpt_meta *meta, pst_err *e)
{
    h5u_lock();
    int rc = read_unlocked(path, x, params, slots, slot_stride, meta, e);
    h5u_unlock();
    return rc;
}

int ckpt_read_meta(const char *path, ckpt_meta *meta, pst_err *e)
{
    h5u_lock();
    int rc = read_meta_unlocked(path, meta, e);
    h5u_unlock();
    return rc;
}

int ckpt_verify(const char *path, pst_err *e)
{
    h5u_lock();
    int rc = verify_unlocked(path, e);
    h5u_unlock();
    return rc;
}
