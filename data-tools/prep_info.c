/*
 * prep_info.c - `pstrain-prep info FILE.h5`: what a data set holds (storage
 * mode, splits, shapes, classes with counts, mean/std, chunking and
 * compression, size; for encoded storage the bytes per split and image and
 * the range of image sizes).
 * Only sound data sets are described (the file is opened with h5ds_open);
 * `pstrain-prep verify` lists the problems of the others.
 */
#include <hdf5.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "prep.h"
#include "pstrain/common.h"
#include "pstrain/usage.h"
#include "pstrain/h5ds.h"

#define INFO_LABEL_BLOCK ((int64_t)1 << 20)

static void usage(FILE *out)
{
    fprintf(out, "usage: pstrain-prep info FILE.h5\n"
                 "\n"
                 "Prints the storage mode (pixels or encoded), the splits, image shape,\n"
                 "classes with their counts per split, mean/std, chunking and compression,\n"
                 "and the file size of a data set. For encoded storage (JPEG bytes) each\n"
                 "split shows its total encoded bytes, the mean bytes per image and the\n"
                 "smallest, largest and mean image height and width.\n");
}

static void format_bytes(double b, char *buf, size_t n)
{
    if (b >= 1e9)
        snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(buf, n, "%.1f MB", b / 1e6);
    else if (b >= 1e3)
        snprintf(buf, n, "%.1f kB", b / 1e3);
    else
        snprintf(buf, n, "%.0f B", b);
}

/* "chunks of 668 images (512.1 kB), shuffle + deflate(4)" for a dataset. */
static void describe_storage(hid_t d, size_t image_bytes, char *buf, size_t n)
{
    hid_t dcpl = H5Dget_create_plist(d);
    size_t len = 0;
    buf[0] = 0;
    if (dcpl < 0) {
        snprintf(buf, n, "layout unknown");
        return;
    }
    H5D_layout_t layout = H5Pget_layout(dcpl);
    if (layout == H5D_CHUNKED) {
        hsize_t cd[4] = {0};
        char sz[32];
        int rank = H5Pget_chunk(dcpl, 4, cd);
        if (rank == 1 && image_bytes == 0) { /* /<split>/encoded: a byte stream */
            format_bytes((double)cd[0], sz, sizeof sz);
            len += (size_t)snprintf(buf, n, "chunks of %s", sz);
        } else if (rank == 4) {
            format_bytes((double)(cd[0] * cd[1] * cd[2] * cd[3]), sz, sizeof sz);
            len += (size_t)snprintf(buf, n, "chunks of %llu image%s (%s)",
                                    (unsigned long long)cd[0], cd[0] == 1 ? "" : "s", sz);
            if (cd[1] * cd[2] * cd[3] != image_bytes)
                len += (size_t)snprintf(buf + len, n - len, ", not whole images");
        } else {
            len += (size_t)snprintf(buf, n, "chunked");
        }
    } else {
        len += (size_t)snprintf(buf, n, layout == H5D_CONTIGUOUS ? "contiguous" : "compact");
    }
    int nf = H5Pget_nfilters(dcpl);
    bool deflate = false;
    for (int i = 0; i < nf; i++) {
        unsigned flags;
        size_t ncd = 0;
        deflate |= H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, NULL, 0, NULL, NULL) ==
                   H5Z_FILTER_DEFLATE;
    }
    if (!deflate && len < n) len += (size_t)snprintf(buf + len, n - len, ", uncompressed");
    for (int i = 0; i < nf && len < n; i++) {
        unsigned flags, cd_values[8];
        size_t ncd = PST_ARRAY_LEN(cd_values);
        char name[64] = "";
        H5Z_filter_t f =
            H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd_values, sizeof name, name, NULL);
        const char *sep = i == 0 ? ", " : " + ";
        if (f == H5Z_FILTER_DEFLATE)
            len += (size_t)snprintf(buf + len, n - len, "%sdeflate(%u)", sep,
                                    ncd > 0 ? cd_values[0] : 0);
        else if (f == H5Z_FILTER_SHUFFLE)
            len += (size_t)snprintf(buf + len, n - len, "%sshuffle", sep);
        else if (f == H5Z_FILTER_FLETCHER32)
            len += (size_t)snprintf(buf + len, n - len, "%sFletcher-32", sep);
        else
            len += (size_t)snprintf(buf + len, n - len, "%s%s", sep, name[0] ? name : "filter");
    }
    H5Pclose(dcpl);
}

/* Sizes of the images of an encoded split: smallest, largest, mean. */
typedef struct side_stats {
    int32_t hmin, hmax, wmin, wmax;
    double hsum, wsum;
} side_stats;

static int encoded_sides(h5ds *ds, const h5ds_split *sp, side_stats *st, pst_err *e)
{
    int64_t block = PST_MIN(sp->count, INFO_LABEL_BLOCK);
    int32_t *h = pst_malloc((size_t)block * sizeof *h), *w = pst_malloc((size_t)block * sizeof *w);
    *st = (side_stats){INT32_MAX, 0, INT32_MAX, 0, 0, 0};
    int rc = 0;
    for (int64_t at = 0; at < sp->count; at += block) {
        int64_t n = PST_MIN(block, sp->count - at);
        if (h5ds_read_encoded(ds, sp->name, at, n, NULL, NULL, 0, NULL, h, w, e) < 0) {
            rc = -1;
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            st->hmin = PST_MIN(st->hmin, h[i]);
            st->hmax = PST_MAX(st->hmax, h[i]);
            st->wmin = PST_MIN(st->wmin, w[i]);
            st->wmax = PST_MAX(st->wmax, w[i]);
            st->hsum += h[i];
            st->wsum += w[i];
        }
    }
    free(h);
    free(w);
    return rc;
}

