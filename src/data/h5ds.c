/*
 * h5ds.c - opening and reading pstrain data sets (layout in pstrain/h5ds.h).
 *
 * h5ds_open keeps what the one check (h5ds_check_file, h5ds_check.c) read
 * and refuses a file with any problem; the reads re-check their ranges
 * against what was opened. Every call holds the HDF5 lock; HDF5's automatic
 * error printing is turned off and its innermost message folded into our
 * one-line errors.
 */
#include "h5ds_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- lifetime ---------------------------------------------------------------- */

void h5ds_free_names(char **names, int k)
{
    if (!names) return;
    for (int i = 0; i < k; i++) free(names[i]);
    free(names);
}

static void close_split_ids(h5ds_split *sp)
{
    int64_t *ids[] = {&sp->images_id,  &sp->labels_id,  &sp->encoded_id,
                      &sp->offsets_id, &sp->heights_id, &sp->widths_id};
    for (size_t j = 0; j < PST_ARRAY_LEN(ids); j++) {
        if (*ids[j] > 0) H5Dclose(*ids[j]);
        *ids[j] = -1;
    }
}

void h5ds_close_ids(h5ds *ds)
{
    for (int i = 0; i < ds->nsplits; i++) close_split_ids(&ds->splits[i]);
    if (ds->file > 0) H5Fclose(ds->file);
    ds->file = -1;
}

typedef struct first_problem {
    char msg[PST_ERR_LEN];
    int n;
} first_problem;

static void keep_first(void *ctx, const char *msg)
{
    first_problem *fp = ctx;
    if (!fp->n++) snprintf(fp->msg, sizeof fp->msg, "%s", msg);
}

int h5ds_open(h5ds *ds, const char *path, pst_err *e)
{
    memset(ds, 0, sizeof *ds);
    ds->file = -1;
    first_problem fp = {"", 0};
    h5u_lock();
    int n = h5ds_check_file(path, keep_first, &fp, e, ds);
    h5u_unlock();
    if (n < 0) return -1;
    if (n > 0) {
        ds->file = -1;
        ds->nsplits = 0;
        if (n == 1) return pst_fail(e, "%s: %s", path, fp.msg);
        return pst_fail(e, "%s: %s (and %d more problem%s; see pstrain-prep verify %s)", path,
                        fp.msg, n - 1, n == 2 ? "" : "s", path);
    }
    return 0;
}

void h5ds_close(h5ds *ds)
{
    if (!ds) return;
    h5u_lock();
    h5ds_quiet();
    h5ds_close_ids(ds);
    h5u_unlock();
    h5ds_free_names(ds->class_names, ds->num_classes);
    ds->class_names = NULL;
    ds->nsplits = 0;
}

const h5ds_split *h5ds_find_split(const h5ds *ds, const char *name)
{
    for (int i = 0; i < ds->nsplits; i++)
        if (!strcmp(ds->splits[i].name, name)) return &ds->splits[i];
    return NULL;
}

int h5ds_no_split(const h5ds *ds, const char *name, pst_err *e)
{
    char have[64] = "";
    for (int i = 0; i < ds->nsplits; i++) {
        size_t n = strlen(have);
        snprintf(have + n, sizeof have - n, "%s%s", i ? ", " : "", ds->splits[i].name);
    }
    return pst_fail(e, "%s: no '%s' split (this data set has %s)", ds->path, name,
                    ds->nsplits ? have : "none");
}

/* ---- reads ------------------------------------------------------------------ */

/* Reads values [at, at+cnt) of 1-D dataset d as `mtype` into buf. */
int h5ds_read_1d(hid_t d, hid_t mtype, int64_t at, int64_t cnt, void *buf)
{
    hsize_t start = (hsize_t)at, n = (hsize_t)cnt;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &n, NULL);
    int rc = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &n, NULL) >= 0 &&
        H5Dread(d, mtype, ms, fs, H5P_DEFAULT, buf) >= 0)
        rc = 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

/* Reads rows [first, first+count) of dataset d (rank 1 or 4) as `mtype`. */
static int read_rows(hid_t d, hid_t mtype, int64_t first, int64_t count, void *buf)
{
    hid_t fs = H5Dget_space(d), ms = -1;
    int rc = -1;
    hsize_t dims[H5S_MAX_RANK], start[H5S_MAX_RANK] = {0}, cnt[H5S_MAX_RANK];
    int rank = fs < 0 ? -1 : H5Sget_simple_extent_dims(fs, dims, NULL);
    if (rank < 1) goto done;
    start[0] = (hsize_t)first;
    cnt[0] = (hsize_t)count;
    for (int i = 1; i < rank; i++) cnt[i] = dims[i];
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) < 0) goto done;
    ms = H5Screate_simple(rank, cnt, NULL); /* same shape: the fast copy path */
    if (ms < 0 || H5Dread(d, mtype, ms, fs, H5P_DEFAULT, buf) < 0) goto done;
    rc = 0;
done:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

