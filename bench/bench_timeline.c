/* bench_timeline.c - what --timeline's recorder (src/util/timeline.c) costs
 * a process while it trains: a sync worker's step records five events on
 * three extra clock reads (worker.c), a PS's version two, the root's
 * publication two on one. This times a worker's share per step over the
 * first N steps after tl_start, and tl_start and tl_stop themselves: in the
 * first round (memory the process never touched, as in a run) and the best
 * of R rounds; wall time on one thread. Run it under `chrt -f 50` on a
 * shared machine. A benchmark (bench/), not a check.
 *
 *   bench_timeline [--steps N] [--rounds R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/timeline.h"

/* One lockstep worker step's recording, as worker_run does it. */
static void worker_step(int64_t ticket)
{
    const double t0 = tl_now(), t1 = tl_now(), t2 = pst_now();
    tl_add(TL_WAIT_DATA, t0, t1, ticket);
    tl_add(TL_WAIT_VERSION, t1, t2, ticket);
    tl_add(TL_PULL, t2, t2, ticket);
    tl_add(TL_COMPUTE, t2, t2, ticket);
    tl_add(TL_PUSH, t2, t2, ticket);
}

int main(int argc, char **argv)
{
    int steps = 300, rounds = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_timeline [--steps N] [--rounds R]\n");
            return 2;
        }
    }
    if (steps < 1 || rounds < 1) {
        fprintf(stderr, "bench_timeline: --steps and --rounds: expected counts >= 1\n");
        return 2;
    }
    /* [0]: the first round, on pages the process never touched (as a run);
     * [1]: the best round */
    double steps_s[2] = {0, 1e9}, start_s[2] = {0, 1e9}, stop_s[2] = {0, 1e9};
    size_t n = 0;
    int64_t dropped = 0;
    for (int r = 0; r < rounds; r++) {
        double t = pst_now();
        tl_start(0);
        const double dstart = pst_now() - t;
        t = pst_now();
        for (int i = 0; i < steps; i++) worker_step(i);
        const double dsteps = pst_now() - t;
        tl_events(&n, &dropped);
        t = pst_now();
        tl_stop();
        const double dstop = pst_now() - t;
        if (r == 0) steps_s[0] = dsteps, start_s[0] = dstart, stop_s[0] = dstop;
        steps_s[1] = PST_MIN(steps_s[1], dsteps);
        start_s[1] = PST_MIN(start_s[1], dstart), stop_s[1] = PST_MIN(stop_s[1], dstop);
    }
    printf("%d steps after tl_start, %zu events (%lld dropped)\n", steps, n, (long long)dropped);
    for (int k = 0; k < 2; k++)
        printf("%-12s a worker's step (5 events, 3 clock reads) %.1f ns; tl_start %.1f us, "
               "tl_stop %.1f us\n",
               k ? "best round:" : "first round:", 1e9 * steps_s[k] / steps, 1e6 * start_s[k],
               1e6 * stop_s[k]);
    return 0;
}