/* Counts the labels of a split per class. */
static int count_labels(h5ds *ds, const h5ds_split *sp, int64_t *counts, pst_err *e)
{
    int64_t block = PST_MIN(sp->count, INFO_LABEL_BLOCK);
    int32_t *labels = pst_malloc((size_t)block * sizeof *labels);
    for (int64_t at = 0; at < sp->count; at += block) {
        int64_t n = PST_MIN(block, sp->count - at);
        if (h5ds_read(ds, sp->name, at, n, NULL, labels, e) < 0) {
            free(labels);
            return -1;
        }
        for (int64_t i = 0; i < n; i++) counts[labels[i]]++;
    }
    free(labels);
    return 0;
}

static int run_info(const char *path)
{
    h5ds ds;
    pst_err e;
    int64_t *counts = NULL;
    int rc = 1;
    if (h5ds_open(&ds, path, &e) < 0) {
        pst_error("%s", e.msg);
        return 1;
    }
    struct stat st;
    char size[32] = "?";
    if (stat(path, &st) == 0) format_bytes((double)st.st_size, size, sizeof size);
    const int c = ds.channels;
    const size_t image_bytes = (size_t)ds.height * (size_t)ds.width * (size_t)c;
    const bool enc = ds.storage == H5DS_STORE_ENCODED;
    printf("%s: %s version %d, %s\n", path, H5DS_FORMAT, ds.format_version, size);
    if (enc) {
        printf("  storage   encoded (each image's JPEG bytes, decoded at training time)\n");
        printf("  images    JPEG of any size, decoded to %d channel%s, uint8\n", c,
               c == 1 ? "" : "s");
    } else {
        printf("  storage   pixels\n");
        printf("  images    %d x %d x %d (height x width x channels), uint8\n", ds.height, ds.width,
               c);
    }
    printf("  classes   %d\n", ds.num_classes);
    printf("  mean     ");
    for (int i = 0; i < c; i++) printf(" %.4f", ds.mean[i]);
    printf("   (train pixels scaled to [0,1], per channel)\n  std      ");
    for (int i = 0; i < c; i++) printf(" %.4f", ds.std[i]);
    printf("\n  source    %s\n  created   %s\n", ds.source, ds.created);

    printf("splits:\n");
    for (int s = 0; s < ds.nsplits; s++) {
        const h5ds_split *sp = &ds.splits[s];
        char storage[256], raw[32], stored[32];
        if (enc) {
            side_stats ss;
            char total[32], mean_b[32];
            if (encoded_sides(&ds, sp, &ss, &e) < 0) {
                pst_error("%s", e.msg);
                goto done;
            }
            describe_storage(sp->encoded_id, 0, storage, sizeof storage);
            format_bytes((double)sp->encoded_bytes, total, sizeof total);
            format_bytes((double)sp->encoded_bytes / (double)sp->count, mean_b, sizeof mean_b);
            printf("  %-6s %9lld images  %s encoded, %s per image; %s\n", sp->name,
                   (long long)sp->count, total, mean_b, storage);
            printf("  %-6s %9s height %d..%d (mean %.1f), width %d..%d (mean %.1f)\n", "", "",
                   ss.hmin, ss.hmax, ss.hsum / (double)sp->count, ss.wmin, ss.wmax,
                   ss.wsum / (double)sp->count);
            continue;
        }
        describe_storage(sp->images_id, image_bytes, storage, sizeof storage);
        double raw_b = (double)sp->count * (double)image_bytes;
        double st_b = (double)H5Dget_storage_size(sp->images_id);
        format_bytes(raw_b, raw, sizeof raw);
        format_bytes(st_b, stored, sizeof stored);
        printf("  %-6s %9lld images  %s; %s -> %s", sp->name, (long long)sp->count, storage, raw,
               stored);
        if (st_b > 0) printf(" (%.1fx)", raw_b / st_b);
        printf("\n");
    }

    counts = pst_calloc((size_t)ds.nsplits * (size_t)ds.num_classes, sizeof *counts);
    for (int s = 0; s < ds.nsplits; s++)
        if (count_labels(&ds, &ds.splits[s], counts + (size_t)s * (size_t)ds.num_classes, &e) < 0) {
            pst_error("%s", e.msg);
            goto done;
        }
    int width = 5;
    for (int k = 0; k < ds.num_classes; k++) width = PST_MAX(width, (int)strlen(ds.class_names[k]));
    width = PST_MIN(width, 40);
    printf("classes:\n  %5s  %-*s", "id", width, "name");
    for (int s = 0; s < ds.nsplits; s++) printf(" %9s", ds.splits[s].name);
    printf("\n");
    for (int k = 0; k < ds.num_classes; k++) {
        printf("  %5d  %-*s", k, width, ds.class_names[k]);
        for (int s = 0; s < ds.nsplits; s++)
            printf(" %9lld", (long long)counts[(size_t)s * (size_t)ds.num_classes + (size_t)k]);
        printf("\n");
    }
    rc = 0;
done:
    free(counts);
    h5ds_close(&ds);
    return rc;
}

int prep_cmd_info(int argc, char **argv)
{
    int rc = prep_one_file_args(argc, argv, usage);
    if (rc >= 0) return rc;
    return run_info(argv[1]);
}
