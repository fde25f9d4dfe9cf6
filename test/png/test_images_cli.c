/* test_images_cli.c - `pstrain-prep images` end to end on trees written here
 * (JPEGs by jpg_encode and by libjpeg directly for CMYK, PNGs by libpng):
 * the decoder chosen by content (a PNG named .JPEG, a CMYK JPEG), pixels
 * equal to jpg_decode/pngio + resize_u8, encoded storage (the file's own
 * bytes, --max-side re-encoding, PNG re-encoded), --synsets order and names,
 * both --val-dir layouts (class subfolders; a flat folder with an index file
 * or a CSV), every bad label input (one line naming the file and line, exit
 * 1, no output), usage errors (exit 2), broken files (skipped and listed,
 * --strict, --allow-truncated). */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hdf5.h>
#include <jpeglib.h> /* after stdio.h: it uses FILE and size_t */

#include "check.h"
#include "data-tools/pngio.h"
#include "data-tools/resize.h"
#include "png/pngtest.h"
#include "prep/prep_run.h"
#include "pstrain/h5ds.h"
#include "pstrain/jpeg.h"

static prep_out g_r;

/* Runs pstrain-prep with the NULL-terminated args into g_r; returns the
 * exit status. */
static int prep(const char *first, ...)
{
    const char *args[64] = {first};
    int n = 1;
    va_list ap;
    va_start(ap, first);
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 63) args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    prep_run(&g_r, args);
    return g_r.status;
}

/* A path under the scratch directory (a ring of buffers, like scratch_path:
 * each result stays valid for 255 more calls; keep longer-lived ones in
 * arrays). */
static const char *sp(const char *fmt, ...)
{
    static char bufs[256][512];
    static int next;
    char rel[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    char *b = bufs[next++ % 256];
    snprintf(b, 512, "%s/%s", g_scratch, rel);
    return b;
}

static void save(const char *path, const void *p, size_t n)
{
    CHECK(pt_save(path, p, n) == 0, "cannot write %s", path);
}

static void save_text(const char *path, const char *text)
{
    save(path, text, strlen(text));
}

static uint8_t *load(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = malloc(1 << 20);
    *n = f ? fread(b, 1, 1 << 20, f) : 0;
    CHECK(f && *n < (1 << 20), "cannot read %s", path);
    if (f) fclose(f);
    return b;
}

/* A photo-like test image: gradients plus a little noise from `seed`. */
static uint8_t *picture(int w, int h, int c, unsigned seed)
{
    uint8_t *px = malloc((size_t)w * h * c);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                int v = (x * 255 / w) * (k + 1) / 3 + (y * 255 / h) * (3 - k) / 3 +
                        (int)(pst_splitmix64(&s) % 24) + (int)(seed * 13 % 40);
                px[((size_t)y * w + x) * c + k] = (uint8_t)(v > 255 ? 255 : v);
            }
    return px;
}

static void write_jpeg(const char *path, int w, int h, int c, unsigned seed)
{
    uint8_t *px = picture(w, h, c, seed), *out;
    size_t n;
    pst_err e;
    CHECK(jpg_encode(px, w, h, c, 90, &out, &n, &e) == 0, "jpg_encode: %s", e.msg);
    save(path, out, n);
    free(out);
    free(px);
}

/* An Adobe CMYK JPEG written with libjpeg itself (jpg_encode writes only
 * gray and RGB). */
static void write_cmyk_jpeg(const char *path, int w, int h)
{
    uint8_t *px = picture(w, h, 4, 77);
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    unsigned char *mem = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&ci, &mem, &n);
    ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h;
    ci.input_components = 4, ci.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 90, TRUE);
    jpeg_start_compress(&ci, TRUE);
    for (int y = 0; y < h; y++) {
        JSAMPROW row = px + (size_t)y * w * 4;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    save(path, mem, n);
    free(mem);
    free(px);
}

static void write_png(const char *path, int w, int h, int c, unsigned seed)
{
    uint8_t *px = picture(w, h, c, seed);
    pt_buf b = pt_make8(w, h, c, px);
    save(path, b.p, b.n);
    free(b.p);
    free(px);
}

