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
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
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
