/*
 * pstrain/signals.h - graceful stop on the signals batch systems send.
 *
 * Slurm sends SIGTERM at a time limit or preemption, and the signal chosen
 * with `#SBATCH --signal=USR1@120` shortly before. On SIGTERM, SIGUSR1 or a
 * first SIGINT, training finishes the current step, writes a checkpoint and
 * exits 0; a second SIGINT (Ctrl-C twice) ends the process at once. The
 * handler only sets a flag: the training loop polls it at step boundaries
 * (in distributed runs the root polls it and tells every rank).
 */
#ifndef PSTRAIN_SIGNALS_H
#define PSTRAIN_SIGNALS_H

#include <stdbool.h>

/* Installs the handlers (idempotent). */
void sig_install(void);
/* True once a stop was requested; returns the signal number via *signo. */
bool sig_stop_requested(int *signo);
/* Requests a stop as if a signal had arrived (tests, other ranks' orders). */
void sig_request_stop(int signo);

#endif