/* A gray 8x6 PNG whose pixel 0 is `id` (the label tests identify images by it). */
static void write_id_png(const char *path, int id)
{
    uint8_t px[8 * 6];
    for (int i = 0; i < 8 * 6; i++) px[i] = (uint8_t)(i * 5);
    px[0] = (uint8_t)id;
    pt_buf b = pt_make8(6, 8, 1, px);
    save(path, b.p, b.n);
    free(b.p);
}

/* A failed run: exit 1, stderr ends with one error line (warnings may come
 * before it) that has every `want` part, and OUT was not written. */
static void check_error(int rc, const char *out, const char *what, int nwant, ...)
{
    CHECK(rc == 1, "%s: exit %d, want 1\n%s%s", what, rc, g_r.out, g_r.err);
    size_t len = strlen(g_r.err);
    const char *last = g_r.err;
    for (size_t i = 0; i + 1 < len; i++)
        if (g_r.err[i] == '\n') last = g_r.err + i + 1;
    CHECK(len && g_r.err[len - 1] == '\n' && !strncmp(last, "pstrain-prep images: ", 21) &&
              strncmp(last + 21, "warning", 7),
          "%s: stderr does not end with one error line:\n%s", what, g_r.err);
    va_list ap;
    va_start(ap, nwant);
    for (int i = 0; i < nwant; i++) {
        const char *w = va_arg(ap, const char *);
        CHECK(strstr(last, w), "%s: '%s' missing from the error line:\n%s", what, w, last);
    }
    va_end(ap);
    CHECK(!file_exists(out), "%s: %s written", what, out);
}

/* ---- labels: --synsets, --val-dir, --val-labels ----------------------------------- */

/* train: n01, n02, n03 with two images each (ids 10k + j); synsets order
 * n03 n01 n02 n04. */
static const char *const folders[3] = {"n01", "n02", "n03"};
static const char *const syn_order[4] = {"n03", "n01", "n02", "n04"};

static int syn_label(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(syn_order[i], name)) return i;
    return -1;
}

/* Reads a pixels split: ids (pixel 0) and labels; returns the count. */
static int64_t read_ids(const char *path, const char *split, int *ids, int32_t *labels, h5ds *ds)
{
    pst_err e;
    if (h5ds_open(ds, path, &e) < 0) {
        CHECK(0, "open %s: %s", path, e.msg);
        return -1;
    }
    const h5ds_split *s = h5ds_find_split(ds, split);
    if (!s) return 0;
    size_t ib = (size_t)ds->height * ds->width * ds->channels;
    uint8_t *buf = malloc(ib * (size_t)s->count);
    CHECK(h5ds_read(ds, split, 0, s->count, buf, labels, &e) == 0, "read: %s", e.msg);
    for (int64_t i = 0; i < s->count; i++) ids[i] = buf[i * ib];
    free(buf);
    return s->count;
}

/* /class_descriptions[i] (fixed-length strings, as /classes), or "" */
static void read_description(const char *path, int i, char *out, size_t n)
{
    out[0] = 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, "class_descriptions", H5P_DEFAULT);
    hid_t t = d < 0 ? -1 : H5Dget_type(d);
    if (t >= 0) {
        size_t len = H5Tget_size(t);
        char *buf = calloc(16, len);
        if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0)
            snprintf(out, n, "%.*s", (int)len, buf + (size_t)i * len);
        free(buf);
        H5Tclose(t);
    }
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
}

/* flat val: val_01..val_06 (ids 201..206) with these synsets */
static const char *const flat_truth[6] = {"n01", "n03", "n02", "n01", "n04", "n03"};

