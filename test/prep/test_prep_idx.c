/*
 * test_prep_idx.c - `pstrain-prep idx`, `info` and `verify` on idx files
 * generated here: a good raw and a good gzipped pair convert pixel-exactly;
 * every corrupt input gives its documented error and a non-zero exit, never
 * a crash, and leaves no output or temporary file; --force; usage errors.
 */
#include <hdf5.h>
#include <zlib.h>

#include "check.h"
#include "prep_run.h"
#include "pstrain/h5ds.h"

enum { N = 50, H = 6, W = 5, NCLASS = 4 };

static uint8_t pixel(int i, int j)
{
    return (uint8_t)(i * 31 + j * 7 + 3);
}

static int label_of(int i)
{
    return (i * 5) % NCLASS;
}

/* Writes an idx file: magic 0 0 dtype ndim, big-endian dims, then data
 * (cut to `keep` bytes in all when keep >= 0). gz: gzip it. */
static void write_idx(const char *path, uint8_t dtype, int ndim, const uint32_t *dims,
                      const uint8_t *data, size_t ndata, long keep, bool gz)
{
    size_t n = 4 + 4 * (size_t)ndim + ndata;
    uint8_t *buf = malloc(n);
    buf[0] = buf[1] = 0;
    buf[2] = dtype;
    buf[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        buf[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        buf[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        buf[7 + 4 * i] = (uint8_t)dims[i];
    }
    memcpy(buf + 4 + 4 * ndim, data, ndata);
    if (keep >= 0 && (size_t)keep < n) n = (size_t)keep;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (n) gzwrite(f, buf, (unsigned)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, n, f);
        fclose(f);
    }
    free(buf);
}

static uint8_t g_images[N * H * W], g_labels[N];

static void make_images(const char *name, int n, long keep, bool gz)
{
    uint32_t dims[3] = {(uint32_t)n, H, W};
    write_idx(scratch_path(name), 0x08, 3, dims, g_images, (size_t)n * H * W, keep, gz);
}

static void make_labels(const char *name, int n, long keep, bool gz)
{
    uint32_t dims[1] = {(uint32_t)n};
    write_idx(scratch_path(name), 0x08, 1, dims, g_labels, (size_t)n, keep, gz);
}

/* Runs idx on the given train images/labels (scratch names) plus extra
 * arguments; expects a failure with `want` in stderr and nothing left. */
static void expect_failure(const char *what, const char *images, const char *labels,
                           const char *extra, const char *want)
{
    const char *out = scratch_path("bad.h5");
    const char *args[16] = {
        "idx", "--train-images", scratch_path(images), "--train-labels", scratch_path(labels), "-o",
        out};
    int n = 7;
    if (extra) {
        args[n++] = "--classes";
        args[n++] = extra;
    }
    args[n] = NULL;
    prep_out r;
    prep_run(&r, args);
    CHECK(r.status == 1, "%s: exit %d, expected 1; stderr: %s", what, r.status, r.err);
    CHECK(strstr(r.err, want) != NULL, "%s: expected '%s' in stderr: %s", what, want, r.err);
    CHECK(!strstr(r.err, "HDF5-DIAG"), "%s: HDF5's own error dump leaked: %s", what, r.err);
    CHECK(!file_exists(out), "%s: output file left behind", what);
    CHECK(scratch_count(".tmp.") == 0, "%s: temporary file left behind", what);
}

static void test_corrupt(void)
{
    make_images("img", N, -1, false);
    make_labels("lab", N, -1, false);
    /* bad magic: a PNG signature where the idx magic belongs */
    FILE *f = fopen(scratch_path("magic"), "wb");
    fwrite("\x89PNG\r\n\x1a\n0123456789abcdef", 1, 24, f);
    fclose(f);
    expect_failure("bad magic", "magic", "lab", NULL,
                   "magic: bad magic number 0x89504e47, expected an idx file");
    /* truncated in the middle of image 17 (raw and gzipped) */
    long cut = 16 + 17 * H * W + 11;
    make_images("cut", N, cut, false);
    expect_failure("truncated", "cut", "lab", NULL,
                   "cut: truncated: 50 images of 30 bytes announced, file ends inside image 17");
    make_images("cut.gz", N, cut, true);
    expect_failure("truncated gz", "cut.gz", "lab", NULL, "file ends inside image 17");
    /* a gzip stream cut short (not a whole gzip file) */
    make_images("whole.gz", N, -1, true);
    struct stat st;
    stat(scratch_path("whole.gz"), &st);
    CHECK(truncate(scratch_path("whole.gz"), st.st_size - 12) == 0, "truncate gz");
    prep_out r;
    const char *args_gz[] = {"idx",
                             "--train-images",
                             scratch_path("whole.gz"),
                             "--train-labels",
                             scratch_path("lab"),
                             "-o",
                             scratch_path("bad.h5"),
                             NULL};
    prep_run(&r, args_gz);
    CHECK(r.status == 1 && strstr(r.err, "whole.gz") && !file_exists(scratch_path("bad.h5")),
          "cut gzip stream: exit %d: %s", r.status, r.err);
    /* counts disagree */
    make_labels("lab49", N - 1, -1, false);
    expect_failure("count mismatch", "img", "lab49", NULL,
                   "img: 50 images, but " /* path of labels follows */);
    expect_failure("count mismatch", "img", "lab49", NULL, "lab49 has 49 labels");
    /* labels file shorter than its header says */
    make_labels("labcut", N, 8 + 20, false);
    expect_failure("labels truncated", "img", "labcut", NULL,
                   "labcut: truncated: 50 labels announced, file ends after 20");
    /* a header announcing 4 billion labels: a clear error, no giant allocation */
    uint32_t huge[1] = {4000000000u};
    write_idx(scratch_path("labhuge"), 0x08, 1, huge, g_labels, N, -1, false);
    expect_failure("huge label count", "img", "labhuge", NULL,
                   "labhuge: truncated: 4000000000 labels announced, file ends after 50");
    /* a header announcing 65536 images of 65536x65536 over 1500 bytes of
     * data: truncation, not an attempt to allocate 4096 such images */
    uint8_t *many = calloc(65536, 1);
    for (int i = 0; i < 65536; i++) many[i] = (uint8_t)(i % 2);
    uint32_t huge_dims[3] = {65536, 65536, 65536}, nlab[1] = {65536};
    write_idx(scratch_path("imghuge"), 0x08, 3, huge_dims, g_images, sizeof g_images, -1, false);
    write_idx(scratch_path("lab65536"), 0x08, 1, nlab, many, 65536, -1, false);
    free(many);
    expect_failure("huge image count and size", "imghuge", "lab65536", NULL,
                   "imghuge: truncated: 65536 images of 4294967296 bytes announced, file ends "
                   "inside image 0");
    /* every label 0: one class, refused here rather than by pstrain train */
    uint8_t zeros[N] = {0};
    uint32_t nz[1] = {N};
    write_idx(scratch_path("labzero"), 0x08, 1, nz, zeros, N, -1, false);
    expect_failure("one class", "img", "labzero", NULL,
                   "labzero: every label is 0: one class, expected at least 2");
    expect_failure("one class named", "img", "labzero", "only",
                   "1 class, expected at least 2 named classes");
    /* zero-byte files */
    fclose(fopen(scratch_path("empty"), "wb"));
    expect_failure("empty images", "empty", "lab", NULL, "empty: empty file, expected an idx");
    expect_failure("empty labels", "img", "empty", NULL, "empty: empty file, expected an idx");
    /* a label outside the classes given */
    expect_failure("label range", "img", "lab", "a,b,c",
                   "lab: label 3 at index 3 is outside the 3 classes given by --classes");
    /* wrong data type and dimensions */
    uint32_t dims[3] = {N, H, W};
    write_idx(scratch_path("float"), 0x0D, 3, dims, g_images, sizeof g_images, -1, false);
    expect_failure("dtype", "float", "lab", NULL, "float: idx data type 0x0d, expected 0x08");
    expect_failure("labels as images", "lab", "lab", NULL,
                   "lab: 1 dimensions, expected 3 to 4 for images");
    expect_failure("images as labels", "img", "img", NULL,
                   "img: 3 dimensions, expected 1 for labels");
    /* data after the announced images */
    uint32_t dims49[3] = {N - 1, H, W};
    write_idx(scratch_path("long"), 0x08, 3, dims49, g_images, sizeof g_images, -1, false);
    expect_failure("trailing data", "long", "lab49", NULL,
                   "long: unexpected data after the 49 images");
    expect_failure("missing file", "absent", "lab", NULL,
                   "absent: cannot open: No such file or directory");
    expect_failure("bad --classes", "img", "lab", "a,,b", "--classes: name 1 is empty");
    expect_failure("duplicate class", "img", "lab", "a,b,a,c", "'a' given twice");
}

/* One valid 4096x4096 image: read in one piece of 16 MiB (a buffer of 4096
 * images, 64 GiB, was refused as out of memory). */
static void test_big_image(void)
{
    enum { S = 4096 };
    uint8_t *px = malloc((size_t)S * S), lab[1] = {1};
    for (size_t i = 0; i < (size_t)S * S; i++) px[i] = (uint8_t)(i * 7 / S);
    uint32_t dims[3] = {1, S, S}, nl[1] = {1};
    write_idx(scratch_path("big"), 0x08, 3, dims, px, (size_t)S * S, -1, false);
    write_idx(scratch_path("biglab"), 0x08, 1, nl, lab, 1, -1, false);
    const char *out = scratch_path("big.h5");
    const char *args[] = {"idx",
                          "--train-images",
                          scratch_path("big"),
                          "--train-labels",
                          scratch_path("biglab"),
                          "-o",
                          out,
                          NULL};
    prep_out r;
    prep_run(&r, args);
    CHECK(r.status == 0, "4096x4096 image: exit %d: %s", r.status, r.err);
    h5ds ds;
    pst_err e;
    if (r.status == 0 && h5ds_open(&ds, out, &e) == 0) {
        uint8_t *back = malloc((size_t)S * S);
        int32_t l = -1;
        CHECK(ds.height == S && ds.width == S && ds.splits[0].count == 1, "shape %dx%d, %lld",
              ds.height, ds.width, (long long)ds.splits[0].count);
        CHECK(h5ds_read(&ds, "train", 0, 1, back, &l, &e) == 0 &&
                  !memcmp(back, px, (size_t)S * S) && l == 1,
              "4096x4096 image read back differently");
        free(back);
        h5ds_close(&ds);
    }
    unlink(out);
    unlink(scratch_path("big"));
    free(px);
}

static void check_converted(const char *path, int n_test)
{
    h5ds ds;
    pst_err e;
    int rc = h5ds_open(&ds, path, &e);
    CHECK(rc == 0, "open %s: %s", path, e.msg);
    if (rc) return;
    CHECK(ds.height == H && ds.width == W && ds.channels == 1 && ds.num_classes == NCLASS,
          "%dx%dx%d, %d classes", ds.height, ds.width, ds.channels, ds.num_classes);
    CHECK(!strcmp(ds.class_names[0], "0") && !strcmp(ds.class_names[3], "3"),
          "default class names");
    uint8_t img[N * H * W];
    int32_t lab[N];
    CHECK(h5ds_read(&ds, "train", 0, N, img, lab, &e) == 0, "read: %s", e.msg);
    CHECK(memcmp(img, g_images, sizeof img) == 0, "pixels exact");
    int bad = 0;
    for (int i = 0; i < N; i++) bad += lab[i] != label_of(i);
    CHECK(bad == 0, "%d wrong labels", bad);
    const h5ds_split *te = h5ds_find_split(&ds, "test");
    CHECK(n_test ? te && te->count == n_test : te == NULL, "test split");
    /* mean of the train pixels */
    double sum = 0;
    for (int i = 0; i < N * H * W; i++) sum += g_images[i] / 255.0;
    CHECK_CLOSE(ds.mean[0], sum / (N * H * W), 1e-6, 0, "mean %f", ds.mean[0]);
    h5ds_close(&ds);
}

static void test_good(void)
{
    make_images("img", N, -1, false);
    make_labels("lab", N, -1, false);
    make_images("img.gz", N, -1, true);
    make_labels("lab.gz", N, -1, true);
    make_images("timg", 20, -1, false);
    make_labels("tlab.gz", 20, -1, true);
    const char *out = scratch_path("good.h5");
    const char *args[] = {"idx",
                          "--train-images",
                          scratch_path("img.gz"),
                          "--train-labels",
                          scratch_path("lab"),
                          "--test-images",
                          scratch_path("timg"),
                          "--test-labels",
                          scratch_path("tlab.gz"),
                          "--chunk-images",
                          "7",
                          "--threads",
                          "1",
                          "-o",
                          out,
                          NULL};
    prep_out r;
    prep_run(&r, args);
    CHECK(r.status == 0, "idx: exit %d: %s", r.status, r.err);
    CHECK(strstr(r.out, "train 50, test 20 images of 6x5x1, 4 classes"), "summary: %s", r.out);
    check_converted(out, 20);
    CHECK(scratch_count(".tmp.") == 0, "no temporary file");

    /* info */
    const char *info[] = {"info", out, NULL};
    prep_run(&r, info);
    CHECK(r.status == 0, "info: exit %d: %s", r.status, r.err);
    CHECK(strstr(r.out, "6 x 5 x 1") && strstr(r.out, "classes   4"), "info shape: %s", r.out);
    CHECK(strstr(r.out, "train         50 images  chunks of 7 images"), "info train: %s", r.out);
    CHECK(strstr(r.out, "shuffle + deflate(4)"), "info compression: %s", r.out);
    /* labels (i*5)%4 for i < 50: classes 0,1 13 times, 2,3 12 times; test (i*5)%4, i < 20: 5 */
    CHECK(strstr(r.out, "      0  0            13         5\n"), "info class counts: %s", r.out);
    CHECK(strstr(r.out, "      3  3            12         5\n"), "info class counts: %s", r.out);

    /* verify */
    const char *ver[] = {"verify", out, NULL};
    prep_run(&r, ver);
    CHECK(r.status == 0 && strstr(r.out, ": ok (train 50, test 20 images of 6x5x1, 4 classes)"),
          "verify: exit %d: %s%s", r.status, r.out, r.err);
    const char *ver_bad[] = {"verify", scratch_path("lab"), NULL};
    prep_run(&r, ver_bad);
    /* an error, not a problem report: on stderr, with the command's prefix */
    CHECK(r.status == 1 && !strncmp(r.err, "pstrain-prep verify: ", 21) &&
              strstr(r.err, "not an HDF5 file"),
          "verify non-HDF5: %d %s%s", r.status, r.out, r.err);

    /* verify lists each problem of a damaged copy on its own line */
    const char *damaged = scratch_path("damaged.h5");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", out, damaged);
    CHECK(system(cmd) == 0, "copy");
    hid_t f = H5Fopen(damaged, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Adelete(f, "format") >= 0 && H5Ldelete(f, "train/labels", H5P_DEFAULT) >= 0,
          "damage the copy");
    H5Fclose(f);
    const char *ver_dmg[] = {"verify", damaged, NULL};
    prep_run(&r, ver_dmg);
    char want1[700], want2[700];
    snprintf(want1, sizeof want1,
             "%s: root attribute 'format': missing (expected the string "
             "'pstrain-dataset')\n",
             damaged);
    snprintf(want2, sizeof want2, "%s: /train/labels: missing (expected int32 [N])\n", damaged);
    CHECK(r.status == 1 && strstr(r.out, want1) && strstr(r.out, want2) &&
              strstr(r.err, "2 problems"),
          "verify damaged: exit %d: %s%s", r.status, r.out, r.err);
    const char *info_dmg[] = {"info", damaged, NULL};
    prep_run(&r, info_dmg);
    CHECK(r.status == 1 && strstr(r.err, "and 1 more problem; see pstrain-prep verify"),
          "info refuses a damaged file: %d %s", r.status, r.err);

    /* --force: an existing output is kept without it, replaced with it */
    struct stat before, after;
    stat(out, &before);
    const char *again[] = {"idx",
                           "--train-images",
                           scratch_path("img"),
                           "--train-labels",
                           scratch_path("lab.gz"),
                           "--compression",
                           "0",
                           "--classes",
                           "zero,one,two,three",
                           "-o",
                           out,
                           NULL};
    prep_run(&r, again);
    stat(out, &after);
    CHECK(r.status == 1 && strstr(r.err, "exists (use --force to overwrite it)"),
          "no --force: exit %d: %s", r.status, r.err);
    CHECK(after.st_ino == before.st_ino && after.st_size == before.st_size &&
              after.st_mtime == before.st_mtime,
          "existing output untouched");
    const char *forced[] = {"idx",
                            "--train-images",
                            scratch_path("img"),
                            "--train-labels",
                            scratch_path("lab.gz"),
                            "--compression",
                            "0",
                            "--classes",
                            "zero,one,two,three",
                            "--force",
                            "-o",
                            out,
                            NULL};
    prep_run(&r, forced);
    CHECK(r.status == 0, "--force: exit %d: %s", r.status, r.err);
    h5ds ds;
    pst_err e;
    if (h5ds_open(&ds, out, &e) == 0) {
        CHECK(!strcmp(ds.class_names[2], "two") && !h5ds_find_split(&ds, "test"),
              "forced output replaced the old one");
        h5ds_close(&ds);
    } else {
        CHECK(0, "open forced output: %s", e.msg);
    }
    CHECK(scratch_count(".tmp.") == 0, "no temporary file");
    /* --force over something that is not a regular file (here a FIFO; /dev/null
     * alike) is refused: the rename would have replaced it */
    const char *fifo = scratch_path("fifo-out");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    forced[11] = fifo;
    prep_run(&r, forced);
    struct stat fs;
    CHECK(r.status == 1 && strstr(r.err, "fifo-out: not a regular file"),
          "--force on a FIFO: %d %s", r.status, r.err);
    CHECK(stat(fifo, &fs) == 0 && S_ISFIFO(fs.st_mode), "the FIFO was replaced");
    CHECK(scratch_count(".tmp.") == 0, "no temporary file");
}

static void test_usage(void)
{
    prep_out r;
    const char *help[] = {"idx", "--help", NULL};
    prep_run(&r, help);
    CHECK(r.status == 0 && strstr(r.out, "usage: pstrain-prep idx"), "idx --help");
    const char *ihelp[] = {"info", "--help", NULL};
    prep_run(&r, ihelp);
    CHECK(r.status == 0 && strstr(r.out, "usage: pstrain-prep info"), "info --help");
    const char *vhelp[] = {"verify", "--help", NULL};
    prep_run(&r, vhelp);
    CHECK(r.status == 0 && strstr(r.out, "usage: pstrain-prep verify"), "verify --help");
    const char *noout[] = {"idx", "--train-images", "a", "--train-labels", "b", NULL};
    prep_run(&r, noout);
    CHECK(r.status == 2 && strstr(r.err, "-o OUT.h5 is required"), "missing -o: %d %s", r.status,
          r.err);
    const char *half[] = {"idx", "--train-images", "a", "--train-labels", "b", "--test-images", "c",
                          "-o",  "x.h5",           NULL};
    prep_run(&r, half);
    CHECK(r.status == 2 && strstr(r.err, "go together"), "test images without labels: %s", r.err);
    const char *badz[] = {"idx", "--compression", "12", NULL};
    prep_run(&r, badz);
    CHECK(r.status == 2 && strstr(r.err, "expected 0-9"), "bad compression: %s", r.err);
    const char *badt[] = {"idx", "--threads", "0", NULL};
    prep_run(&r, badt);
    CHECK(r.status == 2 && strstr(r.err, "--threads '0', expected 1-16"), "bad threads: %s", r.err);
    const char *unknown[] = {"idx", "--frobnicate", NULL};
    prep_run(&r, unknown);
    CHECK(r.status == 2 && strstr(r.err, "unknown option '--frobnicate'"), "unknown: %s", r.err);
    const char *noarg[] = {"verify", NULL};
    prep_run(&r, noarg);
    CHECK(r.status == 2, "verify without a file: %d", r.status);
}

int main(void)
{
    scratch_dir();
    for (int i = 0; i < N * H * W; i++) g_images[i] = pixel(i / (H * W), i % (H * W));
    for (int i = 0; i < N; i++) g_labels[i] = (uint8_t)label_of(i);
    test_corrupt();
    test_good();
    test_big_image();
    test_usage();
    scratch_cleanup();
    return check_exit();
}
