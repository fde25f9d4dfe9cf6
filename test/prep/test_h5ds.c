/*
 * test_h5ds.c - h5ds_verify catches each defect of a data set built here
 * with the plain HDF5 API, h5ds_open refuses such files and reads sound ones
 * exactly; the writer (h5write) round-trips images, labels and exact
 * mean/std, refuses to overwrite, and leaves nothing behind when aborted.
 */
#include <hdf5.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "h5write.h"
#include "prep_run.h"
#include "pstrain/h5ds.h"

enum {
    N_TRAIN = 23,
    N_TEST = 9,
    H = 5,
    W = 4,
    C = 2,
    K = 3,
    IMG = H * W * C,
};

typedef enum defect {
    SOUND,
    MISSING_TRAIN_LABELS,
    LABEL_OUT_OF_RANGE,
    NEGATIVE_LABEL_IN_TEST,
    COUNT_MISMATCH,
    IMAGES_INT16,
    LABELS_FLOAT,
    MISSING_FORMAT,
    WRONG_FORMAT,
    FORMAT_VERSION_3,
    FORMAT_VERSION_4,
    NAN_MEAN,
    INF_STD,
    MEAN_WRONG_LENGTH,
    MISSING_CLASSES,
    CLASSES_TOO_FEW,
    DUPLICATE_CLASS,
    SHAPE_MISMATCH,
    MISSING_TRAIN,
    IMAGES_RANK3,
    IMAGES_VIRTUAL,
    LABELS_EXTERNAL,
    LABELS_COMPACT,
    NUM_DEFECTS
} defect;

/* What each defect's problem message must contain. */
static const char *const expect[NUM_DEFECTS] = {
    [MISSING_TRAIN_LABELS] = "/train/labels: missing",
    [LABEL_OUT_OF_RANGE] = "/train/labels: 1 label outside [0, 3) (num_classes), first [7] = 3",
    [NEGATIVE_LABEL_IN_TEST] = "/test/labels: 1 label outside [0, 3) (num_classes), first [2] = -1",
    [COUNT_MISMATCH] = "/train/labels: 22 labels, expected 23",
    [IMAGES_INT16] = "/train/images: dtype int16, expected uint8",
    [LABELS_FLOAT] = "/train/labels: dtype float32, expected int32",
    [MISSING_FORMAT] = "root attribute 'format': missing",
    [WRONG_FORMAT] = "root attribute 'format' = 'something-else', expected 'pstrain-dataset'",
    [FORMAT_VERSION_3] = "root attribute 'storage': missing (expected 'encoded': format_version 3 "
                         "is encoded storage)",
    [FORMAT_VERSION_4] = "root attribute 'format_version' = 4, expected 1 to 3",
    [NAN_MEAN] = "root attribute 'mean'[1] = nan",
    [INF_STD] = "root attribute 'std'[0] = inf",
    [MEAN_WRONG_LENGTH] = "root attribute 'mean': has 1 values, expected 2",
    [MISSING_CLASSES] = "/classes: missing",
    [CLASSES_TOO_FEW] = "/classes: 2 names, expected num_classes = 3",
    [DUPLICATE_CLASS] = "both named 'cat'",
    [SHAPE_MISMATCH] = "/test/images: shape [9][5][3][2], expected [N][5][4][2]",
    [MISSING_TRAIN] = "/train: missing",
    [IMAGES_RANK3] = "/train/images: shape [23][5][8], expected [N][H][W][C]",
    [IMAGES_VIRTUAL] = "/train/images: a virtual dataset (its data live in other files), expected "
                       "chunked or contiguous storage in this file",
    [LABELS_EXTERNAL] = "/test/labels: external storage (its data live in raw files beside the "
                        "HDF5 file), expected chunked or contiguous storage in this file",
    [LABELS_COMPACT] = "/train/labels: compact storage, expected chunked or contiguous storage",
};

static uint8_t pixel(int split, int i, int j)
{
    return (uint8_t)(split * 101 + i * 7 + j * 3);
}

