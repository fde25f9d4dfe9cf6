/*
 * bench_rma.c - latency and bandwidth of passive-target RMA as pstrain uses
 * it (docs/scaling.md): rank 0 is the target (a parameter server or the
 * root), ranks 1..N-1 are origins (workers). Every rank holds
 * MPI_Win_lock_all(MPI_MODE_NOCHECK) on one MPI_Win_allocate window; the
 * target sits in a service loop that polls a word of its window and calls
 * MPI_Iprobe between polls, sleeping with the parameter server's back-off
 * when idle (--poll ps, src/cluster/ps.c) or never (--poll busy); the
 * origins MPI_Get / MPI_Put and complete each operation with MPI_Win_flush.
 *
 *   latency    origin 1 alone, --lat-reps operations of --lat-size bytes,
 *              each one timed with its flush: median, p10, p90 in µs
 *              (get, put, and fop = MPI_Fetch_and_op(MPI_NO_OP), the atomic
 *              read pstrain's pollers use)
 *   bandwidth  k origins at once (--origins, default 1 and all) move
 *              --min .. --max bytes per operation (x4 steps) to or from the
 *              target for at least --seconds, --reps times: the target's
 *              aggregate rate (GB/s, Gbit/s), median and range over the
 *              repetitions. Puts of different origins go to different parts
 *              of the window (a PS's gradient slots), gets all read the
 *              same bytes (a PS's shard).
 *
 * Prints numbers; it is a benchmark, not a test. Usage: bench_rma --help.
 */
#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/common.h"
#include "src/cluster/dist_internal.h" /* the service loops' back-off and progress */

#define MAX_LIST 32

typedef struct opts {
    int lat, bw;                   /* tests to run */
    int lat_reps;                  /* timed operations per latency op */
    long long lat_size;            /* bytes of a latency operation */
    int lat_batch;                 /* operations per flush, message-cost test */
    long long min, max;            /* bandwidth sizes */
    int reps;                      /* repetitions per bandwidth point */
    double seconds;                /* minimum length of one repetition */
    int busy;                      /* target polls without sleeping */
    int get, put;                  /* bandwidth operations */
    int norigins[MAX_LIST], nlist; /* origin counts; 0 entries: 1 and all */
} opts;

static const char usage_text[] =
    "usage: mpiexec -n N bench_rma [options]   (N >= 2; rank 0 is the target, 1..N-1 origins)\n"
    "  --test lat|bw|all     what to measure (default all)\n"
    "  --lat-reps R          timed operations per latency measurement (default 2000)\n"
    "  --lat-size BYTES      bytes of a latency get/put (default 8)\n"
    "  --lat-batch N         message cost: N gets (puts) of --lat-size, then one flush\n"
    "                        (default 64): us per operation\n"
    "  --min BYTES           smallest bandwidth size (default 4K; K, M, G suffixes: 2^10...)\n"
    "  --max BYTES           largest bandwidth size (default 64M); sizes go x4 from --min\n"
    "  --ops get,put         bandwidth operations (default both)\n"
    "  --origins LIST        origin counts for bandwidth, comma-separated (default 1,N-1)\n"
    "  --reps R              repetitions of each bandwidth point (default 5)\n"
    "  --seconds S           minimum seconds of one repetition (default 0.2)\n"
    "  --poll ps|busy        target loop: ps = MPI_Iprobe between polls, sleeping 10-250 us\n"
    "                        when idle as pstrain's parameter server does (default);\n"
    "                        busy = MPI_Iprobe without sleeping\n"
    "  --help                this text\n"
    "Prints one line per measurement: latency (median, p10, p90 in us) and bandwidth (the\n"
    "target's aggregate GB/s and Gbit/s over k origins, median and min-max of --reps).\n";

/* Rank from the launcher's environment, before MPI_Init (usage errors
 * print once, from rank 0 or a process started without a launcher). */
