/*
 * h5write.c - writing a pstrain data set (contract in h5write.h).
 *
 * Images are gathered one HDF5 chunk at a time into slots of a small ring;
 * a pool of threads deflates full chunks while the caller produces the next
 * ones, and the calling thread writes them in order with H5Dwrite_chunk
 * (HDF5 itself is called from that thread only: Debian's build is not
 * thread-safe). The bytes are what HDF5's own shuffle + deflate pipeline
 * would store: shuffle is the identity on 1-byte elements, deflate is a zlib
 * stream (written by libdeflate, which makes the same format as zlib's
 * compress2 at about 3x its speed on photo pixels: 1.3 against 3.9 CPU ms for
 * a 224x224x3 image at level 4, the same size within 0.3%), and a chunk that
 * does not shrink is stored raw with deflate marked skipped in its filter
 * mask, as HDF5 does for the optional filter.
 *
 * Encoded splits (H5DS_STORE_ENCODED) need none of that: JPEG bytes do not
 * compress, so they are gathered into one chunk-sized buffer and written with
 * H5Dwrite into the 1-D /<split>/encoded dataset, which grows by one chunk at
 * a time (HDF5 adds the Fletcher-32 checksum); offsets, heights, widths and
 * labels are gathered in blocks of H5W_LABEL_CHUNK entries. Memory stays at
 * one chunk plus one block whatever the split's size.
 *
 * Mean/std of the train split are exact: per-channel sums of pixel values
 * and of their squares are integers (uint64 holds them for any realistic
 * data set: 255^2 * 2^44 pixels), and the variance is formed from them in
 * 128-bit integers before the one division in double.
 */
#include "h5write.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <dirent.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <libdeflate.h>

#include "pstrain/h5ds.h"
#include "pstrain/h5util.h"

#define H5W_CHUNK_TARGET ((size_t)512 << 10) /* default chunk: about 512 KiB of images */
#define H5W_LABEL_CHUNK ((hsize_t)1 << 16)
#define H5W_ENCODED_CHUNK ((int64_t)1 << 20)         /* default chunk of /<split>/encoded */
#define H5W_MAX_CHUNK_BYTES (((int64_t)4 << 30) - 1) /* HDF5's chunk size limit */
#define H5W_MAX_SIDE 65535                           /* the largest JPEG side */
#define H5W_MAX_THREADS 16
#define H5W_RING_BYTES ((size_t)256 << 20) /* at most this much in slots */
#define H5W_DEFLATE_SKIPPED (1u << 1)      /* filter mask: filter 1 (deflate) not applied */

enum { SLOT_FREE, SLOT_QUEUED, SLOT_DONE, SLOT_FAILED };

/* One chunk of images on its way to the file. */
typedef struct h5w_slot {
    uint8_t *raw; /* chunk_images * image_bytes, zero-padded when partial */
    uint8_t *z;   /* deflated */
    size_t zlen;
    int64_t first; /* first example */
    int state;
} h5w_slot;

__extension__ typedef unsigned __int128 h5w_u128;

struct h5w {
    h5w_opts o;
    char path[4096], tmp[4200];
    hid_t file;
    size_t image_bytes; /* H*W*C */
    int nsplits_done;
    char done[H5DS_MAX_SPLITS][8];
    bool have_train;
    /* the open split */
    char split[8];
    hid_t images, labels;
    int64_t n, written, chunk; /* examples declared, appended, per chunk */
    int32_t *lbuf;             /* labels of the chunk being filled */
    int64_t cfill;             /* images in the chunk being filled */
    size_t chunk_bytes, zcap;
    /* the ring of slots; chunk sequence numbers: submitted, taken by a
     * deflate thread, written. Slot of sequence s: s % nslots. */
    h5w_slot *slots;
    int nslots;
    int64_t nsub, ntake, nwrit;
    /* deflate threads (none when compression is 0) */
    pthread_t threads[H5W_MAX_THREADS];
    int nthreads;
    bool quit;
    pthread_mutex_t mu;
    pthread_cond_t work, finished; /* a slot to deflate, a slot deflated */
    /* encoded splits: the chunk of bytes being filled and the block of
     * per-image entries being filled (examples [bfirst, bfirst + bfill)) */
    hid_t encoded, offsets, heights, widths;
    uint8_t *ebuf;
    size_t efill, echunk;
    int64_t etotal, eflushed; /* bytes appended, bytes written to the file */
    int64_t *obuf;            /* start offsets of the block (+1: the end) */
    int32_t *hbuf, *wbuf;     /* heights, widths of the block (labels: lbuf) */
    int64_t bfirst, bfill;
    /* train statistics */
    uint64_t sum[H5DS_MAX_CHANNELS], sumsq[H5DS_MAX_CHANNELS];
    uint64_t npix; /* pixels per channel */
};

/* ---- SIGINT/SIGTERM: remove the temporary file -------------------------------- */

static char g_tmp_path[4200];
static volatile sig_atomic_t g_tmp_active;
static struct sigaction g_old_int, g_old_term;

