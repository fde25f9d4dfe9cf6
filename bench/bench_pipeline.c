/* bench_pipeline.c - throughput of the input pipeline (not a test).
 *
 *   bench_pipeline DATA.h5 [epochs] [batch]
 *
 * For 1 and 2 prep threads, without and with augmentation (crop+flip), from
 * a preloaded split and streaming from HDF5: batches/s and images/s of a
 * consumer that only touches each batch, over `epochs` epochs (default 2)
 * of the train split, including start-up (preload); also images/s after the
 * first batch (steady state) and the time pipe_new took. Then pipe_normalize's
 * images/s. The root rank must feed workers far faster than they consume. */
#include <stdio.h>
#include <stdlib.h>

#include "pstrain/common.h"
#include "pstrain/pipeline.h"

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s DATA.h5 [epochs] [batch]\n", argv[0]);
        return 2;
    }
    int epochs = 2, batch = 64;
    if ((argc > 2 && (pst_parse_int(argv[2], &epochs) < 0 || epochs < 1)) ||
        (argc > 3 && (pst_parse_int(argv[3], &batch) < 0 || batch < 1))) {
        fprintf(stderr, "%s: epochs and batch must be positive integers\n", argv[0]);
        return 2;
    }
    h5ds ds;
    pst_err e;
    if (h5ds_open(&ds, argv[1], &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    const size_t img = (size_t)ds.height * ds.width * ds.channels;
    printf("%-10s %-8s %-10s %10s %12s %12s %8s\n", "read", "threads", "augment", "batches/s",
           "images/s", "steady img/s", "start s");
    unsigned sink = 0;
    for (int stream = 0; stream < 2; stream++)
        for (int aug = 0; aug < 2; aug++)
            for (int threads = 1; threads <= 2; threads++) {
                pipe_cfg c = pipe_cfg_defaults();
                c.batch = batch;
                c.epochs = epochs;
                c.prep_threads = threads;
                c.aug_crop = c.aug_flip = aug;
                c.preload_bytes = stream ? 0 : c.preload_bytes;
                double t0 = pst_now();
                pipeline *p;
                if (pipe_new(&p, &ds, &c, &e) < 0) {
                    fprintf(stderr, "%s\n", e.msg);
                    return 1;
                }
                double t_new = pst_now() - t0, t_first = 0;
                pipe_batch b;
                int64_t nb = 0, ni = 0;
                int rc;
                while ((rc = pipe_next(p, &b, &e)) == 1) {
                    if (!nb) t_first = pst_now();
                    nb++;
                    ni += b.count;
                    sink += b.pixels[(size_t)(b.count - 1) * img] + (unsigned)b.labels[0];
                }
                double dt = pst_now() - t0;
                pipe_free(p);
                if (rc < 0) {
                    fprintf(stderr, "%s\n", e.msg);
                    return 1;
                }
                double steady = (ni - b.count) / (t0 + dt - t_first);
                printf("%-10s %-8d %-10s %10.0f %12.0f %12.0f %8.3f\n",
                       stream ? "streaming" : "preload", threads, aug ? "crop,flip" : "none",
                       nb / dt, ni / dt, steady, t_new);
            }
    /* normalisation, as a worker does per batch */
    const int64_t n_img = 4096;
    uint8_t *px = malloc(img * (size_t)n_img);
    float *out = pst_aligned_alloc(sizeof(float) * img * (size_t)n_img);
    for (size_t i = 0; i < img * (size_t)n_img; i++) px[i] = (uint8_t)(i * 7);
    int reps = 50;
    double t0 = pst_now();
    for (int r = 0; r < reps; r++) {
        pipe_normalize(px, n_img * (int64_t)(img / (size_t)ds.channels), ds.channels, ds.mean,
                       ds.std, out);
        sink += (unsigned)out[r];
    }
    double dt = pst_now() - t0;
    printf("pipe_normalize: %.0f images/s\n", (double)reps * n_img / dt);
    free(px);
    free(out);
    h5ds_close(&ds);
    return sink == 0xdeadbeef; /* keeps the work observable */
}
