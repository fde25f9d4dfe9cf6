/*
 * test_prep_fashion.c - the Fashion-MNIST conversion (Debian's
 * dataset-fashion-mnist; skipped when it is not installed): 60,000 train and
 * 10,000 test images of 28x28x1, 10 named classes of 6,000 train images
 * each, images and labels compared pixel-exactly with the idx source read
 * here with zlib, mean/std as published; verify passes. Then a conversion
 * killed by SIGTERM mid-way leaves neither output nor temporary file.
 */
#include <signal.h>
#include <time.h>
#include <zlib.h>

#include "check.h"
#include "prep_run.h"
#include "pstrain/h5ds.h"

#define FM_DIR "/usr/share/datasets/fashion-mnist"
#define FM_CLASSES "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"

enum { NTRAIN = 60000, NTEST = 10000, SIDE = 28, IMG = SIDE * SIDE };

/* Reads a whole gzipped idx file (header + data) into memory. */
static uint8_t *read_gz(const char *path, size_t expect)
{
    gzFile f = gzopen(path, "rb");
    uint8_t *buf = malloc(expect + 1);
    int n = f ? gzread(f, buf, (unsigned)expect + 1) : -1;
    if (f) gzclose(f);
    CHECK(n == (int)expect, "%s: %d bytes, expected %zu", path, n, expect);
    return buf;
}

static void test_conversion(void)
{
    const char *out = scratch_path("fashion.h5");
    const char *args[] = {"idx",
                          "--train-images",
                          FM_DIR "/train-images-idx3-ubyte.gz",
                          "--train-labels",
                          FM_DIR "/train-labels-idx1-ubyte.gz",
                          "--test-images",
                          FM_DIR "/t10k-images-idx3-ubyte.gz",
                          "--test-labels",
                          FM_DIR "/t10k-labels-idx1-ubyte.gz",
                          "--classes",
                          FM_CLASSES,
                          "-o",
                          out,
                          NULL};
    prep_out r;
    prep_run(&r, args);
    CHECK(r.status == 0, "idx: exit %d: %s", r.status, r.err);
    fprintf(stderr, "%s", r.out);

    h5ds ds;
    pst_err e;
    if (h5ds_open(&ds, out, &e) < 0) {
        CHECK(0, "open: %s", e.msg);
        return;
    }
    const h5ds_split *tr = h5ds_find_split(&ds, "train"), *te = h5ds_find_split(&ds, "test");
    CHECK(tr && tr->count == NTRAIN, "train count");
    CHECK(te && te->count == NTEST, "test count");
    CHECK(ds.height == SIDE && ds.width == SIDE && ds.channels == 1, "28x28x1");
    CHECK(ds.num_classes == 10 && !strcmp(ds.class_names[0], "T-shirt/top") &&
              !strcmp(ds.class_names[9], "Ankle boot"),
          "class names");
    /* published statistics of the train pixels */
    CHECK_CLOSE(ds.mean[0], 0.2860, 5e-4, 0, "mean %.5f", ds.mean[0]);
    CHECK_CLOSE(ds.std[0], 0.3530, 5e-4, 0, "std %.5f", ds.std[0]);

    uint8_t *src_img = read_gz(FM_DIR "/train-images-idx3-ubyte.gz", 16 + (size_t)NTRAIN * IMG);
    uint8_t *src_lab = read_gz(FM_DIR "/train-labels-idx1-ubyte.gz", 8 + NTRAIN);
    uint8_t *src_timg = read_gz(FM_DIR "/t10k-images-idx3-ubyte.gz", 16 + (size_t)NTEST * IMG);
    uint8_t *src_tlab = read_gz(FM_DIR "/t10k-labels-idx1-ubyte.gz", 8 + NTEST);

    /* all labels; 6,000 train images per class */
    int32_t *lab = malloc(NTRAIN * sizeof *lab);
    CHECK(h5ds_read(&ds, "train", 0, NTRAIN, NULL, lab, &e) == 0, "labels: %s", e.msg);
    int counts[10] = {0}, mism = 0;
    for (int i = 0; i < NTRAIN; i++) {
        mism += lab[i] != src_lab[8 + i];
        if (lab[i] >= 0 && lab[i] < 10) counts[lab[i]]++;
    }
    CHECK(mism == 0, "%d train labels differ from the idx source", mism);
    for (int k = 0; k < 10; k++)
        CHECK(counts[k] == 6000, "class %d: %d train images", k, counts[k]);

    /* a few images, pixel-exact, from both splits (chunk edges included) */
    const int64_t picks[] = {0, 1, 667, 668, 12345, 59999};
    uint8_t img[IMG];
    int32_t l;
    for (size_t p = 0; p < PST_ARRAY_LEN(picks); p++) {
        int64_t i = picks[p];
        CHECK(h5ds_read(&ds, "train", i, 1, img, &l, &e) == 0, "read %lld: %s", (long long)i,
              e.msg);
        CHECK(memcmp(img, src_img + 16 + (size_t)i * IMG, IMG) == 0, "train image %lld differs",
              (long long)i);
    }
    const int64_t tpicks[] = {0, 5000, 9999};
    for (size_t p = 0; p < PST_ARRAY_LEN(tpicks); p++) {
        int64_t i = tpicks[p];
        CHECK(h5ds_read(&ds, "test", i, 1, img, &l, &e) == 0, "read test %lld: %s", (long long)i,
              e.msg);
        CHECK(memcmp(img, src_timg + 16 + (size_t)i * IMG, IMG) == 0 && l == src_tlab[8 + i],
              "test image %lld differs", (long long)i);
    }
    h5ds_close(&ds);
    free(lab);
    free(src_img);
    free(src_lab);
    free(src_timg);
    free(src_tlab);

    const char *ver[] = {"verify", out, NULL};
    prep_run(&r, ver);
    CHECK(r.status == 0 && strstr(r.out, "ok (train 60000, test 10000 images of 28x28x1, 10 "
                                         "classes)"),
          "verify: %d %s", r.status, r.out);
    const char *info[] = {"info", out, NULL};
    prep_run(&r, info);
    CHECK(r.status == 0 && strstr(r.out, "      9  Ankle boot       6000      1000\n"), "info: %s",
          r.out);
}