static void on_signal(int sig)
{
    if (g_tmp_active) unlink(g_tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void guard_tmp(const char *tmp)
{
    snprintf(g_tmp_path, sizeof g_tmp_path, "%s", tmp);
    g_tmp_active = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
}

static void unguard_tmp(void)
{
    if (!g_tmp_active) return;
    sigaction(SIGINT, &g_old_int, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
    g_tmp_active = 0;
}

/* ---- HDF5 helpers ----------------------------------------------------------- */

/* Strings are fixed-length (format_version 2): variable-length ones live in
 * the global heap, which has no checksum, and a flipped byte there crashed
 * libhdf5 on read. A fixed-length string is stored in the (checksummed)
 * object header, or in a dense attribute heap, or in a Fletcher-32 checked
 * chunk (/classes). Null-terminated, UTF-8, at least one byte. */
static hid_t fixed_str_type(size_t len)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    if (H5Tset_size(t, len + 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 ||
        H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

static int write_attr_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = fixed_str_type(strlen(value)), s = H5Screate(H5S_SCALAR), a = -1;
    int rc = -1;
    if (t < 0 || s < 0) goto done;
    a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, t, value) < 0) goto done;
    rc = 0;
done:
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    return rc;
}

static int write_attr_int(hid_t obj, const char *name, int32_t value)
{
    hid_t s = H5Screate(H5S_SCALAR), a = -1;
    int rc = -1;
    if (s < 0) goto done;
    a = H5Acreate2(obj, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_INT32, &value) < 0) goto done;
    rc = 0;
done:
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    return rc;
}

static int write_attr_doubles(hid_t obj, const char *name, const double *v, int n)
{
    hsize_t dim = (hsize_t)n;
    hid_t s = H5Screate_simple(1, &dim, NULL), a = -1;
    int rc = -1;
    if (s < 0) goto done;
    a = H5Acreate2(obj, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_DOUBLE, v) < 0) goto done;
    rc = 0;
done:
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    return rc;
}

/* /classes (and /class_descriptions): K fixed-length strings as long as the
 * longest one, in one chunk with a Fletcher-32 checksum. */
static int write_classes(hid_t file, const char *dset, const char *const *names, int n)
{
    hsize_t k = (hsize_t)n;
    size_t len = 1;
    for (int i = 0; i < n; i++) len = PST_MAX(len, strlen(names[i]));
    hid_t t = fixed_str_type(len), s = H5Screate_simple(1, &k, NULL), d = -1;
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    char *buf = pst_calloc((size_t)k, len + 1);
    int rc = -1;
    if (t < 0 || s < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, &k) < 0 || H5Pset_fletcher32(dcpl) < 0)
        goto done;
    for (int i = 0; i < n; i++) memcpy(buf + (size_t)i * (len + 1), names[i], strlen(names[i]));
    d = H5Dcreate2(file, dset, t, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d < 0 || H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) goto done;
    rc = 0;
done:
    free(buf);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (d >= 0) H5Dclose(d);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    return rc;
}

/* ---- deflate threads ---------------------------------------------------------- */

static void *deflate_main(void *arg)
{
    h5w *w = arg;
    /* libdeflate's levels 1-9 are zlib's in spirit (level 0 never gets here:
     * no threads without compression); NULL only when out of memory */
    struct libdeflate_compressor *c = libdeflate_alloc_compressor(w->o.compression);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && w->ntake == w->nsub) pthread_cond_wait(&w->work, &w->mu);
        if (w->quit) break;
        h5w_slot *sl = &w->slots[w->ntake++ % w->nslots];
        pthread_mutex_unlock(&w->mu);
        /* 0 = did not fit in zcap (>= the raw chunk): stored raw below */
        size_t zlen = c ? libdeflate_zlib_compress(c, sl->raw, w->chunk_bytes, sl->z, w->zcap) : 0;
        pthread_mutex_lock(&w->mu);
        sl->zlen = zlen ? zlen : w->chunk_bytes;
        sl->state = c ? SLOT_DONE : SLOT_FAILED;
        pthread_cond_broadcast(&w->finished);
    }
    pthread_mutex_unlock(&w->mu);
    libdeflate_free_compressor(c);
    return NULL;
}

static void stop_threads(h5w *w)
{
    if (!w->nthreads) return;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->work);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->nthreads; i++) pthread_join(w->threads[i], NULL);
    w->nthreads = 0;
}

static int start_threads(h5w *w, pst_err *e)
{
    int want = w->o.threads;
    if (want <= 0) want = (int)PST_MIN(PST_MAX(sysconf(_SC_NPROCESSORS_ONLN), 1L), 8L);
    want = PST_MIN(want, H5W_MAX_THREADS);
    for (int i = 0; i < want; i++) {
        int rc = pthread_create(&w->threads[i], NULL, deflate_main, w);
        if (rc) return pst_fail(e, "%s: starting a compression thread: %s", w->path, strerror(rc));
        w->nthreads++;
    }
    return 0;
}

/* ---- temporary files and publishing ------------------------------------------- */

/* Removes OUT.tmp.PID files left in OUT's directory by runs that were
 * killed (PID no longer running). Best effort. */