static int env_rank(void)
{
    const char *v[] = {"PMIX_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        const char *s = getenv(v[i]);
        if (s) return atoi(s);
    }
    return 0;
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    if (env_rank() == 0) {
        va_list ap;
        va_start(ap, fmt);
        fputs("bench_rma: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputs(" (bench_rma --help)\n", stderr);
        va_end(ap);
    }
    exit(2);
}

static long long parse_bytes(const char *s, const char *opt)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno) usage_error("%s: not a size", opt);
    switch (*end) {
    case 'K':
    case 'k':
        v <<= 10, end++;
        break;
    case 'M':
    case 'm':
        v <<= 20, end++;
        break;
    case 'G':
    case 'g':
        v <<= 30, end++;
        break;
    default:
        break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end || v <= 0) usage_error("%s: not a positive size", opt);
    if (v > (1LL << 30)) usage_error("%s: at most 1G bytes per operation", opt);
    return v;
}

static long parse_int(const char *s, const char *opt, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) usage_error("%s: out of range", opt);
    return v;
}

static void parse(int argc, char **argv, opts *o)
{
    *o = (opts){.lat = 1,
                .bw = 1,
                .lat_reps = 2000,
                .lat_size = 8,
                .lat_batch = 64,
                .min = 4 << 10,
                .max = 64 << 20,
                .reps = 5,
                .seconds = 0.2,
                .get = 1,
                .put = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (env_rank() == 0) fputs(usage_text, stdout);
            exit(0);
        }
        static const char *known[] = {"--test", "--lat-reps", "--lat-size", "--lat-batch",
                                      "--min",  "--max",      "--reps",     "--seconds",
                                      "--poll", "--ops",      "--origins"};
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++) ok |= !strcmp(a, known[k]);
        if (!ok)
            usage_error(strncmp(a, "--", 2) ? "unexpected argument '%s'" : "unknown option '%s'",
                        a);
        if (i + 1 >= argc) usage_error("%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--test")) {
            o->lat = !strcmp(v, "lat") || !strcmp(v, "all");
            o->bw = !strcmp(v, "bw") || !strcmp(v, "all");
            if (!o->lat && !o->bw) usage_error("--test: lat, bw or all, not '%s'", v);
        } else if (!strcmp(a, "--lat-reps")) {
            o->lat_reps = (int)parse_int(v, a, 10, 10000000);
        } else if (!strcmp(a, "--lat-size")) {
            o->lat_size = parse_bytes(v, a);
        } else if (!strcmp(a, "--lat-batch")) {
            o->lat_batch = (int)parse_int(v, a, 1, 100000);
        } else if (!strcmp(a, "--min")) {
            o->min = parse_bytes(v, a);
        } else if (!strcmp(a, "--max")) {
            o->max = parse_bytes(v, a);
        } else if (!strcmp(a, "--reps")) {
            o->reps = (int)parse_int(v, a, 1, 1000);
        } else if (!strcmp(a, "--seconds")) {
            char *end;
            o->seconds = strtod(v, &end);
            if (end == v || *end || !(o->seconds >= 0 && o->seconds <= 3600))
                usage_error("--seconds: not a number of seconds in [0, 3600]: '%s'", v);
        } else if (!strcmp(a, "--poll")) {
            if (!strcmp(v, "ps"))
                o->busy = 0;
            else if (!strcmp(v, "busy"))
                o->busy = 1;
            else
                usage_error("--poll: ps or busy, not '%s'", v);
        } else if (!strcmp(a, "--ops")) {
            o->get = strstr(v, "get") != NULL;
            o->put = strstr(v, "put") != NULL;
            if (!o->get && !o->put) usage_error("--ops: get, put or get,put, not '%s'", v);
        } else if (!strcmp(a, "--origins")) {
            char *copy = strdup(v), *save = NULL;
            o->nlist = 0;
            for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (o->nlist == MAX_LIST) usage_error("--origins: at most %d counts", MAX_LIST);
                o->norigins[o->nlist++] = (int)parse_int(t, a, 1, 1 << 20);
            }
            free(copy);
            if (!o->nlist) usage_error("--origins: empty list '%s'", v);
        }
    }
    if (o->min > o->max) usage_error("--min is larger than --max");
}

