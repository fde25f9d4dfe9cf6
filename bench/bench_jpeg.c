/* bench_jpeg.c - decode speed of src/data/jpeg.c per core (a benchmark, not a
 * test): a photo-like 500x375 JPEG at quality 90, 4:2:0 (a typical ImageNet
 * image), decoded whole (jpg_decode, RGB) and as Inception's training crop
 * would decode it (jpg_decode_region of a random rectangle of 5-100% of the
 * area, aspect 3/4..4/3, DCT-scaled for a 299x299 output). Times are the
 * calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so other load on the
 * machine does not count; megapixels are of the source image.
 *
 *   bench_jpeg [seconds per case] [WxH] [OUT.jpg]
 * OUT.jpg receives the image (to time other decoders on the same bytes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "jpeg/jpegfix.h"
#include "pstrain/common.h"
#include "pstrain/jpeg.h"

static uint32_t rng = 88172645u;
static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return (rng >> 8) / 16777216.0;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    int W = 500, H = 375;
    if (argc > 2 && sscanf(argv[2], "%dx%d", &W, &H) != 2) {
        fprintf(stderr, "usage: bench_jpeg [seconds] [WxH] [OUT.jpg]\n");
        return 2;
    }
    jf_spec sp = {"bench", W, H, 3, JCS_YCbCr, 2, 2, false, false, false, false, 0, 90};
    size_t n;
    uint8_t *jpg = jf_write(&sp, &n);
    if (!jpg) return 1;
    if (argc > 3) {
        FILE *f = fopen(argv[3], "wb");
        if (!f || fwrite(jpg, 1, n, f) != n || fclose(f) != 0) {
            perror(argv[3]);
            return 1;
        }
    }
    printf("image %dx%d, q90 4:2:0 baseline, %zu bytes; thread CPU time\n", W, H, n);
    double mp = W * (double)H / 1e6;
    pst_err e;

    /* whole image */
    int iters = 0;
    double t0 = pst_thread_cpu(), t;
    do {
        uint8_t *px;
        int w, h;
        if (jpg_decode(jpg, n, 3, 0, &px, &w, &h, &e) < 0) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        free(px);
        iters++;
    } while ((t = pst_thread_cpu() - t0) < secs);
    printf("%-34s %8.1f images/s  %7.1f MP/s per core\n", "jpg_decode (whole, RGB)", iters / t,
           iters * mp / t);

    /* Inception-style random crops to 299x299 */
    jpg_region r = {0};
    int hist[9] = {0};
    iters = 0;
    t0 = pst_thread_cpu();
    do {
        double area = (0.05 + 0.95 * uniform()) * W * H;
        double ar = exp(log(0.75) + (log(4.0 / 3) - log(0.75)) * uniform());
        int cw = (int)lround(sqrt(area * ar)), ch = (int)lround(sqrt(area / ar));
        if (cw > W) cw = W;
        if (ch > H) ch = H;
        if (cw < 1) cw = 1;
        if (ch < 1) ch = 1;
        int x = (int)(uniform() * (W - cw + 1)), y = (int)(uniform() * (H - ch + 1));
        if (jpg_decode_region(jpg, n, 3, x, y, cw, ch, 299, 299, 0, &r, &e) < 0) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        hist[r.scale_num]++;
        iters++;
    } while ((t = pst_thread_cpu() - t0) < secs);
    printf("%-34s %8.1f images/s  %7.1f MP/s per core (source MP)\n",
           "jpg_decode_region (crop, 299)", iters / t, iters * mp / t);
    printf("scales chosen:");
    for (int s = 1; s <= 8; s++)
        if (hist[s]) printf(" %d/8: %.0f%%", s, 100.0 * hist[s] / iters);
    printf("\n");

    /* a central 87.5% crop at a small output (DCT scaling does the most) */
    iters = 0;
    t0 = pst_thread_cpu();
    do {
        int cw = W * 7 / 8, ch = H * 7 / 8;
        if (jpg_decode_region(jpg, n, 3, (W - cw) / 2, (H - ch) / 2, cw, ch, 112, 112, 0, &r, &e) <
            0) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        iters++;
    } while ((t = pst_thread_cpu() - t0) < secs);
    printf("%-34s %8.1f images/s  %7.1f MP/s per core (source MP), scale %d/8\n",
           "jpg_decode_region (87.5%, 112)", iters / t, iters * mp / t, r.scale_num);

    /* each DCT scale on the whole image (a 8-aligned rectangle: min sizes of
     * exactly s/8 of it select s) */
    int aw = W / 8 * 8, ah = H / 8 * 8;
    for (int s = 1; s <= 8 && aw && ah; s++) {
        iters = 0;
        t0 = pst_thread_cpu();
        do {
            if (jpg_decode_region(jpg, n, 3, 0, 0, aw, ah, aw * s / 8, ah * s / 8, 0, &r, &e) < 0) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            iters++;
        } while ((t = pst_thread_cpu() - t0) < secs / 4);
        printf("whole image at scale %d/8 (%4dx%-4d) %8.1f images/s  %7.1f MP/s per core (source "
               "MP)\n",
               r.scale_num, r.w, r.h, iters / t, iters * mp / t);
    }
    jpg_region_free(&r);
    free(jpg);
    return 0;
}