static void remove_stale_temps(const char *path)
{
    char dir[4096];
    const char *base;
    if (pst_split_path(path, dir, sizeof dir, &base) < 0) return;
    size_t nb = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (strncmp(n, base, nb) || strncmp(n + nb, ".tmp.", 5)) continue;
        const char *digits = n + nb + 5;
        char *end;
        long pid = strtol(digits, &end, 10);
        if (!*digits || *end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to know) */
        char p[8400];
        snprintf(p, sizeof p, "%s/%s", dir, n);
        unlink(p);
    }
    closedir(d);
}

/* Publishes tmp as path: with `force` replacing what is there (rename);
 * without, never replacing a file another run published meanwhile
 * (renameat2 RENAME_NOREPLACE; link + unlink where the file system lacks
 * it). 0, or -1 with errno set (EEXIST: path exists). */
static int publish(const char *tmp, const char *path, bool force)
{
    if (force) return rename(tmp, path);
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
    if (link(tmp, path) < 0) return -1;
    unlink(tmp);
    return 0;
}

/* ---- create ----------------------------------------------------------------- */

static int check_opts(const h5w_opts *o, const char *path, pst_err *e)
{
    if (o->storage != H5DS_STORE_PIXELS && o->storage != H5DS_STORE_ENCODED)
        return pst_fail(e, "%s: storage mode %d, expected pixels (%d) or encoded (%d)", path,
                        o->storage, H5DS_STORE_PIXELS, H5DS_STORE_ENCODED);
    if (o->storage == H5DS_STORE_ENCODED) {
        if (o->channels != 1 && o->channels != 3)
            return pst_fail(e, "%s: %d channels, expected 1 or 3 for encoded storage", path,
                            o->channels);
        if (o->encoded_chunk_bytes < 0 || o->encoded_chunk_bytes > H5W_MAX_CHUNK_BYTES)
            return pst_fail(e,
                            "%s: %lld bytes per encoded chunk, expected 1 to %lld (or 0 for "
                            "the default)",
                            path, (long long)o->encoded_chunk_bytes,
                            (long long)H5W_MAX_CHUNK_BYTES);
    } else if (o->height < 1 || o->width < 1 || o->height > (1 << 16) || o->width > (1 << 16))
        return pst_fail(e, "%s: image size %dx%d, expected 1..65536 on each side", path, o->height,
                        o->width);
    if (o->channels < 1 || o->channels > H5DS_MAX_CHANNELS)
        return pst_fail(e, "%s: %d channels, expected 1 to %d", path, o->channels,
                        H5DS_MAX_CHANNELS);
    if (o->num_classes < 2 || !o->class_names)
        return pst_fail(e,
                        "%s: %d class%s, expected at least 2 named classes (pstrain train "
                        "refuses one)",
                        path, o->num_classes, o->num_classes == 1 ? "" : "es");
    for (int i = 0; i < o->num_classes; i++)
        if (!o->class_names[i] || !o->class_names[i][0])
            return pst_fail(e, "%s: class %d has an empty name", path, i);
    if (o->compression < 0 || o->compression > 9)
        return pst_fail(e, "%s: compression level %d, expected 0-9", path, o->compression);
    if (o->chunk_images < 0)
        return pst_fail(e, "%s: %d images per chunk, expected >= 1 (or 0 for the default)", path,
                        o->chunk_images);
    return 0;
}

int h5w_create(h5w **out, const char *path, const h5w_opts *o, pst_err *e)
{
    char why[256];
    *out = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (check_opts(o, path, e) < 0) return -1;
    if (strlen(path) >= 4096) return pst_fail(e, "output path too long");
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return pst_fail(e, "%s: is a directory", path);
        /* the set is renamed into place: over /dev/null that would replace the device */
        if (!S_ISREG(st.st_mode))
            return pst_fail(e, "%s: not a regular file, expected a path for the new data set",
                            path);
        if (!o->force) return pst_fail(e, "%s: exists (use --force to overwrite it)", path);
    } else if (errno != ENOENT) {
        return pst_fail(e, "%s: %s", path, strerror(errno));
    }
    remove_stale_temps(path);
    h5w *w = pst_calloc(1, sizeof *w);
    w->o = *o;
    w->file = w->images = w->labels = -1;
    w->encoded = w->offsets = w->heights = w->widths = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->work, NULL);
    pthread_cond_init(&w->finished, NULL);
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", path, (long)getpid());
    if (o->storage == H5DS_STORE_ENCODED) {
        w->o.height = w->o.width = 0; /* images vary */
        w->echunk = (size_t)(o->encoded_chunk_bytes ? o->encoded_chunk_bytes : H5W_ENCODED_CHUNK);
    }
    w->image_bytes = (size_t)w->o.height * (size_t)w->o.width * (size_t)o->channels;

    guard_tmp(w->tmp);
    /* the 1.10 file format: checksummed superblock, object headers and chunk
     * indexes (HDF5 1.10 and later read it) */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) {
        if (fapl >= 0) H5Pclose(fapl);
        pst_fail(e, "%s: HDF5 setup failed (%s)", path, h5u_reason(why));
        goto fail;
    }
    w->file = H5Fcreate(w->tmp, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (w->file < 0) {
        int err = errno;
        pst_fail(e, "%s: cannot create (%s; %s)", w->tmp, h5u_reason(why), strerror(err));
        goto fail;
    }
    if (write_classes(w->file, "classes", o->class_names, o->num_classes) < 0) {
        pst_fail(e, "%s: writing /classes failed (%s)", w->tmp, h5u_reason(why));
        goto fail;
    }
    if (o->class_descriptions &&
        write_classes(w->file, "class_descriptions", o->class_descriptions, o->num_classes) < 0) {
        pst_fail(e, "%s: writing /class_descriptions failed (%s)", w->tmp, h5u_reason(why));
        goto fail;
    }
    if (o->compression > 0 && o->storage == H5DS_STORE_PIXELS && start_threads(w, e) < 0) goto fail;
    *out = w;
    return 0;
fail:
    h5w_abort(w);
    return -1;
}