static int32_t label_of(int i)
{
    return i % K;
}

static void attr_int(hid_t f, const char *name, int v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &v);
    H5Aclose(a);
    H5Sclose(s);
}

static void attr_str(hid_t f, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, &v);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

static void attr_doubles(hid_t f, const char *name, const double *v, int n)
{
    hsize_t d = (hsize_t)n;
    hid_t s = H5Screate_simple(1, &d, NULL);
    hid_t a = H5Acreate2(f, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, v);
    H5Aclose(a);
    H5Sclose(s);
}

/* One split: images uint8 [n][H][w][C] chunked (3 images), labels int32. */
static void write_split(hid_t f, const char *name, int split, int n, int w, defect d)
{
    hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[4] = {(hsize_t)n, H, (hsize_t)w, C}, chunk[4] = {3, H, (hsize_t)w, C};
    int rank = 4;
    if (d == IMAGES_RANK3 && split == 0) {
        rank = 3;
        dims[2] = (hsize_t)(w * C);
        chunk[2] = dims[2];
    }
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t s = H5Screate_simple(rank, dims, NULL);
    if (d == IMAGES_VIRTUAL && split == 0) {
        /* all of it mapped from a file that does not exist: reads as zeros */
        H5Pset_virtual(dcpl, s, scratch_path("missing-source.h5"), "/images", s);
    } else {
        H5Pset_chunk(dcpl, rank, chunk);
        H5Pset_deflate(dcpl, 1);
    }
    size_t img = (size_t)(H * w * C);
    uint8_t *px = malloc((size_t)n * img);
    uint16_t *px16 = malloc((size_t)n * img * 2);
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < img; j++) {
            px[(size_t)i * img + j] = pixel(split, i, (int)j);
            px16[(size_t)i * img + j] = pixel(split, i, (int)j);
        }
    bool int16 = d == IMAGES_INT16 && split == 0;
    hid_t di = H5Dcreate2(g, "images", int16 ? H5T_STD_I16LE : H5T_STD_U8LE, s, H5P_DEFAULT, dcpl,
                          H5P_DEFAULT);
    H5Dwrite(di, int16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT,
             int16 ? (void *)px16 : (void *)px);
    H5Dclose(di);
    H5Sclose(s);
    H5Pclose(dcpl);
    free(px);
    free(px16);

    if (!(d == MISSING_TRAIN_LABELS && split == 0)) {
        hsize_t nl = (hsize_t)n - (d == COUNT_MISMATCH && split == 0);
        int32_t lab[64];
        float flab[64];
        for (int i = 0; i < (int)nl; i++) flab[i] = (float)(lab[i] = label_of(i));
        if (d == LABEL_OUT_OF_RANGE && split == 0) lab[7] = K;
        if (d == NEGATIVE_LABEL_IN_TEST && split == 2) lab[2] = -1;
        bool flt = d == LABELS_FLOAT && split == 0;
        hid_t ls = H5Screate_simple(1, &nl, NULL);
        hid_t ldcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (d == LABELS_EXTERNAL && split == 2)
            H5Pset_external(ldcpl, scratch_path("labels.raw"), 0, nl * sizeof(int32_t));
        if (d == LABELS_COMPACT && split == 0) H5Pset_layout(ldcpl, H5D_COMPACT);
        hid_t dl = H5Dcreate2(g, "labels", flt ? H5T_IEEE_F32LE : H5T_STD_I32LE, ls, H5P_DEFAULT,
                              ldcpl, H5P_DEFAULT);
        H5Pclose(ldcpl);
        H5Dwrite(dl, flt ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                 flt ? (void *)flab : (void *)lab);
        H5Dclose(dl);
        H5Sclose(ls);
    }
    H5Gclose(g);
}