/* h5ds_read without the lock. */
static int read_unlocked(h5ds *ds, const char *split, int64_t first, int64_t count, uint8_t *images,
                         int32_t *labels, pst_err *e)
{
    char why[256];
    h5ds_quiet();
    const h5ds_split *sp = h5ds_find_split(ds, split);
    if (!sp) return h5ds_no_split(ds, split, e);
    if (first < 0 || count < 0 || first > sp->count || count > sp->count - first)
        return pst_fail(e, "%s: /%s: examples [%lld, %lld) requested, the split has [0, %lld)",
                        ds->path, split, (long long)first, (long long)(first + count),
                        (long long)sp->count);
    if (images && ds->storage == H5DS_STORE_ENCODED)
        return pst_fail(e,
                        "%s: /%s holds encoded images (storage 'encoded'), not pixels: read it "
                        "with h5ds_read_encoded",
                        ds->path, split);
    if (count == 0) return 0;
    if (images && read_rows(sp->images_id, H5T_NATIVE_UINT8, first, count, images) < 0)
        return pst_fail(e, "%s: /%s/images: reading examples [%lld, %lld) failed (%s)", ds->path,
                        split, (long long)first, (long long)(first + count), h5u_reason(why));
    if (labels && read_rows(sp->labels_id, H5T_NATIVE_INT32, first, count, labels) < 0)
        return pst_fail(e, "%s: /%s/labels: reading examples [%lld, %lld) failed (%s)", ds->path,
                        split, (long long)first, (long long)(first + count), h5u_reason(why));
    return 0;
}

int h5ds_read(h5ds *ds, const char *split, int64_t first, int64_t count, uint8_t *images,
              int32_t *labels, pst_err *e)
{
    h5u_lock();
    int rc = read_unlocked(ds, split, first, count, images, labels, e);
    h5u_unlock();
    return rc;
}

/* h5ds_read_encoded without the lock. */
static int read_encoded_unlocked(h5ds *ds, const char *split, int64_t first, int64_t count,
                                 int64_t *offsets, uint8_t *bytes, size_t bytes_cap,
                                 int32_t *labels, int32_t *heights, int32_t *widths, pst_err *e)
{
    char why[256];
    h5ds_quiet();
    const h5ds_split *sp = h5ds_find_split(ds, split);
    if (!sp) return h5ds_no_split(ds, split, e);
    if (ds->storage != H5DS_STORE_ENCODED)
        return pst_fail(e,
                        "%s: /%s holds pixels (storage 'pixels'), not encoded images: read it "
                        "with h5ds_read",
                        ds->path, split);
    if (first < 0 || count < 0 || first > sp->count || count > sp->count - first)
        return pst_fail(e, "%s: /%s: examples [%lld, %lld) requested, the split has [0, %lld)",
                        ds->path, split, (long long)first, (long long)(first + count),
                        (long long)sp->count);
    const long long lo = (long long)first, hi = (long long)(first + count);
    int64_t *off = offsets, two[2];
    if (!off && bytes) off = count == 0 ? two : pst_malloc((size_t)(count + 1) * sizeof *off);
    int rc = -1;
    if (off) {
        if (h5ds_read_1d(sp->offsets_id, H5T_NATIVE_INT64, first, count + 1, off) < 0) {
            pst_fail(e, "%s: /%s/offsets: reading [%lld, %lld] failed (%s)", ds->path, split, lo,
                     hi, h5u_reason(why));
            goto done;
        }
        /* h5ds_open checked them; a file changed since must not make us overrun */
        const int64_t base = off[0];
        for (int64_t i = 0; i <= count; i++) {
            if (off[i] < base || off[i] > sp->encoded_bytes || (i && off[i] <= off[i - 1] + base)) {
                pst_fail(e,
                         "%s: /%s/offsets[%lld] = %lld, expected increasing offsets within "
                         "[0, %lld] (the file changed after it was opened?)",
                         ds->path, split, (long long)(first + i), (long long)off[i],
                         (long long)sp->encoded_bytes);
                goto done;
            }
            off[i] -= base;
        }
        int64_t need = off[count];
        if (bytes && count > 0) {
            if ((uint64_t)need > (uint64_t)bytes_cap) {
                pst_fail(e,
                         "%s: /%s/encoded: examples [%lld, %lld) need a buffer of %lld bytes, "
                         "got %zu",
                         ds->path, split, lo, hi, (long long)need, bytes_cap);
                goto done;
            }
            if (h5ds_read_1d(sp->encoded_id, H5T_NATIVE_UINT8, base, need, bytes) < 0) {
                pst_fail(e, "%s: /%s/encoded: reading examples [%lld, %lld) failed (%s)", ds->path,
                         split, lo, hi, h5u_reason(why));
                goto done;
            }
        }
    }
    if (count > 0) {
        const struct {
            hid_t d;
            int32_t *buf;
            const char *name;
        } ints[] = {{sp->labels_id, labels, "labels"},
                    {sp->heights_id, heights, "heights"},
                    {sp->widths_id, widths, "widths"}};
        for (size_t j = 0; j < PST_ARRAY_LEN(ints); j++)
            if (ints[j].buf &&
                h5ds_read_1d(ints[j].d, H5T_NATIVE_INT32, first, count, ints[j].buf) < 0) {
                pst_fail(e, "%s: /%s/%s: reading examples [%lld, %lld) failed (%s)", ds->path,
                         split, ints[j].name, lo, hi, h5u_reason(why));
                goto done;
            }
    }
    rc = 0;
done:
    if (off != offsets && off != two) free(off);
    return rc;
}

int h5ds_read_encoded(h5ds *ds, const char *split, int64_t first, int64_t count, int64_t *offsets,
                      uint8_t *bytes, size_t bytes_cap, int32_t *labels, int32_t *heights,
                      int32_t *widths, pst_err *e)
{
    h5u_lock();
    int rc = read_encoded_unlocked(ds, split, first, count, offsets, bytes, bytes_cap, labels,
                                   heights, widths, e);
    h5u_unlock();
    return rc;
}
