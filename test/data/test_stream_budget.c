/* test_stream_budget.c - data larger than memory (issue 10): an encoded data
 * set of random 128x128x3 JPEGs several times larger than the pipeline's
 * --memory-budget is streamed for one epoch with the inception recipe; the
 * split is not preloaded, every example arrives exactly once, and the
 * process's peak RSS (getrusage) stays within
 *     baseline + budget + PIPE_SLACK
 * where baseline is the peak RSS after opening the data set (libraries,
 * HDF5's metadata) and PIPE_SLACK covers what the budget does not plan:
 * thread stacks, malloc's per-thread arenas, the small chunk caches of the
 * index datasets. (Reading /<split>/encoded through HDF5 1.10's chunk
 * cache instead of H5Dread_chunk grew the peak by 150 MiB here.) The run happens in a fresh process
 * (this program re-executed) so that writing the data set does not count.
 *
 *   test_stream_budget [DIR]            writes DIR/big.h5 (default: a temporary directory)
 *   test_stream_budget --child FILE BUDGET
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "h5write.h"
#include "pstrain/augment.h"
#include "pstrain/jpeg.h"
#include "pstrain/pipeline.h"

enum { NIMG = 12000, SIDE = 128, C = 3, K = 10, DISTINCT = 48, OUT = 64 };
#define BUDGET ((int64_t)48 << 20)
#define PIPE_SLACK ((int64_t)24 << 20)

static int64_t peak_rss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_maxrss * 1024; /* Linux: KiB */
}

/* NIMG JPEGs of random noise (DISTINCT different ones, cycled; the ids make
 * the examples distinct for the exactly-once check). Returns the bytes
 * written, or -1. */
static int64_t write_big(const char *path)
{
    static const char *const names[K] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
    h5w_opts o = {.storage = H5DS_STORE_ENCODED,
                  .channels = C,
                  .num_classes = K,
                  .class_names = names,
                  .compression = 1,
                  .force = true,
                  .source = "test_stream_budget"};
    pst_err e;
    h5w *w = NULL;
    if (h5w_create(&w, path, &o, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    uint8_t *jpg[DISTINCT] = {0};
    size_t len[DISTINCT];
    uint8_t *px = malloc((size_t)SIDE * SIDE * C);
    uint64_t s = 42;
    int rc = 0;
    for (int d = 0; d < DISTINCT && rc == 0; d++) {
        for (size_t i = 0; i < (size_t)SIDE * SIDE * C; i++)
            px[i] = (uint8_t)(pst_splitmix64(&s) >> 56);
        rc = jpg_encode(px, SIDE, SIDE, C, 95, &jpg[d], &len[d], &e);
    }
    int64_t total = 0;
    if (rc == 0) rc = h5w_split_begin(w, "train", NIMG, &e);
    for (int64_t i = 0; i < NIMG && rc == 0; i++) {
        const int d = (int)(i % DISTINCT);
        rc = h5w_split_append_encoded(w, jpg[d], len[d], SIDE, SIDE, (int32_t)(i % K), px, 64, &e);
        total += (int64_t)len[d];
    }
    if (rc == 0) rc = h5w_split_end(w, &e);
    for (int d = 0; d < DISTINCT; d++) free(jpg[d]);
    free(px);
    if (rc < 0) {
        h5w_abort(w);
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    if (h5w_commit(w, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    return total;
}

static int child(const char *path, int64_t budget)
{
    pst_err e;
    h5ds ds;
    if (h5ds_open(&ds, path, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    const int64_t base = peak_rss();
    pipe_cfg c = pipe_cfg_defaults();
    c.batch = 64;
    c.epochs = 1;
    c.prep_threads = 2;
    c.recipe = AUG_INCEPTION;
    c.out_h = c.out_w = OUT;
    c.memory_budget = budget;
    c.preload_bytes = (int64_t)1 << 40; /* only the budget may keep it from preloading */
    pipeline *p;
    if (pipe_new(&p, &ds, &c, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    pipe_info info;
    pipe_get_info(p, &info);
    const int64_t n = pipe_examples_per_epoch(p);
    unsigned char *seen = calloc((size_t)n, 1);
    int64_t got = 0, dup = 0, bad_label = 0;
    pipe_batch b;
    int rc;
    while ((rc = pipe_next(p, &b, &e)) == 1)
        for (int i = 0; i < b.count; i++, got++) {
            const int64_t id = b.ids[i];
            if (id < 0 || id >= n || seen[id]++) dup++;
            if (b.labels[i] != id % K) bad_label++;
        }
    pipe_free(p);
    const int64_t peak = peak_rss();
    int64_t missing = 0;
    for (int64_t i = 0; i < n; i++) missing += !seen[i];
    free(seen);
    char s[6][32];
    printf("split %s on disk, budget %s, planned %s (queue %d), %d readers; peak RSS %s, "
           "baseline %s, growth %s\n",
           pipe_fmt_size(ds.splits[0].encoded_bytes, s[0]), pipe_fmt_size(budget, s[1]),
           pipe_fmt_size(info.planned, s[2]), info.queue_capacity, info.readers,
           pipe_fmt_size(peak, s[3]), pipe_fmt_size(base, s[4]), pipe_fmt_size(peak - base, s[5]));
    CHECK(rc == 0, "pipe_next: %s", rc < 0 ? e.msg : "");
    CHECK(!info.preloaded, "a split of %lld bytes was preloaded within a %lld-byte budget",
          (long long)ds.splits[0].encoded_bytes, (long long)budget);
    CHECK(ds.splits[0].encoded_bytes > 4 * budget,
          "the data set (%lld bytes) is not larger than "
          "4x the budget",
          (long long)ds.splits[0].encoded_bytes);
    CHECK(info.planned <= budget, "planned %lld over the budget", (long long)info.planned);
    CHECK(got == n && dup == 0 && missing == 0 && bad_label == 0,
          "%lld examples of %lld: %lld duplicates, %lld missing, %lld wrong labels", (long long)got,
          (long long)n, (long long)dup, (long long)missing, (long long)bad_label);
    CHECK(peak <= base + budget + PIPE_SLACK,
          "peak RSS %lld > baseline %lld + budget %lld + slack %lld", (long long)peak,
          (long long)base, (long long)budget, (long long)PIPE_SLACK);
    h5ds_close(&ds);
    return check_exit();
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--child")) return child(argv[2], atoll(argv[3]));
    char tmpl[] = "/tmp/pst_budget_XXXXXX", path[4096];
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmpl);
    if (!dir) return 1;
    snprintf(path, sizeof path, "%s/big.h5", dir);
    int64_t bytes = write_big(path);
    CHECK(bytes > 0, "writing %s", path);
    if (bytes > 0) {
        char budget[32];
        snprintf(budget, sizeof budget, "%lld", (long long)BUDGET);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", argv[0], "--child", path, budget, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the streaming run failed (status %d)", st);
    }
    if (!getenv("KEEP_DATA")) unlink(path);
    if (argc <= 1) rmdir(dir);
    return check_exit();
}