static void check(int rc, const char *what)
{
    if (rc == MPI_SUCCESS) return;
    char s[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    MPI_Error_string(rc, s, &n);
    fprintf(stderr, "bench_rma: %s failed: %s\n", what, s);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Window layout at the target: [0, 64) control (int64 done counter),
 * then the data area: nslots slots of `max` bytes. */
enum { CTL_BYTES = 64 };

typedef struct ctx {
    MPI_Win win;
    char *base; /* this rank's window memory (the target's is the one used) */
    char *buf;  /* origin's buffer */
    int rank, size;
    int64_t served; /* target: origin completions seen so far */
    int64_t fop_result;
    int busy;
} ctx;

/* Target: serve until `k` more origins have reported done (each adds 1 to
 * the done word), with a sync PS's loop: dist_progress between polls and,
 * unless busy, its idle back-off (10-250 us, src/cluster/ps.c). */
static void serve(ctx *c, int k)
{
    volatile int64_t *done = (volatile int64_t *)c->base;
    dist_backoff bo;
    dist_backoff_init(&bo, 10, 250);
    const int64_t want = c->served + k;
    for (;;) {
        check(MPI_Win_sync(c->win), "MPI_Win_sync");
        if (__atomic_load_n(done, __ATOMIC_ACQUIRE) >= want) break;
        dist_progress();
        if (!c->busy) dist_backoff_wait(&bo);
    }
    c->served = want;
}

static void report_done(ctx *c)
{
    const int64_t one = 1;
    int64_t old = 0;
    check(MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 0, MPI_SUM, c->win), "MPI_Fetch_and_op");
    check(MPI_Win_flush(0, c->win), "MPI_Win_flush");
}

enum { OP_GET, OP_PUT, OP_FOP };
static const char *op_name[] = {"get", "put", "fop"};

/* Starts one operation of `bytes` by this origin (slot: its part of the
 * window for puts); op_once also completes it with a flush. */
static void op_start(ctx *c, int op, long long bytes, int slot, long long slot_bytes)
{
    const MPI_Aint disp = CTL_BYTES + (MPI_Aint)slot * (MPI_Aint)slot_bytes;
    if (op == OP_GET) {
        check(MPI_Get(c->buf, (int)bytes, MPI_BYTE, 0, CTL_BYTES, (int)bytes, MPI_BYTE, c->win),
              "MPI_Get");
    } else if (op == OP_PUT) {
        check(MPI_Put(c->buf, (int)bytes, MPI_BYTE, 0, disp, (int)bytes, MPI_BYTE, c->win),
              "MPI_Put");
    } else {
        /* the result lands at the flush: not in a local of this function */
        check(MPI_Fetch_and_op(NULL, &c->fop_result, MPI_INT64_T, 0, CTL_BYTES, MPI_NO_OP, c->win),
              "MPI_Fetch_and_op");
    }
}

static void op_once(ctx *c, int op, long long bytes, int slot, long long slot_bytes)
{
    op_start(c, op, bytes, slot, slot_bytes);
    check(MPI_Win_flush(0, c->win), "MPI_Win_flush");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *sorted, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return sorted[i];
}

static void latency(ctx *c, const opts *o)
{
    double *t = malloc(sizeof *t * (size_t)o->lat_reps);
    if (!t) check(MPI_ERR_NO_MEM, "malloc");
    for (int op = OP_GET; op <= OP_FOP; op++) {
        check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        const long long bytes = op == OP_FOP ? 8 : o->lat_size;
        if (c->rank == 0) {
            serve(c, 1);
        } else if (c->rank == 1) {
            for (int i = 0; i < 10; i++) op_once(c, op, bytes, 0, 0); /* warm-up */
            for (int i = 0; i < o->lat_reps; i++) {
                double t0 = pst_now();
                op_once(c, op, bytes, 0, 0);
                t[i] = pst_now() - t0;
            }
            report_done(c);
            qsort(t, (size_t)o->lat_reps, sizeof *t, cmp_double);
            printf("latency    %-3s %9lld B  median %8.1f us  p10 %8.1f  p90 %8.1f  (%d reps)\n",
                   op_name[op], bytes, 1e6 * pct(t, o->lat_reps, 0.5),
                   1e6 * pct(t, o->lat_reps, 0.1), 1e6 * pct(t, o->lat_reps, 0.9), o->lat_reps);
            fflush(stdout);
        }
    }
    /* message cost: lat_batch operations in flight, one flush (a pull of
     * many ranges); each put to its own bytes */
    const int groups = o->lat_reps / o->lat_batch > 20 ? o->lat_reps / o->lat_batch : 20;
    double *g = malloc(sizeof *g * (size_t)groups);
    if (!g) check(MPI_ERR_NO_MEM, "malloc");
    for (int op = OP_GET; op <= OP_PUT; op++) {
        check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        if (c->rank == 0) {
            serve(c, 1);
        } else if (c->rank == 1) {
            for (int i = 0; i < groups + 2; i++) {
                double t0 = pst_now();
                for (int j = 0; j < o->lat_batch; j++)
                    op_start(c, op, o->lat_size, op == OP_PUT ? j : 0, o->lat_size);
                check(MPI_Win_flush(0, c->win), "MPI_Win_flush");
                if (i >= 2) g[i - 2] = pst_now() - t0; /* two warm-up groups */
            }
            report_done(c);
            qsort(g, (size_t)groups, sizeof *g, cmp_double);
            printf(
                "per-msg    %-3s %9lld B  median %8.1f us  p10 %8.1f  p90 %8.1f  (per operation, "
                "%d per flush, %d flushes)\n",
                op_name[op], o->lat_size, 1e6 * pct(g, groups, 0.5) / o->lat_batch,
                1e6 * pct(g, groups, 0.1) / o->lat_batch, 1e6 * pct(g, groups, 0.9) / o->lat_batch,
                o->lat_batch, groups);
            fflush(stdout);
        }
    }
    free(g);
    free(t);
}

/* k origins (ranks 1..k) move `bytes` per operation for at least
 * o->seconds; returns (at the target's printing rank 1) the aggregate rate
 * in bytes/s: all bytes over the longest origin's time. */
static double bw_once(ctx *c, const opts *o, int op, long long bytes, int k)
{
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double mine[2] = {0, 0}; /* bytes, seconds */
    if (c->rank == 0) {
        serve(c, k);
    } else if (c->rank <= k) {
        const double t0 = pst_now();
        double t;
        long long n = 0;
        do {
            op_once(c, op, bytes, c->rank - 1, o->max);
            n++;
            t = pst_now() - t0;
        } while (t < o->seconds);
        report_done(c);
        mine[0] = (double)n * (double)bytes;
        mine[1] = t;
    }
    double sum[2], mx[2];
    check(MPI_Reduce(mine, sum, 2, MPI_DOUBLE, MPI_SUM, 1, MPI_COMM_WORLD), "MPI_Reduce");
    check(MPI_Reduce(mine, mx, 2, MPI_DOUBLE, MPI_MAX, 1, MPI_COMM_WORLD), "MPI_Reduce");
    return c->rank == 1 ? sum[0] / mx[1] : 0;
}

static void bandwidth(ctx *c, const opts *o, const int *ks, int nk)
{
    double *r = malloc(sizeof *r * (size_t)o->reps);
    if (!r) check(MPI_ERR_NO_MEM, "malloc");
    for (int op = OP_GET; op <= OP_PUT; op++) {
        if ((op == OP_GET && !o->get) || (op == OP_PUT && !o->put)) continue;
        for (int j = 0; j < nk; j++) {
            const int k = ks[j];
            for (long long s = o->min; s <= o->max; s *= 4) {
                /* warm-up: one short repetition (connections, registration) */
                opts warm = *o;
                warm.seconds = 0;
                bw_once(c, &warm, op, s, k);
                for (int i = 0; i < o->reps; i++) r[i] = bw_once(c, o, op, s, k);
                if (c->rank == 1) {
                    qsort(r, (size_t)o->reps, sizeof *r, cmp_double);
                    double med = pct(r, o->reps, 0.5);
                    char sz[32];
                    if (s >= (1 << 20))
                        snprintf(sz, sizeof sz, "%lld MiB", s >> 20);
                    else
                        snprintf(sz, sizeof sz, "%lld KiB", s >> 10);
                    printf("bandwidth  %-3s %9s  origins %2d  %8.3f GB/s  %8.2f Gbit/s  "
                           "(min-max %.3f-%.3f GB/s, %d reps)\n",
                           op_name[op], sz, k, med / 1e9, 8 * med / 1e9, r[0] / 1e9,
                           r[o->reps - 1] / 1e9, o->reps);
                    fflush(stdout);
                }
            }
        }
    }
    free(r);
}

int main(int argc, char **argv)
{
    opts o;
    parse(argc, argv, &o);
    int prov = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &prov);
    ctx c = {.busy = o.busy};
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const int W = c.size - 1;
    int ks[MAX_LIST], nk = 0, bad = 0;
    if (o.nlist) {
        for (int i = 0; i < o.nlist; i++) {
            if (o.norigins[i] > W) bad = o.norigins[i];
            ks[nk++] = o.norigins[i];
        }
    } else {
        ks[nk++] = 1;
        if (W > 1) ks[nk++] = W;
    }
    if (W < 1 || bad) {
        if (c.rank == 0) {
            if (W < 1)
                fprintf(stderr, "bench_rma: needs at least 2 ranks (a target and an origin), "
                                "got 1\n");
            else
                fprintf(stderr, "bench_rma: --origins %d: only %d origin rank(s)\n", bad, W);
        }
        MPI_Finalize();
        return 2;
    }
    /* the target: control word, then one slot of --max bytes per origin (or
     * the message-cost puts' bytes, if more) */
    MPI_Aint data = (MPI_Aint)W * (MPI_Aint)o.max;
    if (data < (MPI_Aint)o.lat_batch * (MPI_Aint)o.lat_size)
        data = (MPI_Aint)o.lat_batch * (MPI_Aint)o.lat_size;
    const MPI_Aint win_bytes = c.rank == 0 ? CTL_BYTES + data : 0;
    check(MPI_Win_allocate(win_bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &c.base, &c.win),
          "MPI_Win_allocate");
    MPI_Win_set_errhandler(c.win, MPI_ERRORS_RETURN);
    if (c.rank == 0) memset(c.base, 0, (size_t)win_bytes);
    const long long bufsz = o.max > o.lat_size ? o.max : o.lat_size;
    c.buf = c.rank ? malloc((size_t)bufsz) : NULL;
    if (c.rank && !c.buf) {
        fprintf(stderr, "bench_rma: rank %d: cannot allocate %lld bytes\n", c.rank, bufsz);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (c.buf) memset(c.buf, 1, (size_t)bufsz);
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, c.win), "MPI_Win_lock_all");

    /* where the ranks run */
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int hl = 0;
    MPI_Get_processor_name(host, &hl);
    char *hosts = c.rank == 0 ? malloc((size_t)c.size * MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (c.rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
        int ll = 0;
        MPI_Get_library_version(lib, &ll);
        lib[strcspn(lib, ",\n")] = 0;
        printf("bench_rma: %s; target (rank 0) on %s, origins:", lib, hosts);
        for (int r = 1; r < c.size; r++)
            printf(" %s%s", hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME, r + 1 < c.size ? "," : "");
        printf("; target poll %s\n", o.busy ? "busy" : "ps (10-250 us back-off)");
        fflush(stdout);
        free(hosts);
    }
    if (o.lat) latency(&c, &o);
    if (o.bw) bandwidth(&c, &o, ks, nk);

    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    MPI_Win_unlock_all(c.win);
    MPI_Win_free(&c.win);
    free(c.buf);
    MPI_Finalize();
    return 0;
}