/* A data set with one defect (or none), written with the plain HDF5 API. */
static void build(const char *path, defect d)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (d != MISSING_FORMAT)
        attr_str(f, "format", d == WRONG_FORMAT ? "something-else" : "pstrain-dataset");
    attr_int(f, "format_version", d == FORMAT_VERSION_3 ? 3 : d == FORMAT_VERSION_4 ? 4 : 1);
    attr_int(f, "height", H);
    attr_int(f, "width", W);
    attr_int(f, "channels", C);
    attr_int(f, "num_classes", K);
    double mean[C] = {0.25, d == NAN_MEAN ? NAN : 0.5},
           sd[C] = {d == INF_STD ? INFINITY : 0.1, 0.2};
    attr_doubles(f, "mean", mean, d == MEAN_WRONG_LENGTH ? 1 : C);
    attr_doubles(f, "std", sd, C);
    attr_str(f, "source", "test_h5ds");
    attr_str(f, "created", "2026-01-01T00:00:00Z");
    if (d != MISSING_CLASSES) {
        const char *names[K] = {"cat", d == DUPLICATE_CLASS ? "cat" : "dog", "ünicode-bird"};
        hsize_t k = d == CLASSES_TOO_FEW ? K - 1 : K;
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);
        H5Tset_cset(t, H5T_CSET_UTF8);
        hid_t s = H5Screate_simple(1, &k, NULL);
        hid_t dc = H5Dcreate2(f, "classes", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(dc, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, names);
        H5Dclose(dc);
        H5Sclose(s);
        H5Tclose(t);
    }
    if (d != MISSING_TRAIN) write_split(f, "train", 0, N_TRAIN, W, d);
    write_split(f, "test", 2, N_TEST, d == SHAPE_MISMATCH ? W - 1 : W, d);
    H5Fclose(f);
}

static void test_defects(void)
{
    const char *path = scratch_path("defect.h5");
    for (int d = 0; d < NUM_DEFECTS; d++) {
        build(path, (defect)d);
        problems p = {0, ""};
        pst_err e = {""};
        int n = h5ds_verify(path, collect, &p, &e);
        h5ds ds;
        int open_rc = h5ds_open(&ds, path, &e);
        if (d == SOUND) {
            CHECK(n == 0, "sound file: %d problems:\n%s", n, p.all);
            CHECK(open_rc == 0, "sound file refused: %s", e.msg);
            if (open_rc == 0) h5ds_close(&ds);
            continue;
        }
        CHECK(n >= 1 && n == p.n, "defect %d: %d problems reported, %d counted", d, n, p.n);
        CHECK(strstr(p.all, expect[d]) != NULL, "defect %d: expected '%s' among:\n%s", d, expect[d],
              p.all);
        int lines = 0;
        for (const char *c = p.all; *c; c++) lines += *c == '\n';
        CHECK(lines == p.n, "defect %d: %d lines for %d problems (one line each)", d, lines, p.n);
        CHECK(open_rc < 0, "defect %d: h5ds_open accepted a file with problems", d);
        CHECK(strncmp(e.msg, path, strlen(path)) == 0, "defect %d: open error names the file: %s",
              d, e.msg);
        h5ds_close(&ds); /* safe after a failed open */
    }
}

