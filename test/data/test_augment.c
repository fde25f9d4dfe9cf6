/* test_augment.c - augmentation (flip of a known asymmetric image, crop
 * shifts with zero padding, both together), deterministic per (seed, epoch,
 * id) whatever the threads, different across epochs; and pipe_normalize
 * against the formula in double. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "h5test.h"
#include "pstrain/pipeline.h"

enum { H = 6, W = 5, C = 3, K = 7, N = 250, CHUNK = 64, IMG = H * W * C };

/* The image of `id` cropped at offset (oy, ox) with zero padding, then
 * mirrored when `flip`: out(y, x) = in(y+oy, x'+ox), x' = flip ? W-1-x : x. */
static void expected(int64_t id, int oy, int ox, bool flip, uint8_t *out)
{
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int xs = (flip ? W - 1 - x : x) + ox, ys = y + oy;
            for (int c = 0; c < C; c++)
                out[(y * W + x) * C + c] =
                    ys < 0 || ys >= H || xs < 0 || xs >= W ? 0 : h5test_pixel(id, ys, xs, c);
        }
}

typedef struct aug_stats {
    int n, unmatched, flipped, shifted;
    int shifts[9][9]; /* how often each (oy, ox) in [-4, 4]^2 was seen */
} aug_stats;

/* Collects one epoch and identifies each image's (oy, ox, flip) among all
 * candidates with offsets in [-pad, pad]; *pixels receives every image by id. */
static void run_aug(h5ds *ds, bool crop, bool flip, int pad, int threads, int epoch,
                    uint8_t *pixels, aug_stats *st)
{
    pst_err e;
    pipe_cfg c = pipe_cfg_defaults();
    c.batch = 32;
    c.epochs = epoch + 1;
    c.first_epoch = epoch;
    c.prep_threads = threads;
    c.queue_capacity = 100;
    c.min_after_dequeue = 10;
    c.seed = 42;
    c.aug_crop = crop;
    c.aug_flip = flip;
    c.crop_pad = pad;
    c.preload_bytes = threads % 2 ? 0 : 1 << 20;
    memset(st, 0, sizeof *st);
    pipeline *p;
    if (pipe_new(&p, ds, &c, &e) < 0) {
        CHECK(0, "pipe_new: %s", e.msg);
        return;
    }
    pipe_batch b;
    uint8_t want[IMG];
    while (pipe_next(p, &b, &e) == 1) {
        for (int i = 0; i < b.count; i++) {
            const uint8_t *px = b.pixels + (size_t)i * IMG;
            int64_t id = b.ids[i];
            memcpy(pixels + id * IMG, px, IMG);
            st->n++;
            bool found = false;
            int P = crop ? pad : 0;
            /* identity first, so an image that equals itself counts as unchanged */
            for (int f = 0; f <= (flip ? 1 : 0) && !found; f++)
                for (int oy = -P; oy <= P && !found; oy++)
                    for (int ox = -P; ox <= P && !found; ox++) {
                        expected(id, oy, ox, f, want);
                        if (memcmp(want, px, IMG) == 0) {
                            found = true;
                            st->flipped += f;
                            st->shifted += oy || ox;
                            st->shifts[oy + 4][ox + 4]++;
                        }
                    }
            st->unmatched += !found;
        }
    }
    pipe_free(p);
}

