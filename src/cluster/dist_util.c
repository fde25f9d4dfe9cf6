/* dist_util.c - role, fatal errors, back-off and progress for the MPI code. */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist_internal.h"
#include "pstrain/common.h"

static char g_role[32] = "?";

void dist_set_role(const char *role)
{
    snprintf(g_role, sizeof g_role, "%s", role);
}

const char *dist_role(void)
{
    return g_role;
}

void dist_fatal(const char *fmt, ...)
{
    int rank = -1, init = 0;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char msg[PST_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d (%s): %s\n", rank, g_role, msg);
    fflush(stderr);
    if (init) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void dist_mpi_failed(int rc, const char *call, const char *file, int line)
{
    char s[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    MPI_Error_string(rc, s, &n);
    dist_fatal("%s:%d: %s failed: %s", file, line, call, s);
}

void dist_backoff_init(dist_backoff *b, double min_us, double max_us)
{
    b->n = 0;
    b->min_us = min_us;
    b->max_us = max_us;
    b->cur_us = min_us;
}

void dist_backoff_reset(dist_backoff *b)
{
    b->n = 0;
    b->cur_us = b->min_us;
}

void dist_backoff_wait(dist_backoff *b)
{
    if (b->n++ < 4) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, (long)(b->cur_us * 1000.0)};
    nanosleep(&ts, NULL);
    b->cur_us = PST_MIN(b->cur_us * 2, b->max_us);
}

void dist_progress(void)
{
    /* A probe that matches a pending message returns without progressing
     * anything (MPICH, Open MPI's pt2pt), and the root leaves a PS's final
     * snapshot pending until its ring is done: a tag nobody sends never
     * matches, so every call progresses. */
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, DIST_TAG_NEVER, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
}

double dist_cpu_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double dist_thread_cpu_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dist_check_unified(MPI_Win win, const char *what, pst_err *e)
{
    int *model = NULL, flag = 0;
    MPI_OK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag));
    if (flag && model && *model == MPI_WIN_UNIFIED) return 0;
    return pst_fail(e,
                    "%s: this MPI library gives RMA windows the %s memory model; pstrain's "
                    "protocols need MPI_WIN_UNIFIED (an MPI built for cache-coherent hosts, e.g. "
                    "Open MPI or MPICH on x86-64/arm64)",
                    what, flag ? "separate" : "unknown");
}

size_t dist_chunk_elems(size_t elem_size)
{
    static size_t bytes;
    if (!bytes) {
        const char *v = getenv("PSTRAIN_MPI_CHUNK_BYTES");
        long long b = v ? atoll(v) : 0;
        bytes = b > 0 && b < (1LL << 30) ? (size_t)b : (size_t)1 << 30;
    }
    size_t n = bytes / elem_size;
    return n ? n : 1;
}

int dist_nchunks(size_t n, size_t tsize)
{
    const size_t c = dist_chunk_elems(tsize);
    return n ? (int)((n + c - 1) / c) : 1;
}

void dist_get(void *dst, size_t n, MPI_Datatype t, size_t tsize, int rank, MPI_Aint disp,
              MPI_Win win)
{
    const size_t c = dist_chunk_elems(tsize);
    for (size_t i = 0; i < n; i += c) {
        const int k = (int)PST_MIN(c, n - i);
        MPI_OK(
            MPI_Get((char *)dst + i * tsize, k, t, rank, disp + (MPI_Aint)(i * tsize), k, t, win));
    }
}

void dist_put(const void *src, size_t n, MPI_Datatype t, size_t tsize, int rank, MPI_Aint disp,
              MPI_Win win)
{
    const size_t c = dist_chunk_elems(tsize);
    for (size_t i = 0; i < n; i += c) {
        const int k = (int)PST_MIN(c, n - i);
        MPI_OK(MPI_Put((const char *)src + i * tsize, k, t, rank, disp + (MPI_Aint)(i * tsize), k,
                       t, win));
    }
}

void dist_accumulate(const void *src, size_t n, MPI_Datatype t, size_t tsize, int rank,
                     MPI_Aint disp, MPI_Op op, MPI_Win win)
{
    const size_t c = dist_chunk_elems(tsize);
    for (size_t i = 0; i < n; i += c) {
        const int k = (int)PST_MIN(c, n - i);
        MPI_OK(MPI_Accumulate((const char *)src + i * tsize, k, t, rank,
                              disp + (MPI_Aint)(i * tsize), k, t, op, win));
    }
}

void dist_bcast(void *buf, size_t n, MPI_Datatype t, size_t tsize, int root, MPI_Comm comm)
{
    const size_t c = dist_chunk_elems(tsize);
    for (size_t i = 0; i < n; i += c)
        MPI_OK(MPI_Bcast((char *)buf + i * tsize, (int)PST_MIN(c, n - i), t, root, comm));
}

void dist_isend(const void *buf, size_t n, MPI_Datatype t, size_t tsize, int dest, int tag,
                MPI_Comm comm, MPI_Request *reqs)
{
    const size_t c = dist_chunk_elems(tsize);
    int j = 0;
    size_t i = 0;
    do {
        const int k = (int)PST_MIN(c, n - i);
        MPI_OK(MPI_Isend((const char *)buf + i * tsize, k, t, dest, tag, comm, &reqs[j++]));
        i += (size_t)k;
    } while (i < n);
}

void dist_recv(void *buf, size_t n, MPI_Datatype t, size_t tsize, int src, int tag, MPI_Comm comm)
{
    const size_t c = dist_chunk_elems(tsize);
    size_t i = 0;
    do {
        const int k = (int)PST_MIN(c, n - i);
        MPI_OK(MPI_Recv((char *)buf + i * tsize, k, t, src, tag, comm, MPI_STATUS_IGNORE));
        i += (size_t)k;
    } while (i < n);
}