static void test_labels(void)
{
    mkdir(sp("lt"), 0777);
    for (int k = 0; k < 3; k++) {
        mkdir(sp("lt/%s", folders[k]), 0777);
        for (int j = 0; j < 2; j++) write_id_png(sp("lt/%s/%d.png", folders[k], j), 10 * k + j);
    }
    save_text(sp("synsets.txt"), "n03 third, the last folder\nn01 first\r\nn02 second\nn04 "
                                 "fourth, without a folder\n\n");
    char out[512], syn[512];
    snprintf(out, sizeof out, "%s", sp("lt.h5"));
    snprintf(syn, sizeof syn, "%s", sp("synsets.txt"));

    /* --synsets: its order and its ids; the words in /class_descriptions */
    int rc = prep("images", sp("lt"), "--synsets", sp("synsets.txt"), "-o", out, NULL);
    CHECK(rc == 0, "--synsets: exit %d\n%s%s", rc, g_r.out, g_r.err);
    CHECK(strstr(g_r.err, "1 of the 4 synsets") && strstr(g_r.err, "have no folder"),
          "synset without a folder: warning\n%s", g_r.err);
    h5ds ds;
    int ids[64];
    int32_t labels[64];
    int64_t n = read_ids(out, "train", ids, labels, &ds);
    CHECK(ds.num_classes == 4, "num_classes %d", ds.num_classes);
    for (int i = 0; i < 4 && ds.num_classes == 4; i++)
        CHECK(!strcmp(ds.class_names[i], syn_order[i]), "class %d '%s', want '%s'", i,
              ds.class_names[i], syn_order[i]);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += labels[i] != syn_label(folders[ids[i] / 10]);
    CHECK(n == 6 && bad == 0, "train labels by synset order: %lld images, %d wrong", (long long)n,
          bad);
    h5ds_close(&ds);
    char words[128];
    read_description(out, 0, words, sizeof words);
    CHECK(!strcmp(words, "third, the last folder"), "/class_descriptions[0] '%s'", words);
    read_description(out, 1, words, sizeof words);
    CHECK(!strcmp(words, "first"), "/class_descriptions[1] '%s' (CRLF line)", words);
    unlink(out);

    /* without --synsets: sorted folder names */
    rc = prep("images", sp("lt"), "-o", out, NULL);
    CHECK(rc == 0, "folders: %s", g_r.err);
    n = read_ids(out, "train", ids, labels, &ds);
    CHECK(ds.num_classes == 3 && !strcmp(ds.class_names[0], "n01") &&
              !strcmp(ds.class_names[2], "n03"),
          "sorted folder classes");
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += labels[i] != ids[i] / 10;
    CHECK(n == 6 && bad == 0, "train labels by folder: %d wrong", bad);
    h5ds_close(&ds);
    unlink(out);

    /* val as class subfolders */
    mkdir(sp("vsub"), 0777);
    mkdir(sp("vsub/n03"), 0777);
    mkdir(sp("vsub/n02"), 0777);
    write_id_png(sp("vsub/n03/x.png"), 100);
    write_id_png(sp("vsub/n02/y.png"), 101);
    rc = prep("images", sp("lt"), "--synsets", sp("synsets.txt"), "--val-dir", sp("vsub"), "-o",
              out, NULL);
    CHECK(rc == 0 && strstr(g_r.out, "train 6, val 2, test 0"), "val subfolders: %s%s", g_r.out,
          g_r.err);
    n = read_ids(out, "val", ids, labels, &ds);
    CHECK(n == 2 && ids[0] == 101 && labels[0] == 2 && ids[1] == 100 && labels[1] == 0,
          "val subfolder labels (n02 = 2, n03 = 0)");
    h5ds_close(&ds);
    unlink(out);

    /* flat val folder */
    mkdir(sp("vflat"), 0777);
    for (int i = 0; i < 6; i++) write_id_png(sp("vflat/val_%02d.png", i + 1), 201 + i);
    save_text(sp("vflat/README"), "not an image\n");
    /* index file: 1-based lines of the synsets file, sorted file-name order */
    char idx[64] = "";
    for (int i = 0; i < 6; i++)
        snprintf(idx + strlen(idx), sizeof idx - strlen(idx), "%d\n", syn_label(flat_truth[i]) + 1);
    save_text(sp("idx.txt"), idx);
    /* the CSV, rows in another order, CRLF, with boxes after the synset */
    save_text(sp("sol.csv"), "ImageId,PredictionString\r\n"
                             "val_03,n02 1 2 3 4\r\nval_01,n01 5 6 7 8 n01 1 1 2 2\r\n"
                             "val_06,n03 0 0 1 1\r\nval_02,n03 1 1 1 1\r\n"
                             "val_05,n04 1 1 1 1\r\nval_04,n01 1 1 1 1\r\n");
    for (int v = 0; v < 2; v++) {
        const char *lab = v ? sp("sol.csv") : sp("idx.txt");
        rc = prep("images", sp("lt"), "--synsets", sp("synsets.txt"), "--val-dir", sp("vflat"),
                  "--val-labels", lab, "-o", out, NULL);
        CHECK(rc == 0 && strstr(g_r.out, "train 6, val 6, test 0"), "flat val %s: %s%s", lab,
              g_r.out, g_r.err);
        n = read_ids(out, "val", ids, labels, &ds);
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += ids[i] != 201 + i || labels[i] != syn_label(flat_truth[i]);
        CHECK(n == 6 && bad == 0, "flat val labels from %s: %d wrong", lab, bad);
        h5ds_close(&ds);
        unlink(out);
    }
    /* a CSV needs no --synsets: the synsets are the folder names then */
    save_text(sp("sol3.csv"), "ImageId,PredictionString\nval_01,n01\nval_02,n03\nval_03,n02\n"
                              "val_04,n01\nval_05,n02\nval_06,n03\n");
    rc = prep("images", sp("lt"), "--val-dir", sp("vflat"), "--val-labels", sp("sol3.csv"), "-o",
              out, NULL);
    n = read_ids(out, "val", ids, labels, &ds);
    CHECK(rc == 0 && n == 6 && labels[1] == 2 && labels[4] == 1, "CSV against folder classes: %s",
          g_r.err);
    h5ds_close(&ds);
    unlink(out);

    /* every bad label input: one line naming file and line, exit 1, no output */
    struct {
        const char *name, *text, *want;
    } bad_labels[] = {
        {"short.txt", "2\n1\n3\n2\n4\n", "5 labels for 6 image files"},
        {"long.txt", "2\n1\n3\n2\n4\n1\n3\n", "line 7: a label beyond the 6 image files"},
        {"range.txt", "2\n9\n3\n2\n4\n1\n", "line 2: '9', expected a class index 1-4"},
        {"zero.txt", "2\n1\n0\n2\n4\n1\n", "line 3: '0', expected a class index 1-4"},
        {"text.txt", "2\n1\nthree\n2\n4\n1\n", "line 3: 'three', expected a class index"},
        {"gap.txt", "2\n\n1\n3\n2\n4\n1\n", "line 2: empty, expected a class index"},
        {"unknown.csv", "ImageId,PredictionString\nval_01,n01\nval_02,n99 1 1 2 2\n",
         "line 3: synset 'n99' of ImageId 'val_02' is not one of the synsets of"},
        {"nofile.csv",
         "ImageId,PredictionString\nval_01,n01\nval_02,n03\nval_03,n02\nval_04,n01\nval_05,n04\n"
         "val_06,n03\nval_07,n01\n",
         "line 8: ImageId 'val_07' has no image file in"},
        {"norow.csv",
         "ImageId,PredictionString\nval_01,n01\nval_02,n03\nval_03,n02\nval_05,n04\nval_06,n03\n",
         "val_04.png: no row for ImageId 'val_04' in"},
        {"dup.csv",
         "ImageId,PredictionString\nval_01,n01\nval_02,n03\nval_03,n02\nval_04,n01\nval_05,n04\n"
         "val_06,n03\nval_02,n03\n",
         "line 8: ImageId 'val_02' again (first on line 3)"},
        {"nopred.csv", "ImageId,PredictionString\nval_01,\n",
         "line 2: ImageId 'val_01' has an empty PredictionString"},
        {"header.csv", "ImageId,Label\nval_01,n01\n",
         "line 1: 'ImageId,Label', expected the header ImageId,PredictionString"},
    };
    for (size_t i = 0; i < PST_ARRAY_LEN(bad_labels); i++) {
        const char *lab = sp("%s", bad_labels[i].name);
        save_text(lab, bad_labels[i].text);
        rc = prep("images", sp("lt"), "--synsets", syn, "--val-dir", sp("vflat"), "--val-labels",
                  lab, "-o", out, NULL);
        check_error(rc, out, bad_labels[i].name, 2, lab, bad_labels[i].want);
    }
    /* class indices need the synset list they count */
    rc = prep("images", sp("lt"), "--val-dir", sp("vflat"), "--val-labels", sp("idx.txt"), "-o",
              out, NULL);
    check_error(rc, out, "indices without --synsets", 2, sp("idx.txt"),
                "class indices need --synsets FILE");
    /* a flat val folder without labels */
    rc = prep("images", sp("lt"), "--val-dir", sp("vflat"), "-o", out, NULL);
    check_error(rc, out, "flat without --val-labels", 2, sp("vflat"),
                "no class subfolders but 6 image files; a flat validation folder needs "
                "--val-labels FILE");
    /* a val class folder that is no class */
    mkdir(sp("vsub/n77"), 0777);
    rc = prep("images", sp("lt"), "--synsets", syn, "--val-dir", sp("vsub"), "-o", out, NULL);
    check_error(rc, out, "unknown val class", 2, sp("vsub/n77"),
                "class 'n77' of the val tree is not one of the synsets of");
    /* synsets: a folder that is not one, a synset twice, a blank line inside */
    save_text(sp("syn2.txt"), "n01 first\nn02 second\n");
    rc = prep("images", sp("lt"), "--synsets", sp("syn2.txt"), "-o", out, NULL);
    check_error(rc, out, "folder not a synset", 2, sp("lt/n03"),
                "class folder 'n03' is not a synset of");
    save_text(sp("syn3.txt"), "n03 a\nn01 b\nn02 c\nn01 again\n");
    rc = prep("images", sp("lt"), "--synsets", sp("syn3.txt"), "-o", out, NULL);
    check_error(rc, out, "synset twice", 2, sp("syn3.txt"),
                "line 4: synset 'n01' again (first on line 2)");
    save_text(sp("syn4.txt"), "n03 a\n\nn01 b\nn02 c\n");
    rc = prep("images", sp("lt"), "--synsets", sp("syn4.txt"), "-o", out, NULL);
    check_error(rc, out, "blank synset line", 2, sp("syn4.txt"), "line 2: empty");

    /* usage errors: exit 2 */
    struct {
        const char *a[6], *want;
    } usage[] = {
        {{"--val-labels", "x.txt"}, "--val-labels FILE labels the flat folder of --val-dir"},
        {{"--val-dir", "v", "--val-fraction", "0.1"}, "--val-fraction"},
        {{"--max-side", "100"}, "--max-side is for --store encoded"},
        {{"--quality", "80"}, "--quality is for --store encoded"},
        {{"--store", "encoded", "--size", "8x8"}, "--size is for --store pixels"},
        {{"--store", "jpeg"}, "--store 'jpeg', expected pixels or encoded"},
        {{"--store", "encoded", "--quality", "101"}, "--quality '101', expected 1-100"},
        {{"--store", "encoded", "--max-side", "0"}, "--max-side '0'"},
    };
    for (size_t i = 0; i < PST_ARRAY_LEN(usage); i++) {
        const char *args[16] = {"images", sp("lt")};
        int k = 2;
        for (int j = 0; j < 6 && usage[i].a[j]; j++) args[k++] = usage[i].a[j];
        args[k++] = "-o", args[k++] = out, args[k] = NULL;
        prep_run(&g_r, args);
        CHECK(g_r.status == 2 && strstr(g_r.err, usage[i].want), "usage %zu: exit %d\n%s", i,
              g_r.status, g_r.err);
        CHECK(!file_exists(out), "usage %zu: output written", i);
    }
}