static void test_read_sound(void)
{
    const char *path = scratch_path("sound.h5");
    build(path, SOUND);
    h5ds ds;
    pst_err e;
    int rc = h5ds_open(&ds, path, &e);
    CHECK(rc == 0, "open: %s", e.msg);
    if (rc) return;
    CHECK(ds.height == H && ds.width == W && ds.channels == C && ds.num_classes == K,
          "shape %dx%dx%d k %d", ds.height, ds.width, ds.channels, ds.num_classes);
    CHECK(ds.nsplits == 2, "%d splits", ds.nsplits);
    CHECK(!strcmp(ds.class_names[2], "ünicode-bird"), "class 2 '%s'", ds.class_names[2]);
    CHECK_CLOSE(ds.mean[0], 0.25, 1e-7, 0, "mean0");
    CHECK_CLOSE(ds.std[1], 0.2, 1e-7, 0, "std1");
    CHECK(!strcmp(ds.source, "test_h5ds"), "source '%s'", ds.source);
    const h5ds_split *tr = h5ds_find_split(&ds, "train"), *te = h5ds_find_split(&ds, "test");
    CHECK(tr && tr->count == N_TRAIN && tr->chunk_images == 3, "train split");
    CHECK(te && te->count == N_TEST, "test split");
    CHECK(h5ds_find_split(&ds, "val") == NULL, "no val split");
    /* every (first, count) window of the test split, unaligned ones included */
    uint8_t img[N_TEST * IMG];
    int32_t lab[N_TEST];
    int bad = 0;
    for (int first = 0; first < N_TEST; first++)
        for (int count = 0; first + count <= N_TEST; count++) {
            if (h5ds_read(&ds, "test", first, count, img, lab, &e) < 0) {
                bad++;
                continue;
            }
            for (int i = 0; i < count; i++) {
                bad += lab[i] != label_of(first + i);
                for (int j = 0; j < IMG; j++) bad += img[i * IMG + j] != pixel(2, first + i, j);
            }
        }
    CHECK(bad == 0, "%d wrong values in windowed reads", bad);
    CHECK(h5ds_read(&ds, "train", 20, 4, img, lab, &e) < 0 && strstr(e.msg, "[20, 24)"),
          "read past the end refused: %s", e.msg);
    CHECK(h5ds_read(&ds, "val", 0, 1, img, lab, &e) < 0 &&
              strstr(e.msg, "no 'val' split (this data set has train, test)"),
          "missing split refused: %s", e.msg);
    CHECK(h5ds_read(&ds, "train", 5, 2, NULL, lab, &e) == 0 && lab[0] == label_of(5),
          "labels only");
    h5ds_close(&ds);
    h5ds_close(&ds); /* idempotent */
}

static void test_not_a_dataset(void)
{
    pst_err e = {""};
    const char *txt = scratch_path("text.h5");
    FILE *f = fopen(txt, "w");
    fputs("not hdf5\n", f);
    fclose(f);
    CHECK(h5ds_verify(txt, NULL, NULL, &e) == -1 && strstr(e.msg, "not an HDF5 file"),
          "text file: %s", e.msg);
    CHECK(h5ds_verify(scratch_path("absent.h5"), NULL, NULL, &e) == -1 &&
              strstr(e.msg, "No such file"),
          "absent file: %s", e.msg);
    /* a FIFO is refused up front; opening it would block (alarm: a hang fails) */
    const char *fifo = scratch_path("fifo.h5");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    alarm(20);
    CHECK(h5ds_verify(fifo, NULL, NULL, &e) == -1 && strstr(e.msg, "not a regular file"),
          "FIFO: %s", e.msg);
    alarm(0);
    /* a sound file cut in half */
    const char *cut = scratch_path("cut.h5");
    build(cut, SOUND);
    struct stat st;
    stat(cut, &st);
    CHECK(truncate(cut, st.st_size / 2) == 0, "truncate");
    problems p = {0, ""};
    int n = h5ds_verify(cut, collect, &p, &e);
    CHECK(n != 0, "truncated file passed verify");
    h5ds ds;
    CHECK(h5ds_open(&ds, cut, &e) < 0, "truncated file opened");
}

/* ---- the writer -------------------------------------------------------------- */

