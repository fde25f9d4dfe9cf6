/* mkencoded.c - writes a small encoded (JPEG) data set for the end-to-end
 * tests, through pstrain-prep's writer (h5write) and jpg_encode:
 *
 *   mkencoded OUT.h5 NTRAIN NTEST K
 *
 * Example i of a split is an RGB JPEG (quality 90) of 20..47 x 18..51
 * pixels whose pattern depends on its label i % K (stripes at a class
 * angle, a class tint) plus per-example texture, so that a small model
 * learns something in an epoch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "h5write.h"
#include "pstrain/jpeg.h"

static void pattern(int64_t i, int k, int K, int h, int w, uint8_t *px)
{
    const double a = 3.14159265 * k / K, ca = cos(a), sa = sin(a);
    uint64_t s = (uint64_t)i * 0x9E3779B97F4A7C15ull + 1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double v = 0.5 + 0.5 * sin((x * ca + y * sa) * 0.9);
            for (int c = 0; c < 3; c++) {
                double t = 60 + 150 * v + (c == k % 3 ? 30 : 0);
                t += (double)(pst_splitmix64(&s) >> 59) - 16;
                px[((size_t)y * w + x) * 3 + c] = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
            }
        }
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: mkencoded OUT.h5 NTRAIN NTEST K\n");
        return 2;
    }
    const int64_t n[2] = {atoll(argv[2]), atoll(argv[3])};
    const int K = atoi(argv[4]);
    if (n[0] < 1 || n[1] < 0 || K < 2 || K > 1000) {
        fprintf(stderr, "mkencoded: bad sizes\n");
        return 2;
    }
    char **names = malloc(sizeof(char *) * (size_t)K);
    for (int k = 0; k < K; k++) {
        names[k] = malloc(16);
        snprintf(names[k], 16, "class%d", k);
    }
    h5w_opts o = {.storage = H5DS_STORE_ENCODED,
                  .channels = 3,
                  .num_classes = K,
                  .class_names = (const char *const *)names,
                  .encoded_chunk_bytes = 16384,
                  .compression = 1,
                  .force = true,
                  .source = "test/train/mkencoded.c"};
    pst_err e;
    h5w *w = NULL;
    int rc = h5w_create(&w, argv[1], &o, &e);
    uint8_t *px = malloc(64 * 64 * 3);
    const char *split[2] = {"train", "test"};
    for (int s = 0; s < 2 && rc == 0; s++) {
        if (!n[s]) continue;
        rc = h5w_split_begin(w, split[s], n[s], &e);
        for (int64_t i = 0; i < n[s] && rc == 0; i++) {
            const int64_t id = i + s * 1000003;
            const int h = 20 + (int)(id % 28), wd = 18 + (int)((id * 7) % 34), k = (int)(i % K);
            pattern(id, k, K, h, wd, px);
            uint8_t *jpg = NULL;
            size_t len = 0;
            rc = jpg_encode(px, wd, h, 3, 90, &jpg, &len, &e);
            if (rc == 0)
                rc = h5w_split_append_encoded(w, jpg, len, h, wd, k, s == 0 ? px : NULL,
                                              s == 0 ? (int64_t)h * wd : 0, &e);
            free(jpg);
        }
        if (rc == 0) rc = h5w_split_end(w, &e);
    }
    if (rc == 0)
        rc = h5w_commit(w, &e);
    else
        h5w_abort(w);
    if (rc < 0) fprintf(stderr, "mkencoded: %s\n", e.msg);
    free(px);
    for (int k = 0; k < K; k++) free(names[k]);
    free(names);
    return rc < 0 ? 1 : 0;
}
