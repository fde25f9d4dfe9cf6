/*
 * pstrain/signals.h - stop on signal: the flag a training loop polls.
 *
 * SIGTERM, SIGUSR1 (Slurm's --signal, scancel --signal) and a first SIGINT
 * set a flag that the training loop polls at each step boundary: it then
 * writes a checkpoint and exits 0. A second SIGINT ends the process at once
 * (exit status 130). Under MPI every rank installs the handlers, but only
 * the root's flag decides: the root polls it and tells the others (the flag
 * of other ranks is ignored), so all ranks stop at the same step.
 * Async-signal-safe; install once, before training. A utility module: it
 * knows nothing of checkpoints or MPI.
 */
#ifndef PSTRAIN_SIGNALS_H
#define PSTRAIN_SIGNALS_H

#include "pstrain/common.h"

/* Installs the handlers of SIGTERM, SIGUSR1 and SIGINT. */
int pst_stop_signals_install(pst_err *e);
/* The signal number that asked to stop (SIGTERM, SIGUSR1, SIGINT), or 0. */
int pst_stop_requested(void);
/* Requests a stop as if signal `signo` had arrived (a rank told by the
 * root, tests). The first request is kept. */
void pst_stop_request(int signo);
/* Clears the flag (tests). */
void pst_stop_reset(void);

#endif