static void test_augmentation(h5ds *ds)
{
    uint8_t *a = malloc(N * IMG), *b = malloc(N * IMG);
    aug_stats s, s2;

    /* flip only: every image is itself or its mirror, about half mirrored */
    run_aug(ds, false, true, 4, 2, 0, a, &s);
    CHECK(s.n == N && s.unmatched == 0, "flip: %d of %d images neither original nor mirrored",
          s.unmatched, s.n);
    CHECK(s.flipped > N / 4 && s.flipped < 3 * N / 4, "flip: %d of %d mirrored", s.flipped, N);
    CHECK(s.shifted == 0, "flip only shifted %d images", s.shifted);
    /* a mirrored image really differs (the test image is asymmetric) */
    uint8_t orig[IMG], mirror[IMG];
    expected(3, 0, 0, false, orig);
    expected(3, 0, 0, true, mirror);
    CHECK(memcmp(orig, mirror, IMG) != 0, "test image is mirror-symmetric");
    CHECK(mirror[0] == h5test_pixel(3, 0, W - 1, 0) && mirror[C] == h5test_pixel(3, 0, W - 2, 0),
          "mirror of image 3, row 0");

    /* crop only, pad 2: every image is a shifted copy with zero fill; offsets
     * cover the 5x5 range about uniformly */
    run_aug(ds, true, false, 2, 3, 0, a, &s);
    CHECK(s.n == N && s.unmatched == 0, "crop: %d of %d images are no shifted copy", s.unmatched,
          s.n);
    CHECK(s.flipped == 0, "crop only flipped %d", s.flipped);
    int distinct = 0, maxc = 0;
    for (int y = 0; y < 9; y++)
        for (int x = 0; x < 9; x++) {
            distinct += s.shifts[y][x] > 0;
            maxc = PST_MAX(maxc, s.shifts[y][x]);
            if (y < 2 || y > 6 || x < 2 || x > 6)
                CHECK(s.shifts[y][x] == 0, "crop pad 2: offset (%d, %d) seen", y - 4, x - 4);
        }
    CHECK(distinct == 25, "crop pad 2: %d distinct offsets of 25", distinct);
    CHECK(maxc < N / 8, "crop pad 2: one offset taken %d times of %d", maxc, N);
    CHECK(s.shifted > N / 2, "crop: only %d images shifted", s.shifted);

    /* both: deterministic whatever the threads and read path */
    run_aug(ds, true, true, 3, 1, 0, a, &s);
    run_aug(ds, true, true, 3, 4, 0, b, &s2);
    CHECK(s.unmatched == 0 && s2.unmatched == 0, "crop+flip: %d / %d unmatched", s.unmatched,
          s2.unmatched);
    CHECK(s.flipped > 0 && s.shifted > 0, "crop+flip: %d flipped, %d shifted", s.flipped,
          s.shifted);
    CHECK(memcmp(a, b, N * IMG) == 0, "crop+flip: 1 and 4 threads give different pixels");
    /* another epoch augments differently */
    run_aug(ds, true, true, 3, 2, 1, b, &s2);
    int same = 0;
    for (int i = 0; i < N; i++) same += memcmp(a + i * IMG, b + i * IMG, IMG) == 0;
    CHECK(same < N / 4, "epochs 0 and 1: %d of %d images augmented the same", same, N);

    /* no augmentation leaves images untouched */
    run_aug(ds, false, false, 4, 2, 0, a, &s);
    CHECK(s.n == N && s.unmatched == 0 && s.flipped == 0 && s.shifted == 0,
          "no augmentation changed images (%d unmatched, %d flipped, %d shifted)", s.unmatched,
          s.flipped, s.shifted);
    free(a);
    free(b);
}

static void test_normalize(void)
{
    const float mean[4] = {0.2860f, 0.5f, 0.1f, 0.9f}, std[4] = {0.3530f, 0.25f, 0.05f, 0.5f};
    const int64_t sizes[] = {1, 7, 37, 1000, 4099};
    unsigned s = 1;
    for (int C_ = 1; C_ <= 4; C_++)
        for (size_t k = 0; k < PST_ARRAY_LEN(sizes); k++) {
            int64_t np = sizes[k], n = np * C_;
            uint8_t *px = malloc((size_t)n);
            float *out = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) {
                s = s * 1103515245u + 12345u;
                px[i] = (uint8_t)(i < 2 ? 255 * i : (s >> 16));
            }
            pipe_normalize(px, np, C_, mean, std, out);
            double maxerr = 0;
            for (int64_t i = 0; i < n; i++) {
                int c = (int)(i % C_);
                double want = (px[i] / 255.0 - mean[c]) / std[c];
                maxerr = fmax(maxerr, fabs(out[i] - want) / (1 + fabs(want)));
            }
            CHECK(maxerr < 1e-6, "normalize C=%d n=%lld: max error %g", C_, (long long)np, maxerr);
            free(px);
            free(out);
        }
    /* a worked value: Fashion-MNIST's mean 0.2860 / std 0.3530, pixel 255:
     * (1 - 0.2860) / 0.3530 = 2.0226629 */
    uint8_t p255 = 255, p0 = 0;
    float o;
    pipe_normalize(&p255, 1, 1, mean, std, &o);
    CHECK_CLOSE(o, 2.0226629, 1e-5, 0, "normalize 255: %.7g", o);
    pipe_normalize(&p0, 1, 1, mean, std, &o);
    CHECK_CLOSE(o, -0.8101983, 1e-5, 0, "normalize 0: %.7g", o);
}

int main(void)
{
    test_normalize();
    char dir[] = "/tmp/pst-aug-XXXXXX", path[256];
    if (!mkdtemp(dir)) CHECK_SKIP("cannot create a temporary directory");
    snprintf(path, sizeof path, "%s/ds.h5", dir);
    CHECK(h5test_write(path, N, 0, H, W, C, K, CHUNK) == 0, "writing %s", path);
    h5ds ds;
    pst_err e;
    if (h5ds_open(&ds, path, &e) < 0) {
        CHECK(0, "h5ds_open: %s", e.msg);
        return check_exit();
    }
    test_augmentation(&ds);
    h5ds_close(&ds);
    unlink(path);
    rmdir(dir);
    return check_exit();
}
