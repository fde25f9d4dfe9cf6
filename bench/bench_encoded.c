/*
 * bench_encoded.c - the storage layer of encoded data sets (prints numbers;
 * not a test): writing N images of about S bytes each through
 * h5w_split_append_encoded (the bytes are random, so nothing would compress;
 * mean/std from a 1-pixel stand-in per image), then reading them back with
 * h5ds_read_encoded in runs of chunk_images (in file order and in a shuffled
 * order), and single images at random. Wall and CPU time (getrusage, this
 * process), since the machine may be shared.
 *
 *   bench_encoded OUT.h5 [--images N] [--bytes S]   (default 20000 x 110000)
 */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "h5write.h"
#include "pstrain/common.h"
#include "pstrain/h5ds.h"

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static void report(const char *what, int64_t n, double bytes, double wall, double cpu)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%-28s %lld images, %.0f MB: %.2f s wall (%.0f MB/s, %.0f images/s), %.2f s CPU "
           "(%.0f MB/s per core); peak RSS so far %.0f MB\n",
           what, (long long)n, bytes / 1e6, wall, bytes / 1e6 / wall, (double)n / wall, cpu,
           bytes / 1e6 / cpu, (double)ru.ru_maxrss / 1024);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int64_t n = 20000, size = 110000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--images") && i + 1 < argc)
            n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            size = atoll(argv[++i]);
        else
            path = argv[i];
    }
    if (!path || n < 1 || size < 16) {
        fprintf(stderr, "usage: bench_encoded OUT.h5 [--images N] [--bytes S]\n");
        return 2;
    }
    static const char *const names[2] = {"a", "b"};
    h5w_opts o = {.storage = H5DS_STORE_ENCODED,
                  .channels = 3,
                  .num_classes = 2,
                  .class_names = names,
                  .force = true,
                  .source = "bench_encoded"};
    pst_err e;
    h5w *w;
    uint64_t seed = 7;
    uint8_t *img = pst_malloc((size_t)(2 * size)), px[3] = {1, 2, 3};
    for (int64_t j = 0; j < 2 * size; j++) img[j] = (uint8_t)rng_next(&seed);
    double bytes = 0, t = pst_now(), c = cpu_s();
    if (h5w_create(&w, path, &o, &e) < 0 || h5w_split_begin(w, "train", n, &e) < 0) goto fail;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = size / 2 + (int64_t)(rng_next(&seed) % (uint64_t)size); /* mean ~ size */
        int64_t at = (int64_t)(rng_next(&seed) % (uint64_t)(2 * size - len));
        if (h5w_split_append_encoded(w, img + at, (size_t)len, 480, 640, (int32_t)(i % 2), px, 1,
                                     &e) < 0)
            goto fail;
        bytes += (double)len;
    }
    if (h5w_split_end(w, &e) < 0 || h5w_commit(w, &e) < 0) goto fail;
    report("write (incl. fsync):", n, bytes, pst_now() - t, cpu_s() - c);

    h5ds ds;
    t = pst_now(), c = cpu_s();
    if (h5ds_open(&ds, path, &e) < 0) goto fail;
    printf("h5ds_open (verify included): %.3f s wall, %.3f s CPU\n", pst_now() - t, cpu_s() - c);
    const h5ds_split *sp = h5ds_find_split(&ds, "train");
    int64_t chunk = sp->chunk_images, nruns = (n + chunk - 1) / chunk, maxrun = 0;
    int64_t *off = pst_malloc((size_t)(n + 1) * sizeof *off);
    if (h5ds_read_encoded(&ds, "train", 0, n, off, NULL, 0, NULL, NULL, NULL, &e) < 0) goto fail;
    for (int64_t r = 0; r < nruns; r++) {
        int64_t a = r * chunk, b = PST_MIN(n, a + chunk);
        maxrun = PST_MAX(maxrun, off[b] - off[a]);
    }
    size_t cap = (size_t)PST_MAX(maxrun, 4 * size);
    uint8_t *buf = pst_malloc(cap);
    int64_t *order = pst_malloc((size_t)nruns * sizeof *order);
    uint64_t sum = 0;
    for (int64_t r = 0; r < nruns; r++) order[r] = r;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int64_t r = nruns - 1; r > 0; r--) {
                int64_t j = (int64_t)(rng_next(&seed) % (uint64_t)(r + 1)), tmp = order[r];
                order[r] = order[j];
                order[j] = tmp;
            }
        t = pst_now(), c = cpu_s();
        for (int64_t r = 0; r < nruns; r++) {
            int64_t a = order[r] * chunk, cnt = PST_MIN(chunk, n - a), ro[4096 + 1];
            if (cnt > 4096) cnt = 4096;
            if (h5ds_read_encoded(&ds, "train", a, cnt, ro, buf, cap, NULL, NULL, NULL, &e) < 0)
                goto fail;
            sum += buf[0];
        }
        char what[64];
        snprintf(what, sizeof what, "read runs of %lld, %s", (long long)chunk,
                 pass ? "shuffled:" : "in order:");
        report(what, n, bytes, pst_now() - t, cpu_s() - c);
    }
    int64_t nr = PST_MIN(n, (int64_t)5000);
    double rb = 0;
    t = pst_now(), c = cpu_s();
    for (int64_t i = 0; i < nr; i++) {
        int64_t at = (int64_t)(rng_next(&seed) % (uint64_t)n), ro[2];
        if (h5ds_read_encoded(&ds, "train", at, 1, ro, buf, cap, NULL, NULL, NULL, &e) < 0)
            goto fail;
        rb += (double)ro[1];
        sum += buf[0];
    }
    report("single images at random:", nr, rb, pst_now() - t, cpu_s() - c);
    printf("(checksum %llu)\n", (unsigned long long)sum);
    h5ds_close(&ds);
    free(buf);
    free(off);
    free(order);
    free(img);
    return 0;
fail:
    fprintf(stderr, "bench_encoded: %s\n", e.msg);
    return 1;
}
