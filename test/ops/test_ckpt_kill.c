/* test_ckpt_kill.c - a checkpoint survives kill -9 at any moment.
 *
 * A child process resumes from the newest good checkpoint in a directory
 * and writes checkpoints in a loop (ckpt_save, keep 2), each one's values a
 * function of its step. The parent SIGKILLs it after a random delay
 * (uniform over a few write durations, so most kills land inside a write,
 * the latest-pointer update or the pruning) and then checks that
 * ckpt_find_latest returns a checkpoint that loads, whose every parameter
 * and slot is the value of its step, that the step never goes back, and
 * that every ckpt-<step>.h5 in the directory verifies (none half-written).
 * Repeated ITER times.
 *
 * The kill delays come from a seed, printed at the start: a failure is
 * replayed with `test_ckpt_kill SEED` or CKPT_KILL_SEED=SEED (the delays
 * are multiples of the measured duration of one save, so the replay kills
 * at the same points of the write sequence as closely as timing allows).
 * Without either, the seed is drawn from the clock and the PID. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "ops_util.h"

#define ITER 40
#define MAXV 16

static nn_var g_vars[MAXV];
static int g_nvars;
static size_t g_total;

static ckpt_meta meta_for(int64_t step)
{
    ckpt_meta m = {0};
    m.model_name = "toy";
    m.model_text = "toy model";
    m.mode = "sync";
    m.height = m.width = 28, m.channels = 1, m.num_classes = 10; /* in range (ckpt.h limits) */
    m.workers = 1, m.batch = 64;
    m.global_step = step;
    m.next_batch = step;
    m.opt = opt_defaults(OPT_MOMENTUM);
    return m;
}

/* The child: resume, then write forever. */
static void writer(const char *dir, float *params, float *slots)
{
    char path[4096];
    pst_err e;
    int64_t step = 0;
    int rc = ckpt_find_latest(dir, path, sizeof path, &e);
    if (rc < 0) _exit(2);
    if (rc == 1) {
        ckpt_meta m;
        ckpt_expect x = {.vars = g_vars, .nvars = g_nvars};
        if (ckpt_read(path, &x, params, slots, g_total, &m, &e) < 0) _exit(3);
        step = m.global_step;
        ckpt_meta_free(&m);
    }
    for (;;) {
        step++;
        ops_fill(params, g_total, (uint64_t)step);
        ops_fill(slots, g_total, (uint64_t)step + 1000000);
        ckpt_meta m = meta_for(step);
        if (ckpt_save(dir, 2, &m, g_vars, g_nvars, params, slots, g_total, NULL, 0, &e) < 0) {
            fprintf(stderr, "writer: %s\n", e.msg);
            _exit(4);
        }
    }
}

/* Loads the newest checkpoint and checks its contents; returns its step,
 * 0 if there is none, -1 on a failure. */
static int64_t check_latest(const char *dir, float *params, float *slots)
{
    char path[4096];
    pst_err e;
    int rc = ckpt_find_latest(dir, path, sizeof path, &e);
    if (rc <= 0) return rc;
    ckpt_meta m;
    ckpt_expect x = {.vars = g_vars, .nvars = g_nvars, .check_opt = true, .opt_kind = OPT_MOMENTUM};
    if (ckpt_read(path, &x, params, slots, g_total, &m, &e) < 0) {
        CHECK(0, "latest %s does not load: %s", path, e.msg);
        return -1;
    }
    int64_t step = m.global_step;
    ckpt_meta_free(&m);
    char want[4096];
    ckpt_path(want, sizeof want, dir, step);
    CHECK(!strcmp(path, want), "file %s holds step %lld", path, (long long)step);
    size_t bad = 0;
    for (size_t j = 0; j < g_total; j++) bad += params[j] != ops_value((uint64_t)step, j);
    for (int i = 0; i < g_nvars; i++) { /* slots are kept for trainable variables only */
        const nn_var *v = &g_vars[i];
        for (size_t j = v->offset; v->trainable && j < v->offset + v->size; j++)
            bad += slots[j] != ops_value((uint64_t)step + 1000000, j);
    }
    CHECK(bad == 0, "%s: %zu values differ from step %lld's", path, bad, (long long)step);
    return bad ? -1 : step;
}

