/*
 * pstrain/dist.h - the cluster layer's entry: a training run over the ranks
 * of MPI_COMM_WORLD (src/cluster). Rank 0 is the root (data feed,
 * checkpoints, reporting), ranks 1..P the parameter servers (ps.h), the
 * rest workers; the protocols are docs/design.md §3.
 */
#ifndef PSTRAIN_DIST_H
#define PSTRAIN_DIST_H

#include "pstrain/common.h"
#include "pstrain/train.h"

/* Runs a training job: collective over MPI_COMM_WORLD (MPI must be
 * initialised with at least MPI_THREAD_FUNNELED). One rank runs
 * train_single() (train.h), more run dist_train(). Returns 0 on success; on
 * error -1 with the message in e (under MPI, fatal errors on any rank end in
 * MPI_Abort with "rank R (role): message" instead). */
int train_run(const train_cfg *cfg, train_result *res, pst_err *e);
/* The distributed run of train_run() on every rank: the same contract. */
int dist_train(const train_cfg *cfg, train_result *res, pst_err *e);

#endif
