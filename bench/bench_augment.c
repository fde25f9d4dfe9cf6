/* bench_augment.c - decode + preprocessing per core (not a test).
 *
 *   bench_augment DIR [size] [reps]
 *
 * Reads every .jpg/.JPEG in DIR into memory, then times, by this thread's CPU
 * time (CLOCK_THREAD_CPUTIME_ID: what one prep thread costs, whatever else
 * the machine runs), `reps` passes (default 3) over the files of:
 *   - jpg_decode of the whole image (the decode alone, for reference),
 *   - aug_from_jpeg for each recipe, train and eval, to size x size
 *     (default 299: Inception-v3's input),
 *   - jpg_decode + aug_from_pixels (inception train): what the partial,
 *     DCT-scaled decode saves.
 * Prints images/s per core. jobs/bench-augment.sh runs it beside the PIL +
 * torchvision peer (jobs/bench_augment_peer.py). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pstrain/augment.h"
#include "pstrain/common.h"
#include "pstrain/jpeg.h"

typedef struct blob {
    uint8_t *b;
    size_t n;
} blob;

static int is_jpeg_name(const char *s)
{
    const char *dot = strrchr(s, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int load(const char *dir, blob **out)
{
    DIR *d = opendir(dir);
    if (!d) pst_die("%s: cannot open the directory", dir);
    int n = 0, cap = 0;
    blob *v = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_jpeg_name(de->d_name)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) pst_die("%s: cannot open", path);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (len <= 0) pst_die("%s: empty", path);
        if (n == cap) v = pst_realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
        v[n].b = pst_malloc((size_t)len);
        v[n].n = fread(v[n].b, 1, (size_t)len, f);
        fclose(f);
        if (v[n].n != (size_t)len) pst_die("%s: short read", path);
        n++;
    }
    closedir(d);
    if (!n) pst_die("%s: no .jpg/.JPEG files", dir);
    *out = v;
    return n;
}

enum { MODE_DECODE = -1, MODE_DECODE_PIXELS = -2 };

/* images/s per core of `mode` (a recipe, or one of MODE_*) over reps passes */
static double run(int mode, bool train, const blob *v, int n, int reps, int size)
{
    aug_scratch *s = aug_scratch_new();
    uint8_t *out = pst_malloc((size_t)size * size * 3);
    pst_err e;
    double t0 = 0;
    for (int r = -1; r < reps; r++) { /* pass -1 warms the scratch and caches */
        if (r == 0) t0 = pst_thread_cpu();
        for (int i = 0; i < n; i++) {
            const uint64_t h = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)i;
            if (mode < 0) {
                uint8_t *px;
                int w, hh;
                if (jpg_decode(v[i].b, v[i].n, 3, 0, &px, &w, &hh, &e) < 0) pst_die("%s", e.msg);
                if (mode == MODE_DECODE_PIXELS)
                    aug_from_pixels(AUG_INCEPTION, true, h, px, hh, w, 3, size, size, out, s);
                free(px);
            } else if (aug_from_jpeg(mode, train, h, v[i].b, v[i].n, 3, size, size, out, s, &e) <
                       0) {
                pst_die("%s", e.msg);
            }
        }
    }
    const double t = pst_thread_cpu() - t0;
    free(out);
    aug_scratch_free(s);
    return (double)n * reps / t;
}

int main(int argc, char **argv)
{
    pst_set_progname("bench_augment");
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s DIR [size] [reps]\n", argv[0]);
        return 2;
    }
    int size = 299, reps = 3;
    if ((argc > 2 && (pst_parse_int(argv[2], &size) < 0 || size < 1)) ||
        (argc > 3 && (pst_parse_int(argv[3], &reps) < 0 || reps < 1))) {
        fprintf(stderr, "%s: size and reps must be positive integers\n", argv[0]);
        return 2;
    }
    blob *v;
    const int n = load(argv[1], &v);
    size_t bytes = 0;
    double pixels = 0;
    for (int i = 0; i < n; i++) {
        jpg_info info;
        pst_err e;
        if (jpg_read_info(v[i].b, v[i].n, &info, &e) < 0) pst_die("%s", e.msg);
        bytes += v[i].n;
        pixels += (double)info.width * info.height;
    }
    printf("pstrain: %d JPEGs x %d, mean %.0f KiB and %.0f kpixels, output %dx%dx3, thread CPU "
           "time\n",
           n, reps, bytes / 1024.0 / n, pixels / 1000 / n, size, size);
    static const struct {
        const char *name;
        int mode;
        bool train;
    } modes[] = {
        {"decode only (whole image)", MODE_DECODE, false},
        {"decode + inception train", AUG_INCEPTION, true},
        {"decode + inception eval", AUG_INCEPTION, false},
        {"decode + resnet train", AUG_RESNET, true},
        {"decode + resnet eval", AUG_RESNET, false},
        {"decode + resize", AUG_RESIZE, false},
        {"whole decode, then inception train", MODE_DECODE_PIXELS, true},
    };
    for (size_t m = 0; m < PST_ARRAY_LEN(modes); m++)
        printf("%-36s %8.1f images/s per core\n", modes[m].name,
               run(modes[m].mode, modes[m].train, v, n, reps, size));
    for (int i = 0; i < n; i++) free(v[i].b);
    free(v);
    return 0;
}
