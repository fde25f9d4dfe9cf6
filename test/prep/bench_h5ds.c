/*
 * bench_h5ds.c - read throughput of a data set through h5ds (prints numbers;
 * not a test): whole chunks in file order, whole chunks in a shuffled order
 * (what the input pipeline does each epoch), and single images at random
 * positions (served by h5ds's chunk cache).
 *
 *   bench_h5ds FILE.h5 [--split train] [--random N]
 */
#include <stdlib.h>
#include <string.h>

#include "pstrain/common.h"
#include "pstrain/h5ds.h"

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *split = "train";
    int64_t nrandom = 20000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--split") && i + 1 < argc)
            split = argv[++i];
        else if (!strcmp(argv[i], "--random") && i + 1 < argc)
            nrandom = atoll(argv[++i]);
        else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: bench_h5ds FILE.h5 [--split train] [--random N]\n");
        return 2;
    }
    h5ds ds;
    pst_err e;
    double t = pst_now();
    if (h5ds_open(&ds, path, &e) < 0) {
        fprintf(stderr, "bench_h5ds: %s\n", e.msg);
        return 1;
    }
    printf("h5ds_open (verify included): %.3f s\n", pst_now() - t);
    const h5ds_split *sp = h5ds_find_split(&ds, split);
    if (!sp) {
        fprintf(stderr, "bench_h5ds: no split %s\n", split);
        return 1;
    }
    size_t img = (size_t)ds.height * (size_t)ds.width * (size_t)ds.channels;
    int64_t n = sp->count, chunk = sp->chunk_images, nchunks = (n + chunk - 1) / chunk;
    uint8_t *buf = pst_malloc((size_t)chunk * img);
    int32_t *lab = pst_malloc((size_t)chunk * sizeof *lab);
    int64_t *order = pst_malloc((size_t)nchunks * sizeof *order);
    uint64_t seed = 42, checksum = 0;
    for (int64_t i = 0; i < nchunks; i++) order[i] = i;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int64_t i = nchunks - 1; i > 0; i--) {
                int64_t j = (int64_t)(rng_next(&seed) % (uint64_t)(i + 1)), tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
            }
        t = pst_now();
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t first = order[c] * chunk, cnt = PST_MIN(chunk, n - first);
            if (h5ds_read(&ds, split, first, cnt, buf, lab, &e) < 0) {
                fprintf(stderr, "bench_h5ds: %s\n", e.msg);
                return 1;
            }
            checksum += buf[0] + (uint64_t)lab[0];
        }
        double s = pst_now() - t;
        printf("whole chunks, %-9s %lld images in %.3f s: %.0f images/s, %.0f MB/s\n",
               pass ? "shuffled:" : "in order:", (long long)n, s, (double)n / s,
               (double)n * (double)img / s / 1e6);
    }
    t = pst_now();
    for (int64_t i = 0; i < nrandom; i++) {
        int64_t at = (int64_t)(rng_next(&seed) % (uint64_t)n);
        if (h5ds_read(&ds, split, at, 1, buf, lab, &e) < 0) {
            fprintf(stderr, "bench_h5ds: %s\n", e.msg);
            return 1;
        }
        checksum += buf[0];
    }
    double s = pst_now() - t;
    printf("single images at random:  %lld reads in %.3f s: %.0f images/s (%.1f us each)\n",
           (long long)nrandom, s, (double)nrandom / s, 1e6 * s / (double)nrandom);
    printf("(checksum %llu)\n", (unsigned long long)checksum);
    free(buf);
    free(lab);
    free(order);
    h5ds_close(&ds);
    return 0;
}
