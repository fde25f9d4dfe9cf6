/* test_png_cli.c - `pstrain-prep png` and `preview` end to end on trees
 * generated here: class ids and counts, the seeded val split, pixels,
 * corrupt files (skipped, or an error under --strict with no output),
 * size mismatches, --test-dir, --force, and the preview grid. */
#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "data-tools/font5x7.h"
#include "data-tools/pngio.h"
#include "pngtest.h"
#include "pstrain/h5ds.h"

#define H 8
#define W 6

static char g_dir[64];
static const char *g_prep;
static char g_log[1 << 16];

/* Runs pstrain-prep with the NULL-terminated args; stdout+stderr land in
 * g_log. Returns the exit status, or -1 when it died from a signal. */
static int prep(const char *first, ...)
{
    const char *argv[64] = {g_prep, first};
    int argc = 2;
    va_list ap;
    va_start(ap, first);
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < 63) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    char logpath[128];
    snprintf(logpath, sizeof logpath, "%s/log.txt", g_dir);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(logpath, "w", stdout);
        if (!f || dup2(STDOUT_FILENO, STDERR_FILENO) < 0) _exit(99);
        execv(g_prep, (char *const *)argv);
        _exit(98);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    FILE *f = fopen(logpath, "r");
    size_t n = f ? fread(g_log, 1, sizeof g_log - 1, f) : 0;
    g_log[n] = 0;
    if (f) fclose(f);
    if (!WIFEXITED(st)) {
        fprintf(stderr, "pstrain-prep died (signal %d); output:\n%s\n", WTERMSIG(st), g_log);
        return -1;
    }
    return WEXITSTATUS(st);
}