static void test_writer(void)
{
    const char *out = scratch_path("written.h5");
    const char *names[K] = {"a", "b", "c"};
    h5w_opts o = {.height = H,
                  .width = W,
                  .channels = C,
                  .num_classes = K,
                  .class_names = names,
                  .chunk_images = 4,
                  .compression = 3,
                  .source = "writer test"};
    enum { NT = 37, NV = 5 };
    uint8_t *img = malloc((size_t)NT * IMG);
    int32_t lab[NT];
    uint64_t seed = 12345;
    double sum[C] = {0}, sumsq[C] = {0};
    for (int i = 0; i < NT * IMG; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        img[i] = (uint8_t)(seed >> 56);
        double x = img[i] / 255.0;
        sum[i % C] += x;
        sumsq[i % C] += x * x;
    }
    for (int i = 0; i < NT; i++) lab[i] = label_of(i);
    pst_err e = {""};
    h5w *w = NULL;
    int rc = h5w_create(&w, out, &o, &e);
    CHECK(rc == 0, "create: %s", e.msg);
    if (rc) return;
    CHECK(scratch_count(".tmp.") == 1, "temporary file exists while writing");
    CHECK(!file_exists(out), "output appears only at commit");
    /* uneven appends across chunk boundaries */
    rc = h5w_split_begin(w, "train", NT, &e);
    int at = 0, steps[] = {1, 6, 3, 10, 17};
    for (size_t s = 0; s < PST_ARRAY_LEN(steps) && rc == 0; s++) {
        rc = h5w_split_append(w, img + (size_t)at * IMG, lab + at, steps[s], &e);
        at += steps[s];
    }
    CHECK(rc == 0 && at == NT, "append: %s", e.msg);
    CHECK(h5w_split_append(w, img, lab, 1, &e) < 0 && strstr(e.msg, "exceeds"), "overflow: %s",
          e.msg);
    CHECK(h5w_split_end(w, &e) == 0, "end: %s", e.msg);
    CHECK(h5w_split_begin(w, "train", 1, &e) < 0 && strstr(e.msg, "twice"), "train twice: %s",
          e.msg);
    CHECK(h5w_split_begin(w, "val", NV, &e) == 0, "val: %s", e.msg);
    int32_t badlab[NV] = {0, 1, K, 0, 0};
    CHECK(h5w_split_append(w, img, badlab, NV, &e) < 0 && strstr(e.msg, "label 3 of example 2"),
          "label out of range refused: %s", e.msg);
    CHECK(h5w_split_append(w, img, lab, NV, &e) == 0, "val append: %s", e.msg);
    CHECK(h5w_split_end(w, &e) == 0, "val end: %s", e.msg);
    rc = h5w_commit(w, &e);
    CHECK(rc == 0, "commit: %s", e.msg);
    CHECK(scratch_count(".tmp.") == 0, "no temporary file left after commit");

    problems p = {0, ""};
    CHECK(h5ds_verify(out, collect, &p, &e) == 0, "written file has problems:\n%s", p.all);
    h5ds ds;
    rc = h5ds_open(&ds, out, &e);
    CHECK(rc == 0, "open written: %s", e.msg);
    if (rc == 0) {
        for (int c = 0; c < C; c++) {
            double n = (double)NT * H * W, m = sum[c] / n, sd = sqrt(sumsq[c] / n - m * m);
            CHECK_CLOSE(ds.mean[c], m, 1e-6, 0, "mean[%d] %f vs %f", c, ds.mean[c], m);
            CHECK_CLOSE(ds.std[c], sd, 1e-6, 0, "std[%d] %f vs %f", c, ds.std[c], sd);
        }
        CHECK(h5ds_find_split(&ds, "train")->chunk_images == 4, "chunk_images");
        uint8_t *back = malloc((size_t)NT * IMG);
        int32_t lback[NT];
        CHECK(h5ds_read(&ds, "train", 0, NT, back, lback, &e) == 0, "read: %s", e.msg);
        CHECK(memcmp(back, img, (size_t)NT * IMG) == 0, "train pixels round-trip");
        CHECK(memcmp(lback, lab, sizeof lback) == 0, "train labels round-trip");
        CHECK(h5ds_read(&ds, "val", 0, NV, back, lback, &e) == 0 &&
                  memcmp(back, img, (size_t)NV * IMG) == 0,
              "val round-trip");
        CHECK(!strcmp(ds.source, "writer test") && strlen(ds.created) == 20 &&
                  ds.created[10] == 'T' && ds.created[19] == 'Z',
              "source '%s', created '%s'", ds.source, ds.created);
        free(back);
        h5ds_close(&ds);
    }

    /* an existing output is kept unless force */
    w = NULL;
    CHECK(h5w_create(&w, out, &o, &e) < 0 && strstr(e.msg, "exists") && !w,
          "existing output refused: %s", e.msg);
    o.force = true;
    CHECK(h5w_create(&w, out, &o, &e) == 0, "force: %s", e.msg);
    CHECK(h5w_split_begin(w, "train", 2, &e) == 0 && h5w_split_append(w, img, lab, 1, &e) == 0,
          "partial split");
    CHECK(h5w_split_end(w, &e) < 0 && strstr(e.msg, "1 examples written, 2 declared"),
          "short split refused: %s", e.msg);
    h5w_abort(w);
    CHECK(scratch_count(".tmp.") == 0, "abort removes the temporary file");
    CHECK(h5ds_verify(out, NULL, NULL, &e) == 0, "aborted overwrite left the old file intact");
    /* commit without a train split fails and removes the temporary file */
    CHECK(h5w_create(&w, scratch_path("notrain.h5"), &o, &e) == 0, "create");
    CHECK(h5w_commit(w, &e) < 0 && strstr(e.msg, "no train split"), "no train: %s", e.msg);
    CHECK(scratch_count(".tmp.") == 0 && !file_exists(scratch_path("notrain.h5")),
          "failed commit leaves nothing");
    h5w_abort(NULL);
    free(img);
}

