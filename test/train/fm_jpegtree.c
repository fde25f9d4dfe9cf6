/*
 * fm_jpegtree.c - Fashion-MNIST's idx files written as an ImageNet-style
 * JPEG tree, for the test that trains on it (test_fm_jpeg.sh):
 *
 *   fm_jpegtree IDX_DIR OUT_DIR [QUALITY]
 *
 * writes OUT_DIR/train/<k>/<i>.jpg and OUT_DIR/test/<k>/<i>.jpg: image i
 * (5-digit, so that the sorted file names keep the idx order within a class)
 * of class k (folder "0".."9", so that the sorted folder names are the idx
 * labels), 28x28 grayscale baseline JPEG from jpg_encode at QUALITY (default
 * 95). IDX_DIR holds the four gzip'ed idx files of Fashion-MNIST. Exit 0, or
 * 1 with a message naming the file.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "pstrain/jpeg.h"

/* The whole of a gzip'ed idx file: magic 0x0000080D (D = dimensions), the
 * sizes, then the bytes. Returns the payload (malloc'd), n = its items
 * (the first size), item = the bytes of one item. */
static uint8_t *read_idx(const char *path, int dims, int64_t *n, int64_t *item)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fm_jpegtree: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    uint8_t hdr[16];
    const int hlen = 4 + 4 * dims;
    uint8_t *buf = NULL;
    if (gzread(f, hdr, (unsigned)hlen) != hlen || hdr[0] || hdr[1] || hdr[2] != 8 ||
        hdr[3] != dims) {
        fprintf(stderr, "fm_jpegtree: %s: not an idx file of %d dimensions\n", path, dims);
        goto out;
    }
    *item = 1;
    for (int d = 0; d < dims; d++) {
        const uint8_t *p = hdr + 4 + 4 * d;
        int64_t v = (int64_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
        if (d == 0)
            *n = v;
        else
            *item *= v;
    }
    const size_t bytes = (size_t)(*n * *item);
    buf = malloc(bytes ? bytes : 1);
    if (!buf || gzread(f, buf, (unsigned)bytes) != (int)bytes) {
        fprintf(stderr, "fm_jpegtree: %s: truncated (%zu bytes expected)\n", path, bytes);
        free(buf);
        buf = NULL;
    }
out:
    gzclose(f);
    return buf;
}

static int mkdir_ok(const char *path)
{
    if (mkdir(path, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "fm_jpegtree: %s: cannot create: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int write_split(const char *idx_dir, const char *prefix, const char *out, const char *split,
                       int quality)
{
    char p[4096];
    int64_t n, item, nl, one;
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte.gz", idx_dir, prefix);
    uint8_t *img = read_idx(p, 3, &n, &item);
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte.gz", idx_dir, prefix);
    uint8_t *lab = img ? read_idx(p, 1, &nl, &one) : NULL;
    int rc = -1;
    if (!lab) goto out;
    if (nl != n || item != 28 * 28) {
        fprintf(stderr, "fm_jpegtree: %s: %lld labels for %lld images of %lld bytes\n", p,
                (long long)nl, (long long)n, (long long)item);
        goto out;
    }
    snprintf(p, sizeof p, "%s/%s", out, split);
    if (mkdir_ok(p) < 0) goto out;
    for (int k = 0; k < 10; k++) {
        snprintf(p, sizeof p, "%s/%s/%d", out, split, k);
        if (mkdir_ok(p) < 0) goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        if (lab[i] > 9) {
            fprintf(stderr, "fm_jpegtree: %s labels: label %d of image %lld\n", prefix, lab[i],
                    (long long)i);
            goto out;
        }
        uint8_t *jpg = NULL;
        size_t len = 0;
        pst_err e = {{0}};
        if (jpg_encode(img + i * item, 28, 28, 1, quality, &jpg, &len, &e) < 0) {
            fprintf(stderr, "fm_jpegtree: image %lld: %s\n", (long long)i, e.msg);
            goto out;
        }
        snprintf(p, sizeof p, "%s/%s/%d/%05lld.jpg", out, split, lab[i], (long long)i);
        FILE *f = fopen(p, "wb");
        bool ok = f && fwrite(jpg, 1, len, f) == len;
        if (f && fclose(f) != 0) ok = false;
        free(jpg);
        if (!ok) {
            fprintf(stderr, "fm_jpegtree: %s: cannot write: %s\n", p, strerror(errno));
            goto out;
        }
    }
    rc = 0;
out:
    free(img);
    free(lab);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: fm_jpegtree IDX_DIR OUT_DIR [QUALITY]\n");
        return 1;
    }
    int quality = argc == 4 ? atoi(argv[3]) : 95;
    if (quality < 1 || quality > 100) {
        fprintf(stderr, "fm_jpegtree: QUALITY: expected 1..100, got '%s'\n", argv[3]);
        return 1;
    }
    if (mkdir_ok(argv[2]) < 0) return 1;
    if (write_split(argv[1], "train", argv[2], "train", quality) < 0 ||
        write_split(argv[1], "t10k", argv[2], "test", quality) < 0)
        return 1;
    return 0;
}