static void path2(char *out, size_t n, const char *a, const char *b)
{
    if (snprintf(out, n, "%s/%s", a, b) >= (int)n) abort(); /* test paths are short */
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* The image written for file `id`: pixel 0 is the id, the rest a pattern. */
static void image_for(int id, uint8_t px[H * W])
{
    for (int i = 0; i < H * W; i++) px[i] = (uint8_t)(id * 7 + i * 3);
    px[0] = (uint8_t)id;
}

/* Writes file `id` of a class as one of several PNG variants that all
 * decode (channels 1) to image_for(id). */
static void write_image(const char *dir, const char *name, int id, int variant)
{
    uint8_t px[H * W];
    image_for(id, px);
    pt_buf b;
    if (variant == 0) {
        b = pt_make8(W, H, 1, px);
    } else if (variant == 1) { /* 16-bit gray: v * 257 scales back to v exactly */
        uint8_t be[H * W * 2];
        for (int i = 0; i < H * W; i++) be[2 * i] = be[2 * i + 1] = px[i];
        b = pt_make(W, H, 16, PNG_COLOR_TYPE_GRAY, 1, be, W * 2, NULL, 0, NULL, 0, NULL);
    } else if (variant == 2) { /* RGBA with R=G=B and opaque alpha */
        uint8_t rgba[H * W * 4];
        for (int i = 0; i < H * W; i++)
            rgba[4 * i] = rgba[4 * i + 1] = rgba[4 * i + 2] = px[i], rgba[4 * i + 3] = 255;
        b = pt_make(W, H, 8, PNG_COLOR_TYPE_RGB_ALPHA, 0, rgba, W * 4, NULL, 0, NULL, 0, NULL);
    } else { /* gray palette */
        png_color pal[256];
        for (int i = 0; i < 256; i++) pal[i].red = pal[i].green = pal[i].blue = (uint8_t)i;
        b = pt_make(W, H, 8, PNG_COLOR_TYPE_PALETTE, 1, px, W, pal, 256, NULL, 0, NULL);
    }
    char p[512];
    path2(p, sizeof p, dir, name);
    CHECK(pt_save(p, b.p, b.n) == 0, "save %s", p);
    free(b.p);
}

static const char *const classes[3] = {"cat", "dog", "zebra"};
static const int per_class[3] = {10, 7, 5};

/* DIR/{cat,dog,zebra}/NN.png with ids class*32 + n, plus entries to ignore:
 * a top-level file, a hidden directory, and non-PNG files. Returns how many
 * entries must be ignored. */
static int make_tree(const char *root)
{
    mkdir(root, 0777);
    char p[512], q[512];
    for (int k = 0; k < 3; k++) {
        path2(p, sizeof p, root, classes[k]);
        mkdir(p, 0777);
        for (int n = 0; n < per_class[k]; n++) {
            char name[32];
            snprintf(name, sizeof name, "%02d.png", n);
            write_image(p, name, k * 32 + n, (k + n) % 4);
        }
    }
    path2(p, sizeof p, root, "README.txt");
    pt_save(p, "x", 1);
    path2(p, sizeof p, root, ".hidden");
    mkdir(p, 0777);
    path2(p, sizeof p, root, "cat");
    path2(q, sizeof q, p, "notes.txt");
    pt_save(q, "x", 1);
    path2(q, sizeof q, p, "photo.gif"); /* .jpg would be an image (a broken one) */
    pt_save(q, "x", 1);
    path2(q, sizeof q, p, "subdir.png");
    mkdir(q, 0777);
    return 5; /* README.txt, .hidden, notes.txt, photo.gif, subdir.png */
}

/* Reads a whole split: ids (pixel 0) and labels. Returns the count. */
static int64_t read_split(h5ds *ds, const char *split, int *ids, int32_t *labels, uint8_t *imgs)
{
    const h5ds_split *sp = h5ds_find_split(ds, split);
    if (!sp) return 0;
    size_t ib = (size_t)ds->height * ds->width * ds->channels;
    uint8_t *buf = malloc(ib * (size_t)sp->count);
    pst_err e;
    CHECK(h5ds_read(ds, split, 0, sp->count, buf, labels, &e) == 0, "read %s: %s", split, e.msg);
    for (int64_t i = 0; i < sp->count; i++) ids[i] = buf[i * ib];
    if (imgs) memcpy(imgs, buf, ib * (size_t)sp->count);
    free(buf);
    return sp->count;
}

static void test_tree(const char *tree, int nignored)
{
    char out1[128], out2[128], out3[128];
    snprintf(out1, sizeof out1, "%s/a.h5", g_dir);
    snprintf(out2, sizeof out2, "%s/b.h5", g_dir);
    snprintf(out3, sizeof out3, "%s/c.h5", g_dir);
    int rc = prep("png", tree, "--val-fraction", "0.3", "--seed", "7", "-o", out1, NULL);
    CHECK(rc == 0, "png clean tree: rc %d\n%s", rc, g_log);
    CHECK(strstr(g_log, "train 15, val 7, test 0 images"), "split sizes in summary:\n%s", g_log);
    CHECK(strstr(g_log, "skipped 0 unreadable"), "no skips:\n%s", g_log);
    char ign[64];
    snprintf(ign, sizeof ign, "ignored %d entries", nignored);
    CHECK(strstr(g_log, ign), "ignored count (%d):\n%s", nignored, g_log);

    h5ds ds;
    pst_err e;
    CHECK(h5ds_open(&ds, out1, &e) == 0, "open: %s", e.msg);
    CHECK(ds.num_classes == 3 && !strcmp(ds.class_names[0], "cat") &&
              !strcmp(ds.class_names[1], "dog") && !strcmp(ds.class_names[2], "zebra"),
          "classes sorted");
    CHECK(ds.height == H && ds.width == W && ds.channels == 1, "shape %dx%dx%d", ds.height,
          ds.width, ds.channels);
    int ids[64], vids1[64], vids2[64];
    int32_t labels[64];
    uint8_t imgs[64 * H * W];
    int64_t ntr = read_split(&ds, "train", ids, labels, imgs);
    int count[3] = {0}, seen[96] = {0}, bad = 0, order = 0;
    for (int64_t i = 0; i < ntr; i++) {
        count[labels[i]]++;
        seen[ids[i]]++;
        bad += labels[i] != ids[i] / 32;
        if (i) order += ids[i] < ids[i - 1];
        uint8_t want[H * W];
        image_for(ids[i], want);
        bad += memcmp(imgs + i * H * W, want, H * W) != 0;
    }
    CHECK(ntr == 15 && count[0] == 7 && count[1] == 5 && count[2] == 3,
          "train per class %d %d %d (want 7 5 3)", count[0], count[1], count[2]);
    CHECK(bad == 0 && order == 0, "train labels/pixels wrong %d, out of order %d", bad, order);
    int64_t nva = read_split(&ds, "val", vids1, labels, NULL);
    memset(count, 0, sizeof count);
    for (int64_t i = 0; i < nva; i++) {
        count[labels[i]]++;
        seen[vids1[i]]++;
        bad += labels[i] != vids1[i] / 32;
    }
    CHECK(nva == 7 && count[0] == 3 && count[1] == 2 && count[2] == 2 && bad == 0,
          "val per class %d %d %d (want round(0.3 n) = 3 2 2)", count[0], count[1], count[2]);
    int once = 0;
    for (int k = 0; k < 3; k++)
        for (int n = 0; n < per_class[k]; n++) once += seen[k * 32 + n] == 1;
    CHECK(once == 22, "every file in exactly one split (%d of 22)", once);
    h5ds_close(&ds);

    /* same seed: same val files; another seed: different ones */
    rc = prep("png", tree, "--val-fraction", "0.3", "--seed", "7", "--threads", "1", "-o", out2,
              NULL);
    CHECK(rc == 0, "png again: %s", g_log);
    CHECK(h5ds_open(&ds, out2, &e) == 0, "open: %s", e.msg);
    CHECK(read_split(&ds, "val", vids2, labels, NULL) == 7 &&
              !memcmp(vids1, vids2, 7 * sizeof(int)),
          "same seed, same val split (1 thread vs default)");
    h5ds_close(&ds);
    rc = prep("png", tree, "--val-fraction", "0.3", "--seed", "8", "-o", out3, NULL);
    CHECK(rc == 0, "png seed 8: %s", g_log);
    CHECK(h5ds_open(&ds, out3, &e) == 0, "open: %s", e.msg);
    CHECK(read_split(&ds, "val", vids2, labels, NULL) == 7 && memcmp(vids1, vids2, 7 * sizeof(int)),
          "seed 8 chose the same val files as seed 7");
    h5ds_close(&ds);

    /* existing output: refused without --force, replaced with it */
    rc = prep("png", tree, "-o", out3, NULL);
    CHECK(rc == 1 && strstr(g_log, "--force"), "existing output: rc %d\n%s", rc, g_log);
    rc = prep("png", tree, "--channels", "3", "--size", "4x3", "--force", "-o", out3, NULL);
    CHECK(rc == 0, "--force: %s", g_log);
    CHECK(h5ds_open(&ds, out3, &e) == 0 && ds.channels == 3 && ds.height == 4 && ds.width == 3 &&
              h5ds_find_split(&ds, "train")->count == 22 && !h5ds_find_split(&ds, "val"),
          "resized 3-channel output");
    h5ds_close(&ds);

    /* preview --first: size, nearest-neighbour tiles, class names, separator */
    char grid[128];
    snprintf(grid, sizeof grid, "%s/grid.png", g_dir);
    rc = prep("preview", out1, "--first", "--count", "5", "-o", grid, NULL);
    CHECK(rc == 0 && strstr(g_log, "the first 5 images"), "preview: %s", g_log);
    pngio_image im;
    CHECK(pngio_read(grid, NULL, &im, &e) == 0, "read grid: %s", e.msg);
    int s = (84 + H - 1) / H;       /* automatic scale: 11 */
    const int LH = FONT_CELL_H + 2; /* the label strip under each tile */
    int gh = 2 * (H * s + LH) + 3 * 2, gw = 3 * W * s + 4 * 2;
    CHECK(im.height == gh && im.width == gw && im.channels == 1, "grid %dx%dx%d, want %dx%dx1",
          im.height, im.width, im.channels, gh, gw);
    if (im.height == gh && im.width == gw) {
        uint8_t want[H * W], label[(FONT_CELL_H + 2) * W * 11];
        int mism = 0, lmism = 0, inked = 0;
        for (int t = 0; t < 5; t++) { /* tile t = train image t */
            image_for(ids[t], want);
            int oy = (t / 3) * (H * s + LH + 2) + 2, ox = (t % 3) * (W * s + 2) + 2;
            for (int y = 0; y < H * s; y++)
                for (int x = 0; x < W * s; x++)
                    mism += im.pixels[(oy + y) * gw + ox + x] != want[(y / s) * W + x / s];
            /* the class name, white on black, from (1, 1) of the strip */
            memset(label, 0, sizeof label);
            font_draw(label, LH, W * s, 1, 1, 1, classes[ids[t] / 32], (W * s - 1) / FONT_CELL_W,
                      255);
            for (int y = 0; y < LH; y++)
                for (int x = 0; x < W * s; x++) {
                    uint8_t got = im.pixels[(oy + H * s + y) * gw + ox + x];
                    lmism += got != label[y * W * s + x];
                    inked += got == 255;
                }
        }
        CHECK(mism == 0, "grid tiles: %d pixels differ from the scaled images", mism);
        CHECK(lmism == 0 && inked > 5 * 20,
              "class names under the tiles: %d pixels differ (%d lit)", lmism, inked);
        CHECK(im.pixels[0] == 128 && im.pixels[gw + 1] == 128 && im.pixels[(gh - 1) * gw] == 128,
              "separator");
    }
    pngio_image_free(&im);
    rc = prep("preview", out1, "--split", "val", "--seed", "3", "--count", "100", "--scale", "2",
              "-o", grid, NULL);
    CHECK(rc == 0 && strstr(g_log, "7 random images"), "preview val random: %s", g_log);
    CHECK(pngio_read(grid, NULL, &im, &e) == 0 && im.width == 3 * W * 2 + 8 &&
              im.height == 3 * (H * 2 + LH) + 8,
          "val grid %dx%d", im.height, im.width);
    pngio_image_free(&im);
    /* by default a random sample, its seed printed; the same seed repeats it */
    rc = prep("preview", out1, "--count", "5", "-o", grid, NULL);
    const char *sd = strstr(g_log, "random images (--seed ");
    CHECK(rc == 0 && sd, "preview default is random: %s", g_log);
    if (sd) {
        char seed[32], grid2[128];
        snprintf(seed, sizeof seed, "%.*s", (int)strcspn(sd + 22, ")"), sd + 22);
        snprintf(grid2, sizeof grid2, "%s/grid2.png", g_dir);
        rc = prep("preview", out1, "--count", "5", "--seed", seed, "-o", grid2, NULL);
        pngio_image a, b;
        CHECK(rc == 0 && pngio_read(grid, NULL, &a, &e) == 0 &&
                  pngio_read(grid2, NULL, &b, &e) == 0 && a.height == b.height &&
                  a.width == b.width &&
                  !memcmp(a.pixels, b.pixels, (size_t)a.height * (size_t)a.width),
              "--seed %s does not repeat the default sample: %s", seed, g_log);
        pngio_image_free(&a);
        pngio_image_free(&b);
    }
    rc = prep("preview", out1, "--first", "--seed", "3", "-o", grid, NULL);
    CHECK(rc == 2 && strstr(g_log, "--first"), "--first with --seed: rc %d %s", rc, g_log);
    rc = prep("preview", out1, "-o", "grid.jpg", NULL);
    CHECK(rc == 2 && strstr(g_log, ".png") && access("grid.jpg", F_OK) != 0,
          "output not .png: rc %d %s", rc, g_log);
    rc = prep("preview", out1, "--split", "test", "-o", grid, NULL);
    CHECK(rc == 1 && strstr(g_log, "no 'test' split (this data set has train, val)"),
          "missing split: %s", g_log);
    /* a failed write to a device reports the error and leaves the node alone
     * (it was unlinked like a partial file); needs root for mknod, else skipped */
    char dev[160];
    snprintf(dev, sizeof dev, "%s/full-dev.png", g_dir);
    if (mknod(dev, S_IFCHR | 0600, makedev(1, 7)) == 0) { /* /dev/full: writes fail */
        rc = prep("preview", out1, "--first", "--count", "5", "-o", dev, NULL);
        struct stat st;
        CHECK(rc == 1 && strstr(g_log, "full-dev"), "preview to /dev/full: rc %d %s", rc, g_log);
        CHECK(stat(dev, &st) == 0 && S_ISCHR(st.st_mode), "device node removed by preview");
        unlink(dev);
    }
}

/* Corrupt files: skipped with a warning naming file and reason; under
 * --strict an error with no output. */
/* One class directory: refused by pstrain-prep (pstrain train would refuse
 * the data set after the conversion), no output. */
static void test_one_class(void)
{
    char root[256], p[512], out[256];
    path2(root, sizeof root, g_dir, "oneclass");
    mkdir(root, 0777);
    path2(p, sizeof p, root, "cat");
    mkdir(p, 0777);
    for (int n = 0; n < 3; n++) {
        char name[32];
        snprintf(name, sizeof name, "%02d.png", n);
        write_image(p, name, n, 0);
    }
    path2(out, sizeof out, g_dir, "oneclass.h5");
    int rc = prep("png", root, "-o", out, NULL);
    CHECK(rc == 1 && strstr(g_log, "one class subdirectory ('cat'), expected at least 2"),
          "one class: exit %d: %s", rc, g_log);
    CHECK(!exists(out), "one class: %s was written", out);
}

static void test_corrupt(const char *tree)
{
    char p[512], q[512];
    path2(p, sizeof p, tree, "dog");
    uint8_t px[H * W];
    image_for(200, px);
    pt_buf good = pt_make8(W, H, 1, px);
    path2(q, sizeof q, p, "z0-empty.png");
    pt_save(q, "", 0);
    path2(q, sizeof q, p, "z1-truncated.png");
    pt_save(q, good.p, good.n / 2);
    pt_buf bad = {malloc(good.n), good.n, good.n};
    memcpy(bad.p, good.p, good.n);
    size_t idat = pt_find_idat(&bad);
    uint32_t len = (uint32_t)bad.p[idat - 8] << 24 | (uint32_t)bad.p[idat - 7] << 16 |
                   (uint32_t)bad.p[idat - 6] << 8 | bad.p[idat - 5];
    bad.p[idat + len] ^= 0xff; /* IDAT's stored CRC */
    path2(q, sizeof q, p, "z2-badcrc.png");
    pt_save(q, bad.p, bad.n);
    path2(q, sizeof q, p, "z3-text.png");
    pt_save(q, "hello, I am text\n", 17);
    memcpy(bad.p, good.p, good.n);
    pt_set_dims(&bad, 100000, 100000);
    path2(q, sizeof q, p, "z4-huge.png");
    pt_save(q, bad.p, bad.n);
    free(bad.p);
    free(good.p);

    char out[128];
    snprintf(out, sizeof out, "%s/corrupt.h5", g_dir);
    int rc = prep("png", tree, "-o", out, NULL);
    CHECK(rc == 0, "corrupt files are skipped: rc %d\n%s", rc, g_log);
    CHECK(strstr(g_log, "train 22, val 0"), "good files kept:\n%s", g_log);
    CHECK(strstr(g_log, "skipped 5 unreadable file(s)"), "skip count in summary:\n%s", g_log);
    static const char *const why[5][2] = {{"z0-empty.png", "empty"},
                                          {"z1-truncated.png", "end of file"},
                                          {"z2-badcrc.png", "CRC"},
                                          {"z3-text.png", "not a JPEG or PNG file"},
                                          {"z4-huge.png", "exceeds the limit"}};
    for (int i = 0; i < 5; i++) {
        char line[256];
        snprintf(line, sizeof line, "warning: %s/dog/%s: ", tree, why[i][0]);
        const char *w = strstr(g_log, line);
        CHECK(w && strstr(w, why[i][1]), "warning for %s with '%s'", why[i][0], why[i][1]);
        snprintf(line, sizeof line, "    %s/dog/%s: ", tree, why[i][0]);
        CHECK(strstr(g_log, line), "%s listed in the summary", why[i][0]);
    }
    h5ds ds;
    pst_err e;
    CHECK(h5ds_open(&ds, out, &e) == 0 && h5ds_find_split(&ds, "train")->count == 22,
          "skipping output: %s", e.msg);
    h5ds_close(&ds);

    /* skips in both splits: the second pass writes the right counts */
    unlink(out);
    rc = prep("png", tree, "--val-fraction", "0.5", "--seed", "1", "-o", out, NULL);
    CHECK(rc == 0 && strstr(g_log, "skipped 5 unreadable"), "skips with val: %s", g_log);
    CHECK(h5ds_open(&ds, out, &e) == 0, "open: %s", e.msg);
    const h5ds_split *tr = h5ds_find_split(&ds, "train"), *va = h5ds_find_split(&ds, "val");
    CHECK(tr && va && tr->count + va->count == 22 && va->count >= 1,
          "train %lld + val %lld != 22 readable files", tr ? (long long)tr->count : -1LL,
          va ? (long long)va->count : -1LL);
    h5ds_close(&ds);

    char sout[128];
    snprintf(sout, sizeof sout, "%s/strict.h5", g_dir);
    rc = prep("png", tree, "--strict", "-o", sout, NULL);
    CHECK(rc == 1 && strstr(g_log, "z0-empty.png") && strstr(g_log, "--strict"),
          "--strict: rc %d\n%s", rc, g_log);
    CHECK(!exists(sout), "--strict left an output file");
    /* --strict on a file whose header is fine but data are not */
    path2(q, sizeof q, p, "z0-empty.png");
    unlink(q);
    rc = prep("png", tree, "--strict", "-o", sout, NULL);
    CHECK(rc == 1 && strstr(g_log, "z1-truncated.png: unexpected end of file"),
          "--strict truncated: rc %d\n%s", rc, g_log);
    CHECK(!exists(sout), "--strict left an output file");
    /* no temporary or spool files left behind */
    DIR *d = opendir(g_dir);
    struct dirent *de;
    int leftovers = 0;
    while (d && (de = readdir(d)))
        leftovers += strstr(de->d_name, ".tmp.") || strstr(de->d_name, ".spool.");
    if (d) closedir(d);
    CHECK(leftovers == 0, "%d temporary files left", leftovers);
    /* the limit is a flag: a tiny one refuses the good files too */
    rc = prep("png", tree, "--strict", "--max-pixels", "47", "-o", sout, NULL);
    CHECK(rc == 1 && strstr(g_log, "exceeds the limit of 47"), "--max-pixels: %s", g_log);
}

static void test_sizes_and_test_dir(const char *tree)
{
    char p[512], out[128];
    snprintf(out, sizeof out, "%s/sizes.h5", g_dir);
    /* a test tree with a subset of the classes */
    char tdir[128];
    snprintf(tdir, sizeof tdir, "%s/testtree", g_dir);
    mkdir(tdir, 0777);
    path2(p, sizeof p, tdir, "zebra");
    mkdir(p, 0777);
    write_image(p, "t0.png", 90, 0);
    write_image(p, "t1.png", 91, 2);
    int rc = prep("png", tree, "--test-dir", tdir, "-o", out, NULL);
    CHECK(rc == 0 && strstr(g_log, "test 2 images"), "--test-dir: rc %d\n%s", rc, g_log);
    h5ds ds;
    pst_err e;
    int ids[64];
    int32_t labels[64];
    CHECK(h5ds_open(&ds, out, &e) == 0, "open: %s", e.msg);
    CHECK(read_split(&ds, "test", ids, labels, NULL) == 2 && labels[0] == 2 && labels[1] == 2 &&
              ids[0] == 90 && ids[1] == 91,
          "test split labels by class name");
    h5ds_close(&ds);
    unlink(out);
    path2(p, sizeof p, tdir, "wolf");
    mkdir(p, 0777);
    rc = prep("png", tree, "--test-dir", tdir, "-o", out, NULL);
    CHECK(rc == 1 && strstr(g_log, "'wolf'"), "unknown test class: %s", g_log);
    CHECK(!exists(out), "output after an error");
    /* --chunk-images 0 is refused as by idx (it silently meant the default) */
    rc = prep("png", tree, "--chunk-images", "0", "-o", out, NULL);
    CHECK(rc == 2 && strstr(g_log, "--chunk-images '0', expected an integer >= 1"),
          "--chunk-images 0: rc %d %s", rc, g_log);
    /* a test tree without any .png (e.g. a mistyped path) is an error, not a set without test */
    char edir[160];
    snprintf(edir, sizeof edir, "%s/emptytest", g_dir);
    mkdir(edir, 0777);
    rc = prep("png", tree, "--test-dir", edir, "-o", out, NULL);
    CHECK(rc == 1 && strstr(g_log, "emptytest: no image files for the test split"),
          "empty test tree: rc %d %s", rc, g_log);
    CHECK(!exists(out), "output after an error");

    /* one image of another size: an error naming it, unless --size */
    path2(p, sizeof p, tree, "zebra/99.png");
    uint8_t px[5 * 5] = {0};
    pt_buf b = pt_make8(5, 5, 1, px);
    pt_save(p, b.p, b.n);
    free(b.p);
    rc = prep("png", tree, "-o", out, NULL);
    CHECK(rc == 1 && strstr(g_log, "zebra/99.png: size 5x5") && strstr(g_log, "--size"),
          "size mismatch: %s", g_log);
    CHECK(!exists(out), "output after a size mismatch");
    rc = prep("png", tree, "--size", "8x6", "-o", out, NULL);
    CHECK(rc == 0 && strstr(g_log, "train 23"), "--size resizes the odd one: %s", g_log);
    unlink(p);
    /* usage errors */
    CHECK(prep("png", tree, NULL) == 2, "missing -o");
    CHECK(prep("png", tree, "--size", "8by6", "-o", out, NULL) == 2, "bad --size");
    CHECK(prep("png", tree, "--channels", "2", "-o", out, NULL) == 2, "bad --channels");
    CHECK(prep("png", tree, "--val-fraction", "1", "-o", out, NULL) == 2, "bad --val-fraction");
    CHECK(prep("png", "--help", NULL) == 0 && strstr(g_log, "--max-pixels"), "--help");
    snprintf(p, sizeof p, "%s/nonexistent", g_dir);
    CHECK(prep("png", p, "-o", out, NULL) == 1 && strstr(g_log, "nonexistent"), "missing DIR");
}

int main(void)
{
    g_prep = getenv("PSTRAIN_PREP");
    if (!g_prep) CHECK_SKIP("PSTRAIN_PREP not set (run through meson test)");
    snprintf(g_dir, sizeof g_dir, "/tmp/pstrain-test-png-XXXXXX");
    if (!mkdtemp(g_dir)) CHECK_SKIP("mkdtemp failed");
    char tree[128];
    snprintf(tree, sizeof tree, "%s/tree", g_dir);
    int nignored = make_tree(tree);
    test_tree(tree, nignored);
    test_sizes_and_test_dir(tree);
    test_corrupt(tree);
    test_one_class();
    if (check_failures_ == 0) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        CHECK(system(cmd) == 0, "cleanup");
    } else {
        fprintf(stderr, "files kept in %s\n", g_dir);
    }
    return check_exit();
}