/* ---- JPEG and PNG by content, pixels and encoded ------------------------------------ */

/* The tree: a/ (a0.JPEG RGB 24x32, a1.jpg gray, a2.JPEG a PNG, a3.Jpeg CMYK),
 * b/ (b0.jpeg RGB 40x30, b1.png RGB 24x32); HxW. */
static const char *const jt_files[6] = {"a/a0.JPEG", "a/a1.jpg",  "a/a2.JPEG",
                                        "a/a3.Jpeg", "b/b0.jpeg", "b/b1.png"};
static const int jt_h[6] = {24, 24, 24, 24, 40, 24}, jt_w[6] = {32, 32, 32, 32, 30, 32};
static const bool jt_png[6] = {false, false, true, false, false, true};

static void make_jpeg_tree(const char *root)
{
    mkdir(sp("%s", root), 0777);
    mkdir(sp("%s/a", root), 0777);
    mkdir(sp("%s/b", root), 0777);
    write_jpeg(sp("%s/%s", root, jt_files[0]), 32, 24, 3, 1);
    write_jpeg(sp("%s/%s", root, jt_files[1]), 32, 24, 1, 2);
    write_png(sp("%s/%s", root, jt_files[2]), 32, 24, 3, 3);
    write_cmyk_jpeg(sp("%s/%s", root, jt_files[3]), 32, 24);
    write_jpeg(sp("%s/%s", root, jt_files[4]), 30, 40, 3, 5);
    write_png(sp("%s/%s", root, jt_files[5]), 32, 24, 3, 6);
}