static int has_temp(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) n += de->d_name[0] == '.' && strstr(de->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* The atomicity guarantee itself: every file under a final name is whole. */
static int half_written(const char *dir)
{
    DIR *d = opendir(dir);
    int bad = 0;
    struct dirent *de;
    char p[4096];
    pst_err e;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "ckpt-", 5)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (ckpt_verify(p, &e) < 0) {
            fprintf(stderr, "half-written: %s\n", e.msg);
            bad++;
        }
    }
    if (d) closedir(d);
    return bad;
}

/* The seed of the kill delays: argv[1], else $CKPT_KILL_SEED, else the clock
 * and the PID. Exits 2 on a seed that is not a non-negative integer. */
static unsigned kill_seed(int argc, char **argv)
{
    const char *arg = argc > 1 ? argv[1] : getenv("CKPT_KILL_SEED");
    if (!arg || !*arg) return (unsigned)time(NULL) ^ (unsigned)getpid();
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(arg, &end, 10);
    if (errno || *end || arg[0] == '-' || v > UINT_MAX) {
        fprintf(stderr, "test_ckpt_kill: seed '%s': expected an integer 0..%u\n", arg, UINT_MAX);
        exit(2);
    }
    return (unsigned)v;
}

int main(int argc, char **argv)
{
    const unsigned seed = kill_seed(argc, argv);
    fprintf(stderr, "seed %u (replay: test_ckpt_kill %u, or CKPT_KILL_SEED=%u)\n", seed, seed,
            seed);
    g_nvars = ops_vars(g_vars, 40, &g_total); /* ~0.9 MB of parameters, same of slots */
    float *params = malloc(g_total * sizeof(float)), *slots = malloc(g_total * sizeof(float));
    char dir[512];
    snprintf(dir, sizeof dir, "%s", ops_tmpdir("ckpt-kill"));

    /* calibrate: the duration of one save */
    double t0 = pst_now();
    pst_err e;
    for (int64_t s = 1; s <= 3; s++) {
        ckpt_meta m = meta_for(s);
        ops_fill(params, g_total, (uint64_t)s);
        ops_fill(slots, g_total, (uint64_t)s + 1000000);
        CHECK(ckpt_save(dir, 2, &m, g_vars, g_nvars, params, slots, g_total, NULL, 0, &e) == 0,
              "%s", e.msg);
    }
    double per_save = (pst_now() - t0) / 3;
    fprintf(stderr, "one checkpoint save: %.2f ms (%zu floats + slots)\n", per_save * 1e3, g_total);

    srand(seed);
    int64_t last = 3;
    int found = 0, mid_write = 0;
    for (int it = 0; it < ITER; it++) {
        pid_t pid = fork();
        if (pid == 0) writer(dir, params, slots);
        /* child start-up (find + verify + read) plus 0..4 writes */
        double delay = per_save * (1.0 + 4.0 * rand() / (double)RAND_MAX);
        struct timespec ts = {(time_t)delay, (long)((delay - (time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "iteration %d: writer ended with %d", it,
              st);
        mid_write += has_temp(dir) > 0;
        CHECK(half_written(dir) == 0, "iteration %d: a checkpoint under its final name is broken",
              it);
        int64_t step = check_latest(dir, params, slots);
        CHECK(step >= last, "iteration %d: latest step %lld went back from %lld", it,
              (long long)step, (long long)last);
        if (step > 0) found++;
        if (step > last) last = step;
    }
    fprintf(stderr, "%d kills: %d left a temporary file (killed mid-write), newest step %lld\n",
            ITER, mid_write, (long long)last);
    CHECK(found == ITER, "a good checkpoint after only %d of %d kills", found, ITER);
    CHECK(mid_write > 0, "no kill landed inside a write: the test did not test it");
    /* pruning after the storm removes the temporaries */
    CHECK(ckpt_prune(dir, 2, &e) >= 0 && has_temp(dir) == 0, "temporaries left after prune");
    free(params);
    free(slots);
    int rc = check_exit();
    if (rc == 0)
        ops_rmdir(dir);
    else
        fprintf(stderr, "replay this run with CKPT_KILL_SEED=%u\n", seed);
    return rc;
}