/* ---- splits ------------------------------------------------------------------ */

/* A chunked dataset, shuffle+deflate when compressing; `checksum` adds a
 * Fletcher-32 filter (the labels: the images are written as pre-deflated
 * chunks, whose zlib streams carry their own Adler-32). */
static hid_t make_dataset(h5w *w, hid_t g, const char *name, hid_t type, int rank,
                          const hsize_t *dims, const hsize_t *chunk, bool checksum)
{
    hid_t s = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    if (s < 0 || dcpl < 0 || H5Pset_chunk(dcpl, rank, chunk) < 0) goto done;
    if (w->o.compression > 0 &&
        (H5Pset_shuffle(dcpl) < 0 || H5Pset_deflate(dcpl, (unsigned)w->o.compression) < 0))
        goto done;
    if (checksum && H5Pset_fletcher32(dcpl) < 0) goto done;
    d = H5Dcreate2(g, name, type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
done:
    if (dcpl >= 0) H5Pclose(dcpl);
    if (s >= 0) H5Sclose(s);
    return d;
}

/* /<split>/encoded: uint8, empty, growing by whole chunks, Fletcher-32, no
 * deflate (JPEG does not compress). */
static hid_t make_encoded(h5w *w, hid_t g)
{
    hsize_t dim = 0, maxdim = H5S_UNLIMITED, chunk = (hsize_t)w->echunk;
    hid_t s = H5Screate_simple(1, &dim, &maxdim), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    if (s < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, &chunk) < 0 || H5Pset_fletcher32(dcpl) < 0)
        goto done;
    d = H5Dcreate2(g, "encoded", H5T_STD_U8LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
done:
    if (dcpl >= 0) H5Pclose(dcpl);
    if (s >= 0) H5Sclose(s);
    return d;
}

static int begin_encoded(h5w *w, const char *name, int64_t n, pst_err *e)
{
    char why[256];
    hid_t g = H5Gcreate2(w->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return pst_fail(e, "%s: creating /%s failed (%s)", w->tmp, name, h5u_reason(why));
    hsize_t nd = (hsize_t)n, nchunk = PST_MIN(nd, H5W_LABEL_CHUNK);
    hsize_t od = nd + 1, ochunk = PST_MIN(od, H5W_LABEL_CHUNK);
    w->encoded = make_encoded(w, g);
    if (w->encoded >= 0)
        w->offsets = make_dataset(w, g, "offsets", H5T_STD_I64LE, 1, &od, &ochunk, true);
    if (w->offsets >= 0)
        w->heights = make_dataset(w, g, "heights", H5T_STD_I32LE, 1, &nd, &nchunk, true);
    if (w->heights >= 0)
        w->widths = make_dataset(w, g, "widths", H5T_STD_I32LE, 1, &nd, &nchunk, true);
    if (w->widths >= 0)
        w->labels = make_dataset(w, g, "labels", H5T_STD_I32LE, 1, &nd, &nchunk, true);
    H5Gclose(g);
    if (w->labels < 0)
        return pst_fail(e, "%s: creating /%s datasets failed (%s)", w->tmp, name, h5u_reason(why));
    snprintf(w->split, sizeof w->split, "%s", name);
    w->n = n;
    w->written = 0;
    w->ebuf = pst_malloc(w->echunk);
    w->efill = 0;
    w->etotal = w->eflushed = 0;
    w->obuf = pst_malloc((H5W_LABEL_CHUNK + 1) * sizeof *w->obuf);
    w->hbuf = pst_malloc(H5W_LABEL_CHUNK * sizeof *w->hbuf);
    w->wbuf = pst_malloc(H5W_LABEL_CHUNK * sizeof *w->wbuf);
    w->lbuf = pst_malloc(H5W_LABEL_CHUNK * sizeof *w->lbuf);
    w->bfirst = w->bfill = 0;
    return 0;
}

int h5w_split_begin(h5w *w, const char *name, int64_t n, pst_err *e)
{
    char why[256];
    if (w->split[0])
        return pst_fail(e, "%s: split '%s' begun while '%s' is still open", w->path, name,
                        w->split);
    if (strcmp(name, "train") && strcmp(name, "val") && strcmp(name, "test"))
        return pst_fail(e, "%s: split '%s', expected train, val or test", w->path, name);
    for (int i = 0; i < w->nsplits_done; i++)
        if (!strcmp(w->done[i], name))
            return pst_fail(e, "%s: split '%s' written twice", w->path, name);
    if (n < 1) return pst_fail(e, "%s: split '%s' has no examples", w->path, name);
    if (w->o.storage == H5DS_STORE_ENCODED) return begin_encoded(w, name, n, e);

    int64_t chunk = w->o.chunk_images;
    if (chunk == 0) chunk = PST_MAX((int64_t)1, (int64_t)(H5W_CHUNK_TARGET / w->image_bytes));
    chunk = PST_MIN(chunk, n);
    if ((uint64_t)chunk * w->image_bytes > ((uint64_t)4 << 30) - 1)
        return pst_fail(e, "%s: chunks of %lld images exceed HDF5's 4 GiB chunk limit", w->path,
                        (long long)chunk);

    hid_t g = H5Gcreate2(w->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return pst_fail(e, "%s: creating /%s failed (%s)", w->tmp, name, h5u_reason(why));
    hsize_t idims[4] = {(hsize_t)n, (hsize_t)w->o.height, (hsize_t)w->o.width,
                        (hsize_t)w->o.channels};
    hsize_t ichunk[4] = {(hsize_t)chunk, idims[1], idims[2], idims[3]};
    hsize_t ldims = (hsize_t)n, lchunk = PST_MIN((hsize_t)n, H5W_LABEL_CHUNK);
    w->images = make_dataset(w, g, "images", H5T_STD_U8LE, 4, idims, ichunk, false);
    if (w->images >= 0)
        w->labels = make_dataset(w, g, "labels", H5T_STD_I32LE, 1, &ldims, &lchunk, true);
    H5Gclose(g);
    if (w->images < 0 || w->labels < 0)
        return pst_fail(e, "%s: creating /%s datasets failed (%s)", w->tmp, name, h5u_reason(why));
    snprintf(w->split, sizeof w->split, "%s", name);
    w->n = n;
    w->written = 0;
    w->chunk = chunk;
    w->cfill = 0;
    w->lbuf = pst_malloc((size_t)chunk * sizeof *w->lbuf);
    w->chunk_bytes = (size_t)chunk * w->image_bytes;
    /* a deflated chunk only counts when smaller than the raw one */
    w->zcap = w->nthreads ? w->chunk_bytes : 0;
    /* enough slots to keep every thread busy while the caller fills more,
     * within a memory bound for huge chunks */
    size_t ring = (size_t)(2 * w->nthreads + 2);
    ring = PST_MIN(ring, PST_MAX((size_t)2, H5W_RING_BYTES / (w->chunk_bytes + w->zcap)));
    w->nslots = (int)ring;
    w->slots = pst_calloc(ring, sizeof *w->slots);
    for (size_t i = 0; i < ring; i++) {
        w->slots[i].raw = pst_malloc(w->chunk_bytes);
        if (w->zcap) w->slots[i].z = pst_malloc(w->zcap);
    }
    pthread_mutex_lock(&w->mu);
    w->nsub = w->ntake = w->nwrit = 0;
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Waits for the oldest submitted chunk, writes it with H5Dwrite_chunk. */
static int write_oldest(h5w *w, pst_err *e)
{
    char why[256];
    h5w_slot *sl = &w->slots[w->nwrit % w->nslots];
    pthread_mutex_lock(&w->mu);
    while (sl->state == SLOT_QUEUED) pthread_cond_wait(&w->finished, &w->mu);
    int state = sl->state;
    pthread_mutex_unlock(&w->mu);
    int64_t first = sl->first, last = PST_MIN(first + w->chunk, w->n);
    if (state == SLOT_FAILED)
        return pst_fail(e, "%s: /%s: compressing examples [%lld, %lld) failed (out of memory)",
                        w->tmp, w->split, (long long)first, (long long)last);
    hsize_t offset[4] = {(hsize_t)first, 0, 0, 0};
    uint32_t mask = 0;
    const void *data = sl->raw;
    size_t len = w->chunk_bytes;
    if (w->nthreads) {
        if (sl->zlen < w->chunk_bytes) {
            data = sl->z;
            len = sl->zlen;
        } else {
            mask = H5W_DEFLATE_SKIPPED; /* incompressible: stored raw, as HDF5 would */
        }
    }
    if (H5Dwrite_chunk(w->images, H5P_DEFAULT, mask, offset, len, data) < 0)
        return pst_fail(e, "%s: writing /%s/images examples [%lld, %lld) failed (%s)", w->tmp,
                        w->split, (long long)first, (long long)last, h5u_reason(why));
    sl->state = SLOT_FREE;
    w->nwrit++;
    return 0;
}

/* Hands the chunk being filled (whole, or the last partial one padded with
 * zeros) to the deflate threads, and writes its labels. */
static int submit_chunk(h5w *w, pst_err *e)
{
    char why[256];
    if (w->cfill == 0) return 0;
    h5w_slot *sl = &w->slots[w->nsub % w->nslots];
    int64_t first = w->written - w->cfill;
    size_t used = (size_t)w->cfill * w->image_bytes;
    if (used < w->chunk_bytes) memset(sl->raw + used, 0, w->chunk_bytes - used);
    sl->first = first;

    hsize_t start = (hsize_t)first, cnt = (hsize_t)w->cfill;
    hid_t fs = H5Dget_space(w->labels), ms = H5Screate_simple(1, &cnt, NULL);
    int rc = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &cnt, NULL) >= 0 &&
        H5Dwrite(w->labels, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, w->lbuf) >= 0)
        rc = 0;
    else
        pst_fail(e, "%s: writing /%s/labels [%lld, %lld) failed (%s)", w->tmp, w->split,
                 (long long)first, (long long)(first + w->cfill), h5u_reason(why));
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (rc < 0) return -1;

    w->cfill = 0;
    if (!w->nthreads) {
        sl->state = SLOT_DONE;
        w->nsub++;
        return write_oldest(w, e);
    }
    pthread_mutex_lock(&w->mu);
    sl->state = SLOT_QUEUED;
    w->nsub++;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Adds `count` images of `npix` pixels each to the per-channel integer sums. */
static void accumulate_stats(h5w *w, const uint8_t *img, int64_t count, size_t npix)
{
    const int c = w->o.channels;
    const size_t image_bytes = npix * (size_t)c;
    for (int64_t i = 0; i < count; i++, img += image_bytes) {
        if (c == 1) { /* the common grayscale case, in a loop the compiler vectorizes */
            uint64_t s = 0, sq = 0;
            for (size_t j = 0; j < npix; j++) {
                uint32_t x = img[j];
                s += x;
                sq += x * x;
            }
            w->sum[0] += s;
            w->sumsq[0] += sq;
            continue;
        }
        for (int ch = 0; ch < c; ch++) {
            /* per image, one channel: < 2^16 * 2^16 * 255^2 fits uint64 */
            uint64_t s = 0, sq = 0;
            const uint8_t *p = img + ch;
            for (size_t j = 0; j < npix; j++) {
                uint32_t x = p[j * (size_t)c];
                s += x;
                sq += x * x;
            }
            w->sum[ch] += s;
            w->sumsq[ch] += sq;
        }
    }
    w->npix += (uint64_t)count * npix;
}

int h5w_split_append(h5w *w, const uint8_t *images, const int32_t *labels, int64_t count,
                     pst_err *e)
{
    if (!w->split[0]) return pst_fail(e, "%s: append without an open split", w->path);
    if (w->o.storage != H5DS_STORE_PIXELS)
        return pst_fail(e,
                        "%s: /%s: pixels appended to an encoded data set "
                        "(use h5w_split_append_encoded)",
                        w->path, w->split);
    if (count < 0 || count > w->n - w->written)
        return pst_fail(e, "%s: /%s: appending %lld examples after %lld exceeds the %lld declared",
                        w->path, w->split, (long long)count, (long long)w->written,
                        (long long)w->n);
    for (int64_t i = 0; i < count; i++)
        if (labels[i] < 0 || labels[i] >= w->o.num_classes)
            return pst_fail(e, "%s: /%s: label %d of example %lld outside [0, %d)", w->path,
                            w->split, labels[i], (long long)(w->written + i), w->o.num_classes);
    bool train = !strcmp(w->split, "train");
    while (count > 0) {
        /* a new chunk needs a free slot: write the oldest when the ring is full */
        if (w->cfill == 0 && w->nsub - w->nwrit == w->nslots && write_oldest(w, e) < 0) return -1;
        uint8_t *raw = w->slots[w->nsub % w->nslots].raw;
        int64_t take = PST_MIN(count, w->chunk - w->cfill);
        memcpy(raw + (size_t)w->cfill * w->image_bytes, images, (size_t)take * w->image_bytes);
        memcpy(w->lbuf + w->cfill, labels, (size_t)take * sizeof *labels);
        if (train) accumulate_stats(w, images, take, w->image_bytes / (size_t)w->o.channels);
        w->cfill += take;
        w->written += take;
        images += (size_t)take * w->image_bytes;
        labels += take;
        count -= take;
        if (w->cfill == w->chunk && submit_chunk(w, e) < 0) return -1;
    }
    return 0;
}

/* Writes `count` values of `type` from buf at [first, first+count) of 1-D dataset d. */
static int write_range(hid_t d, hid_t type, int64_t first, int64_t count, const void *buf)
{
    hsize_t start = (hsize_t)first, cnt = (hsize_t)count;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &cnt, NULL);
    int rc = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &cnt, NULL) >= 0 &&
        H5Dwrite(d, type, ms, fs, H5P_DEFAULT, buf) >= 0)
        rc = 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

/* Writes the bytes gathered in ebuf (a whole chunk, or the split's last part
 * of one) at the end of /<split>/encoded. */
static int flush_bytes(h5w *w, pst_err *e)
{
    char why[256];
    if (w->efill == 0) return 0;
    hsize_t size = (hsize_t)(w->eflushed + (int64_t)w->efill);
    if (H5Dset_extent(w->encoded, &size) < 0 ||
        write_range(w->encoded, H5T_NATIVE_UINT8, w->eflushed, (int64_t)w->efill, w->ebuf) < 0)
        return pst_fail(e, "%s: writing /%s/encoded bytes [%lld, %lld) failed (%s)", w->tmp,
                        w->split, (long long)w->eflushed, (long long)size, h5u_reason(why));
    w->eflushed = (int64_t)size;
    w->efill = 0;
    return 0;
}

/* Writes the block of per-image entries; `last` adds offsets[N], the end. */
static int flush_block(h5w *w, bool last, pst_err *e)
{
    char why[256];
    int64_t first = w->bfirst, cnt = w->bfill;
    w->obuf[cnt] = w->etotal;
    const char *bad = NULL;
    if (cnt + last > 0 && write_range(w->offsets, H5T_NATIVE_INT64, first, cnt + last, w->obuf) < 0)
        bad = "offsets";
    else if (cnt > 0 && write_range(w->heights, H5T_NATIVE_INT32, first, cnt, w->hbuf) < 0)
        bad = "heights";
    else if (cnt > 0 && write_range(w->widths, H5T_NATIVE_INT32, first, cnt, w->wbuf) < 0)
        bad = "widths";
    else if (cnt > 0 && write_range(w->labels, H5T_NATIVE_INT32, first, cnt, w->lbuf) < 0)
        bad = "labels";
    if (bad)
        return pst_fail(e, "%s: writing /%s/%s [%lld, %lld) failed (%s)", w->tmp, w->split, bad,
                        (long long)first, (long long)(first + cnt), h5u_reason(why));
    w->bfirst += cnt;
    w->bfill = 0;
    return 0;
}

int h5w_split_append_encoded(h5w *w, const uint8_t *jpeg, size_t n, int height, int width,
                             int32_t label, const uint8_t *px, int64_t npx, pst_err *e)
{
    if (!w->split[0]) return pst_fail(e, "%s: append without an open split", w->path);
    if (w->o.storage != H5DS_STORE_ENCODED)
        return pst_fail(e,
                        "%s: /%s: encoded bytes appended to a pixels data set "
                        "(use h5w_split_append)",
                        w->path, w->split);
    const long long ex = (long long)w->written;
    if (w->written >= w->n)
        return pst_fail(e, "%s: /%s: appending example %lld exceeds the %lld declared", w->path,
                        w->split, ex, (long long)w->n);
    if (!jpeg || n == 0)
        return pst_fail(e, "%s: /%s: example %lld has no bytes, expected a JPEG", w->path, w->split,
                        ex);
    if ((uint64_t)n > (uint64_t)INT64_MAX - (uint64_t)w->etotal)
        return pst_fail(e, "%s: /%s: example %lld: the split's bytes overflow int64", w->path,
                        w->split, ex);
    if (height < 1 || width < 1 || height > H5W_MAX_SIDE || width > H5W_MAX_SIDE)
        return pst_fail(e, "%s: /%s: example %lld is %dx%d, expected 1..%d on each side", w->path,
                        w->split, ex, height, width, H5W_MAX_SIDE);
    if (label < 0 || label >= w->o.num_classes)
        return pst_fail(e, "%s: /%s: label %d of example %lld outside [0, %d)", w->path, w->split,
                        label, ex, w->o.num_classes);
    bool train = !strcmp(w->split, "train");
    if (train && (!px || npx < 1))
        return pst_fail(e,
                        "%s: /train: example %lld has no decoded pixels (the train split's "
                        "mean/std need them)",
                        w->path, ex);
    /* the bytes, through the chunk buffer */
    size_t at = 0;
    while (at < n) {
        size_t take = PST_MIN(n - at, w->echunk - w->efill);
        memcpy(w->ebuf + w->efill, jpeg + at, take);
        w->efill += take;
        at += take;
        if (w->efill == w->echunk && flush_bytes(w, e) < 0) return -1;
    }
    /* the per-image entries */
    w->obuf[w->bfill] = w->etotal;
    w->hbuf[w->bfill] = height;
    w->wbuf[w->bfill] = width;
    w->lbuf[w->bfill] = label;
    w->bfill++;
    w->etotal += (int64_t)n;
    w->written++;
    if (train && px) accumulate_stats(w, px, 1, (size_t)npx);
    if (w->bfill == (int64_t)H5W_LABEL_CHUNK && flush_block(w, false, e) < 0) return -1;
    return 0;
}

/* Closes the split's datasets and frees its slots; the deflate threads must
 * be idle (all chunks written) or stopped. */
static void close_split(h5w *w)
{
    if (w->images >= 0) H5Dclose(w->images);
    if (w->labels >= 0) H5Dclose(w->labels);
    if (w->encoded >= 0) H5Dclose(w->encoded);
    if (w->offsets >= 0) H5Dclose(w->offsets);
    if (w->heights >= 0) H5Dclose(w->heights);
    if (w->widths >= 0) H5Dclose(w->widths);
    w->images = w->labels = -1;
    w->encoded = w->offsets = w->heights = w->widths = -1;
    free(w->ebuf);
    free(w->obuf);
    free(w->hbuf);
    free(w->wbuf);
    w->ebuf = NULL;
    w->obuf = NULL;
    w->hbuf = w->wbuf = NULL;
    for (int i = 0; i < w->nslots; i++) {
        free(w->slots[i].raw);
        free(w->slots[i].z);
    }
    free(w->slots);
    free(w->lbuf);
    w->slots = NULL;
    w->nslots = 0;
    w->lbuf = NULL;
    w->split[0] = 0;
}

int h5w_split_end(h5w *w, pst_err *e)
{
    if (!w->split[0]) return pst_fail(e, "%s: no open split to end", w->path);
    if (w->written != w->n)
        return pst_fail(e, "%s: /%s: %lld examples written, %lld declared", w->path, w->split,
                        (long long)w->written, (long long)w->n);
    if (w->o.storage == H5DS_STORE_ENCODED) {
        if (flush_bytes(w, e) < 0 || flush_block(w, true, e) < 0) return -1;
    } else {
        if (submit_chunk(w, e) < 0) return -1;
        while (w->nwrit < w->nsub)
            if (write_oldest(w, e) < 0) return -1;
    }
    if (!strcmp(w->split, "train")) w->have_train = true;
    snprintf(w->done[w->nsplits_done++], sizeof w->done[0], "%s", w->split);
    close_split(w);
    return 0;
}

/* ---- commit ------------------------------------------------------------------- */

/* Stops the threads and frees w itself (the file is closed by then). */
static void free_writer(h5w *w)
{
    stop_threads(w);
    pthread_cond_destroy(&w->finished);
    pthread_cond_destroy(&w->work);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

int h5w_commit(h5w *w, pst_err *e)
{
    char why[256];
    if (w->split[0]) {
        pst_fail(e, "%s: split '%s' not ended before commit", w->path, w->split);
        goto fail;
    }
    if (!w->have_train) {
        pst_fail(e, "%s: no train split written (mean/std come from it)", w->path);
        goto fail;
    }
    const int c = w->o.channels;
    double mean[H5DS_MAX_CHANNELS], sd[H5DS_MAX_CHANNELS];
    for (int ch = 0; ch < c; ch++) {
        /* var*255^2 = (n*sumsq - sum^2) / n^2, exact in 128-bit integers */
        h5w_u128 n = w->npix, s = w->sum[ch], sq = w->sumsq[ch];
        h5w_u128 num = n * sq - s * s;
        double nd = (double)w->npix;
        mean[ch] = (double)w->sum[ch] / nd / 255.0;
        sd[ch] = sqrt((double)num / (nd * nd)) / 255.0;
    }
    char created[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    hid_t f = w->file;
    const bool enc = w->o.storage == H5DS_STORE_ENCODED;
    if (write_attr_str(f, "format", H5DS_FORMAT) < 0 ||
        write_attr_int(f, "format_version",
                       enc ? H5DS_FORMAT_VERSION_ENCODED : H5DS_FORMAT_VERSION) < 0 ||
        write_attr_str(f, "storage", enc ? "encoded" : "pixels") < 0 ||
        write_attr_int(f, "height", w->o.height) < 0 ||
        write_attr_int(f, "width", w->o.width) < 0 || write_attr_int(f, "channels", c) < 0 ||
        write_attr_int(f, "num_classes", w->o.num_classes) < 0 ||
        write_attr_doubles(f, "mean", mean, c) < 0 || write_attr_doubles(f, "std", sd, c) < 0 ||
        write_attr_str(f, "source", w->o.source ? w->o.source : "") < 0 ||
        write_attr_str(f, "created", created) < 0) {
        pst_fail(e, "%s: writing the root attributes failed (%s)", w->tmp, h5u_reason(why));
        goto fail;
    }
    herr_t closed = H5Fclose(w->file);
    w->file = -1;
    if (closed < 0) {
        pst_fail(e, "%s: closing failed (%s)", w->tmp, h5u_reason(why));
        goto fail;
    }
    if (pst_fsync_path(w->tmp, false) < 0) {
        pst_fail(e, "%s: fsync failed: %s", w->tmp, strerror(errno));
        goto fail;
    }
    if (publish(w->tmp, w->path, w->o.force) < 0) {
        if (errno == EEXIST)
            pst_fail(e,
                     "%s: exists (written by another run meanwhile; use --force to overwrite it)",
                     w->path);
        else
            pst_fail(e, "%s: renaming %s to it failed: %s", w->path, w->tmp, strerror(errno));
        goto fail;
    }
    unguard_tmp();
    /* make the rename itself durable (best effort: some file systems refuse) */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", w->path);
    pst_fsync_path(dirname(dir), true);
    free_writer(w);
    return 0;
fail:
    h5w_abort(w);
    return -1;
}

void h5w_abort(h5w *w)
{
    if (!w) return;
    stop_threads(w);
    close_split(w);
    if (w->file >= 0) H5Fclose(w->file);
    H5Eclear2(H5E_DEFAULT);
    unlink(w->tmp);
    unguard_tmp();
    free_writer(w);
}