/* The reference pixels of a file: jpg_decode or pngio_decode by content,
 * then resize_u8 to oh x ow (3 channels). */
static uint8_t *reference(const char *path, int oh, int ow)
{
    size_t n;
    uint8_t *buf = load(path, &n), *px = NULL;
    int w = 0, h = 0;
    pst_err e;
    if (!buf) return NULL;
    if (img_sniff(buf, n) == IMG_JPEG) {
        CHECK(jpg_decode(buf, n, 3, 0, &px, &w, &h, &e) == 0, "jpg_decode %s: %s", path, e.msg);
    } else {
        pngio_opts po = {.channels = 3};
        pngio_image im;
        CHECK(pngio_decode(buf, n, &po, &im, &e) == 0, "pngio %s: %s", path, e.msg);
        px = im.pixels, w = im.width, h = im.height;
    }
    free(buf);
    uint8_t *out = malloc((size_t)oh * ow * 3);
    if (px) resize_u8(px, h, w, 3, out, oh, ow);
    free(px);
    return out;
}

static void test_pixels(void)
{
    const char *out = sp("jt-pixels.h5");
    int rc = prep("images", sp("jt"), "--size", "20x16", "--channels", "3", "--threads", "2", "-o",
                  out, NULL);
    CHECK(rc == 0 && strstr(g_r.out, "train 6,") && strstr(g_r.out, "skipped 0"),
          "pixels: exit %d\n%s%s", rc, g_r.out, g_r.err);
    h5ds ds;
    pst_err e;
    if (h5ds_open(&ds, out, &e) < 0) {
        CHECK(0, "open: %s", e.msg);
        return;
    }
    CHECK(ds.storage == H5DS_STORE_PIXELS && ds.height == 20 && ds.width == 16 && ds.channels == 3,
          "pixels set %dx%dx%d", ds.height, ds.width, ds.channels);
    uint8_t imgs[6 * 20 * 16 * 3];
    int32_t labels[6];
    CHECK(h5ds_read(&ds, "train", 0, 6, imgs, labels, &e) == 0, "read: %s", e.msg);
    for (int i = 0; i < 6; i++) {
        uint8_t *want = reference(sp("jt/%s", jt_files[i]), 20, 16);
        int diff = 0;
        for (int j = 0; want && j < 20 * 16 * 3; j++) diff += imgs[i * 20 * 16 * 3 + j] != want[j];
        CHECK(diff == 0, "%s: %d bytes differ from jpg_decode/pngio + resize_u8", jt_files[i],
              diff);
        CHECK(labels[i] == (i >= 4), "%s: label %d", jt_files[i], labels[i]);
        free(want);
    }
    h5ds_close(&ds);
}