/* SIGTERM once the temporary file exists: the run dies by the signal and
 * leaves neither the temporary nor the output file. */
static void test_interrupt(void)
{
    const char *out = scratch_path("killed.h5");
    const char *args[] = {"idx",
                          "--train-images",
                          FM_DIR "/train-images-idx3-ubyte.gz",
                          "--train-labels",
                          FM_DIR "/train-labels-idx1-ubyte.gz",
                          "--compression",
                          "9",
                          "-o",
                          out,
                          NULL};
    pid_t pid = prep_start(args);
    bool seen = false;
    for (int i = 0; i < 2000 && !seen; i++) { /* up to 10 s */
        seen = scratch_count("killed.h5.tmp.") == 1;
        if (!seen) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    CHECK(seen, "temporary file never appeared");
    kill(pid, SIGTERM);
    prep_out r;
    prep_wait(pid, &r);
    CHECK(r.status == 128 + SIGTERM || r.status == 0, "status %d: %s", r.status, r.err);
    if (r.status == 0) {
        fprintf(stderr, "note: the conversion finished before SIGTERM arrived\n");
        return;
    }
    CHECK(scratch_count(".tmp.") == 0, "temporary file left after SIGTERM");
    /* only a signal landing after the rename (a window of milliseconds at
     * the end of a seconds-long run) may leave an output, and then a whole one */
    pst_err e;
    CHECK(!file_exists(out) || h5ds_verify(out, NULL, NULL, &e) == 0,
          "a half-written output exists after SIGTERM");
}

int main(void)
{
    if (!file_exists(FM_DIR "/train-images-idx3-ubyte.gz"))
        CHECK_SKIP("%s not installed (Debian package dataset-fashion-mnist)", FM_DIR);
    scratch_dir();
    test_conversion();
    test_interrupt();
    scratch_cleanup();
    return check_exit();
}
