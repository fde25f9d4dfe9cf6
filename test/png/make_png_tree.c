/*
 * make_png_tree.c - writes Fashion-MNIST as an ImageNet-style PNG tree,
 * OUT/<class name>/<index>.png, for benchmarks of `pstrain-prep png` (the C
 * twin of the peers' make_png_tree.py; not a test).
 *
 *   make_png_tree OUT [--split train|test] [--limit N] [--rgb] [--data DIR]
 *
 * Default: 8-bit gray 28x28 PNGs, exactly the idx pixels. --rgb: RGB PNGs
 * upscaled to 32x32 bilinearly (gray replicated into R=G=B). <index> is the
 * image's position in the idx file, zero-padded to 5 digits; class
 * directories are the class names with '/' replaced by '_'. zlib level 6.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data-tools/pngio.h"
#include "data-tools/resize.h"
#include "pstrain/common.h"

static const char *const class_dirs[10] = {"T-shirt_top", "Trouser",   "Pullover", "Dress",
                                           "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                           "Bag",         "Ankle boot"};

/* Reads a gzipped idx file of unsigned bytes: dims and data (owned). */
static uint8_t *read_idx(const char *path, int *ndim, uint32_t dims[3], size_t *n)
{
    gzFile f = gzopen(path, "rb");
    if (!f) pst_die("%s: cannot open: %s", path, strerror(errno));
    uint8_t hdr[16];
    if (gzread(f, hdr, 4) != 4 || hdr[0] || hdr[1] || hdr[2] != 0x08 || hdr[3] < 1 || hdr[3] > 3)
        pst_die("%s: not an unsigned-byte idx file of rank 1-3", path);
    *ndim = hdr[3];
    *n = 1;
    for (int i = 0; i < *ndim; i++) {
        uint8_t d[4];
        if (gzread(f, d, 4) != 4) pst_die("%s: truncated header", path);
        dims[i] = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
        *n *= dims[i];
    }
    uint8_t *buf = pst_malloc(*n);
    if (gzread(f, buf, (unsigned)*n) != (int)*n) pst_die("%s: truncated data", path);
    gzclose(f);
    return buf;
}

static void mkdir_p(const char *p)
{
    if (mkdir(p, 0777) != 0 && errno != EEXIST) pst_die("%s: mkdir: %s", p, strerror(errno));
}

int main(int argc, char **argv)
{
    pst_set_progname("make_png_tree");
    const char *out = NULL, *split = "train", *data = "/usr/share/datasets/fashion-mnist";
    int64_t limit = 0;
    int rgb = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rgb"))
            rgb = 1;
        else if (!strcmp(argv[i], "--split") && i + 1 < argc)
            split = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--limit") && i + 1 < argc) {
            if (pst_parse_i64(argv[++i], &limit) < 0 || limit < 0)
                pst_die("--limit '%s', expected N >= 0", argv[i]);
        } else if (argv[i][0] != '-' && !out)
            out = argv[i];
        else
            pst_die("usage: make_png_tree OUT [--split train|test] [--limit N] [--rgb] "
                    "[--data DIR]");
    }
    if (!out) pst_die("usage: make_png_tree OUT [--split train|test] [--limit N] [--rgb]");
    const char *pre = !strcmp(split, "test") ? "t10k" : "train";
    char path[4096];
    int nd;
    uint32_t xd[3], yd[3];
    size_t nx, ny;
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", data, pre);
    uint8_t *x = read_idx(path, &nd, xd, &nx);
    if (nd != 3) pst_die("%s: rank %d, expected 3", path, nd);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", data, pre);
    uint8_t *y = read_idx(path, &nd, yd, &ny);
    if (nd != 1 || yd[0] != xd[0]) pst_die("%s: labels do not match the images", path);
    int64_t n = limit > 0 ? PST_MIN(limit, (int64_t)xd[0]) : (int64_t)xd[0];
    int h = (int)xd[1], w = (int)xd[2];
    mkdir_p(out);
    for (int k = 0; k < 10; k++) {
        snprintf(path, sizeof path, "%s/%s", out, class_dirs[k]);
        mkdir_p(path);
    }
    uint8_t rgb_in[28 * 28 * 3], rgb_out[32 * 32 * 3];
    if (rgb && (h != 28 || w != 28)) pst_die("--rgb expects 28x28 images");
    double t0 = pst_now();
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *img = x + (size_t)i * (size_t)h * (size_t)w;
        if (y[i] > 9) pst_die("label %d of image %lld, expected 0-9", y[i], (long long)i);
        snprintf(path, sizeof path, "%s/%s/%05lld.png", out, class_dirs[y[i]], (long long)i);
        pst_err e;
        int rc;
        if (rgb) {
            for (int p = 0; p < h * w; p++)
                rgb_in[3 * p] = rgb_in[3 * p + 1] = rgb_in[3 * p + 2] = img[p];
            resize_u8(rgb_in, h, w, 3, rgb_out, 32, 32);
            rc = pngio_write(path, rgb_out, 32, 32, 3, 6, &e);
        } else {
            rc = pngio_write(path, img, h, w, 1, 6, &e);
        }
        if (rc < 0) pst_die("%s", e.msg);
    }
    fprintf(stderr, "wrote %lld %s PNGs to %s in %.2f s\n", (long long)n,
            rgb ? "RGB 32x32" : "gray 28x28", out, pst_now() - t0);
    free(x);
    free(y);
    return 0;
}