/* Reads every image of an encoded train split: the bytes of image i are
 * bytes[off[i], off[i+1]). */
static int64_t read_encoded(const char *path, int64_t *off, uint8_t **bytes, int32_t *hs,
                            int32_t *ws, h5ds *ds)
{
    pst_err e;
    if (h5ds_open(ds, path, &e) < 0) {
        CHECK(0, "open %s: %s", path, e.msg);
        return -1;
    }
    CHECK(ds->storage == H5DS_STORE_ENCODED, "storage %d", ds->storage);
    const h5ds_split *s = h5ds_find_split(ds, "train");
    if (!s || ds->storage != H5DS_STORE_ENCODED) return -1;
    *bytes = malloc((size_t)s->encoded_bytes + 1);
    CHECK(h5ds_read_encoded(ds, "train", 0, s->count, off, *bytes, (size_t)s->encoded_bytes, NULL,
                            hs, ws, &e) == 0,
          "read_encoded: %s", e.msg);
    return s->count;
}

static void test_encoded(void)
{
    const char *out = sp("jt-enc.h5");
    int rc = prep("images", sp("jt"), "--store", "encoded", "-o", out, NULL);
    CHECK(rc == 0 && strstr(g_r.out, "encoded JPEG, 3 channels") &&
              strstr(g_r.out, "(2 re-encoded)"),
          "encoded: exit %d\n%s%s", rc, g_r.out, g_r.err);
    h5ds ds;
    int64_t off[8];
    int32_t hs[8], ws[8];
    uint8_t *bytes = NULL;
    int64_t n = read_encoded(out, off, &bytes, hs, ws, &ds);
    CHECK(n == 6, "6 images, got %lld", (long long)n);
    for (int i = 0; i < 6 && n == 6; i++) {
        size_t fn;
        uint8_t *file = load(sp("jt/%s", jt_files[i]), &fn);
        size_t sn = (size_t)(off[i + 1] - off[i]);
        const uint8_t *st = bytes + off[i];
        CHECK(hs[i] == jt_h[i] && ws[i] == jt_w[i], "%s: %dx%d stored, want %dx%d", jt_files[i],
              hs[i], ws[i], jt_h[i], jt_w[i]);
        if (!jt_png[i]) {
            CHECK(file && sn == fn && !memcmp(st, file, fn),
                  "%s: stored bytes are not the file's (%zu vs %zu)", jt_files[i], sn, fn);
        } else {
            /* a PNG (also the one named .JPEG) is re-encoded: a JPEG of its size,
             * close to its pixels */
            uint8_t *px = NULL, *want = reference(sp("jt/%s", jt_files[i]), jt_h[i], jt_w[i]);
            int w = 0, h = 0;
            pst_err e;
            CHECK(img_sniff(st, sn) == IMG_JPEG && jpg_decode(st, sn, 3, 0, &px, &w, &h, &e) == 0,
                  "%s: stored bytes are no JPEG", jt_files[i]);
            double err = 0;
            for (int j = 0; px && want && j < h * w * 3; j++) err += abs(px[j] - want[j]);
            err /= (double)(h * w * 3);
            CHECK(px && w == jt_w[i] && h == jt_h[i] && err < 6,
                  "%s: re-encoded JPEG %dx%d, mean abs error %.2f", jt_files[i], h, w, err);
            free(px);
            free(want);
        }
        free(file);
    }
    CHECK(ds.mean[0] > 0.05 && ds.mean[0] < 0.95 && ds.std[0] > 0.01,
          "mean/std from the DCT-scaled decode: %g %g", ds.mean[0], ds.std[0]);
    free(bytes);
    h5ds_close(&ds);

    /* --max-side 16: the shorter side shrinks to 16, all re-encoded */
    const char *out2 = sp("jt-side.h5");
    rc = prep("images", sp("jt"), "--store", "encoded", "--max-side", "16", "--quality", "80", "-o",
              out2, NULL);
    CHECK(rc == 0 && strstr(g_r.out, "(6 re-encoded)"), "--max-side: %s%s", g_r.out, g_r.err);
    n = read_encoded(out2, off, &bytes, hs, ws, &ds);
    for (int i = 0; i < 6 && n == 6; i++) {
        /* 24x32 -> 16x21 (32*16/24 = 21.3), 40x30 -> 21x16 */
        int wh = jt_h[i] < jt_w[i] ? 16 : 21, ww = jt_h[i] < jt_w[i] ? 21 : 16;
        uint8_t *px = NULL;
        int w = 0, h = 0;
        pst_err e;
        size_t sn = (size_t)(off[i + 1] - off[i]);
        CHECK(jpg_decode(bytes + off[i], sn, 3, 0, &px, &w, &h, &e) == 0, "decode: %s", e.msg);
        CHECK(hs[i] == wh && ws[i] == ww && h == wh && w == ww,
              "%s --max-side 16: stored %dx%d, decodes %dx%d, want %dx%d", jt_files[i], hs[i],
              ws[i], h, w, wh, ww);
        free(px);
    }
    free(bytes);
    h5ds_close(&ds);
    /* a --max-side above every image re-encodes only the PNGs */
    rc = prep("images", sp("jt"), "--store", "encoded", "--max-side", "40", "--force", "-o", out2,
              NULL);
    CHECK(rc == 0 && strstr(g_r.out, "(2 re-encoded)"), "--max-side 40: %s%s", g_r.out, g_r.err);
    /* info names the storage */
    rc = prep("info", out, NULL);
    CHECK(rc == 0 && strstr(g_r.out, "encoded"), "info on encoded: %s%s", g_r.out, g_r.err);
}

