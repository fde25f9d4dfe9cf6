/*
 * pipe_check.h - what the pipeline tests record of a run (one entry per
 * example handed out) and their check of the guarantee that every example
 * comes exactly once per epoch.
 */
#ifndef PSTRAIN_TEST_PIPE_CHECK_H
#define PSTRAIN_TEST_PIPE_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* One example as a run handed it out. */
typedef struct pipe_ex {
    int epoch;
    int64_t batch, id;
    uint64_t hash; /* of the pixels */
} pipe_ex;

/* Checks the `nrec` examples v of a run over epochs [first_epoch, epochs)
 * of a split of n examples: n per epoch, and in each epoch every id of
 * [0, n) once (no duplicate, none missing). `what` names the run in the
 * messages. */
static inline void check_once_per_epoch(const char *what, const pipe_ex *v, int64_t nrec, int64_t n,
                                        int first_epoch, int epochs)
{
    const int nep = epochs - first_epoch;
    CHECK(nrec == nep * n, "%s: %lld examples over %d epochs, want %lld", what, (long long)nrec,
          nep, (long long)(nep * n));
    unsigned char *seen = calloc((size_t)n, 1);
    for (int ep = first_epoch; ep < epochs; ep++) {
        memset(seen, 0, (size_t)n);
        int64_t dup = 0, missing = 0;
        for (int64_t i = 0; i < nrec; i++)
            if (v[i].epoch == ep && v[i].id >= 0 && v[i].id < n && seen[v[i].id]++) dup++;
        for (int64_t i = 0; i < n; i++) missing += !seen[i];
        CHECK(dup == 0 && missing == 0, "%s: epoch %d: %lld duplicates, %lld missing", what, ep,
              (long long)dup, (long long)missing);
    }
    free(seen);
}

#endif