/* A small sound data set through w (train split of 2 examples). */
static int write_two(h5w *w, pst_err *e)
{
    uint8_t img[2 * IMG] = {0};
    int32_t lab[2] = {0, 1};
    return h5w_split_begin(w, "train", 2, e) < 0 || h5w_split_append(w, img, lab, 2, e) < 0 ||
                   h5w_split_end(w, e) < 0
               ? -1
               : 0;
}

/* Two runs writing one output without --force: the existence check at the
 * start races with the rename at the end, so the publishing itself must not
 * replace a file another run published meanwhile. Temp files of killed runs
 * (OUT.tmp.PID, PID gone) are removed; a running one's are kept. */
static void test_publish_race(void)
{
    const char *out = scratch_path("race.h5");
    const char *names[K] = {"a", "b", "c"};
    h5w_opts o = {.height = H, .width = W, .channels = C, .num_classes = K, .class_names = names};
    pst_err e = {""};
    /* a temp file of a run that no longer runs, and one of a running process */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char stale[600], live[600];
    snprintf(stale, sizeof stale, "%s.tmp.%ld", out, (long)dead);
    snprintf(live, sizeof live, "%s.tmp.%ld", out, (long)getppid());
    fclose(fopen(stale, "w"));
    fclose(fopen(live, "w"));
    h5w *w = NULL;
    CHECK(h5w_create(&w, out, &o, &e) == 0 && write_two(w, &e) == 0, "create: %s", e.msg);
    CHECK(!file_exists(stale), "the temp file of a dead run (%ld) is still there", (long)dead);
    CHECK(file_exists(live), "the temp file of a running process was removed");
    unlink(live);
    /* another run publishes first */
    FILE *f = fopen(out, "w");
    fputs("the other run's data set\n", f);
    fclose(f);
    CHECK(h5w_commit(w, &e) < 0 && strstr(e.msg, "exists"), "second publisher: %s",
          e.msg[0] ? e.msg : "succeeded");
    char buf[64] = "";
    f = fopen(out, "r");
    if (f) {
        CHECK(fgets(buf, sizeof buf, f) && !strcmp(buf, "the other run's data set\n"),
              "the first run's output was replaced");
        fclose(f);
    }
    CHECK(scratch_count("race.h5.tmp.") == 0, "temporary file left behind");
    /* with --force the later run replaces it, as before */
    o.force = true;
    CHECK(h5w_create(&w, out, &o, &e) == 0 && write_two(w, &e) == 0 && h5w_commit(w, &e) == 0,
          "force: %s", e.msg);
    CHECK(h5ds_verify(out, NULL, NULL, &e) == 0, "forced output is a sound data set");
}

int main(void)
{
    scratch_dir();
    test_publish_race();
    test_defects();
    test_read_sound();
    test_not_a_dataset();
    test_writer();
    scratch_cleanup();
    return check_exit();
}