/* ---- broken files ---------------------------------------------------------------- */

static void test_broken(void)
{
    make_jpeg_tree("bt");
    /* a large enough JPEG that half of it still has the whole header */
    write_jpeg(sp("bt/a/big.JPEG"), 96, 64, 3, 9);
    size_t n;
    uint8_t *big = load(sp("bt/a/big.JPEG"), &n);
    save(sp("bt/a/z0.JPEG"), "", 0);
    if (big) save(sp("bt/a/z1.JPEG"), big, n * 2 / 3);
    save_text(sp("bt/b/z2.jpg"), "hello, I am text\n");
    free(big);
    const char *out = sp("bt.h5");
    int rc = prep("images", sp("bt"), "--size", "16x16", "-o", out, NULL);
    CHECK(rc == 0 && strstr(g_r.out, "train 7,") && strstr(g_r.out, "skipped 3 unreadable"),
          "broken files skipped: exit %d\n%s%s", rc, g_r.out, g_r.err);
    static const char *const why[3][2] = {{"a/z0.JPEG", "empty file (0 bytes)"},
                                          {"a/z1.JPEG", "Premature end of JPEG file"},
                                          {"b/z2.jpg", "not a JPEG or PNG file"}};
    for (int i = 0; i < 3; i++) {
        char line[600];
        snprintf(line, sizeof line, "warning: %s: %s", sp("bt/%s", why[i][0]), why[i][1]);
        CHECK(strstr(g_r.err, line), "warning '%s' missing:\n%s", line, g_r.err);
        snprintf(line, sizeof line, "    %s: %s", sp("bt/%s", why[i][0]), why[i][1]);
        CHECK(strstr(g_r.out, line), "summary line '%s' missing:\n%s", line, g_r.out);
    }
    /* the same in encoded storage: every image is decoded at preparation */
    const char *oute = sp("bt-enc.h5");
    rc = prep("images", sp("bt"), "--store", "encoded", "-o", oute, NULL);
    CHECK(rc == 0 && strstr(g_r.out, "train 7,") && strstr(g_r.out, "skipped 3 unreadable") &&
              strstr(g_r.err, "z1.JPEG: Premature end"),
          "encoded, broken files: exit %d\n%s%s", rc, g_r.out, g_r.err);
    /* --strict: the first broken file is an error, no output */
    const char *outs = sp("bt-strict.h5");
    rc = prep("images", sp("bt"), "--size", "16x16", "--strict", "-o", outs, NULL);
    check_error(rc, outs, "--strict", 2, "z0.JPEG: empty file", "--strict");
    /* --allow-truncated: the truncated JPEG is decoded, with libjpeg's warning */
    rc = prep("images", sp("bt"), "--size", "16x16", "--allow-truncated", "-o", outs, NULL);
    CHECK(rc == 0 && strstr(g_r.out, "train 8,") && strstr(g_r.out, "skipped 2 unreadable") &&
              strstr(g_r.out, "decoded 1 truncated JPEG"),
          "--allow-truncated: exit %d\n%s%s", rc, g_r.out, g_r.err);
    CHECK(strstr(g_r.err, "z1.JPEG: Premature end of JPEG file (--allow-truncated"),
          "--allow-truncated warning:\n%s", g_r.err);
    int leftovers = scratch_count(".tmp.");
    CHECK(leftovers == 0, "%d temporary files left", leftovers);
}

int main(void)
{
    if (!getenv("PSTRAIN_PREP")) CHECK_SKIP("PSTRAIN_PREP not set (run through meson test)");
    scratch_dir();
    test_labels();
    make_jpeg_tree("jt");
    test_pixels();
    test_encoded();
    test_broken();
    if (check_failures_ == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_scratch);
        CHECK(system(cmd) == 0, "cleanup");
    } else {
        fprintf(stderr, "files kept in %s\n", g_scratch);
    }
    return check_exit();
}
