/*
 * pstrain/placement.h - which parameter server holds which variable
 * (docs/design.md §2: the answer to "which code puts variables on the PS").
 *
 * A plan maps the model's variables (nn_var list, in model order; batch-norm
 * moving statistics included) onto P parameter servers. Each PS gets a list
 * of ranges of the model's parameter slab; a PS stores its ranges one after
 * another (in slab order) in its window, so range r of PS p lives at
 * ps_offset within that PS's shard and a worker pulls it with one MPI_Get.
 *
 * Strategies:
 *   round-robin: variable i -> PS i mod P (slim's VariableDeviceChooser);
 *   greedy:      largest first, each to the PS holding the fewest bytes so
 *                far, ties by PS index; variables of equal size are taken in
 *                model order, so the plan depends only on the sizes;
 *   partition:   variables larger than partition_bytes are split along axis 0
 *                into min(P, rows, ceil(bytes/partition_bytes)) contiguous
 *                slices of (nearly) equal rows, each slice of one variable on
 *                a different PS; then all pieces are placed greedily.
 *
 * Pure computation: no MPI. The plan owns its arrays.
 */
#ifndef PSTRAIN_PLACEMENT_H
#define PSTRAIN_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pstrain/common.h"
#include "pstrain/model.h"
#include "pstrain/train.h" /* place_kind: the strategies above */

/* One contiguous piece of the slab placed on one PS. */
typedef struct place_range {
    int ps;             /* 0-based PS index (MPI rank 1 + ps) */
    int var;            /* index into the variable list */
    int slice, nslices; /* partitioned variables: slice of nslices; else 0 of 1 */
    int row0, rows;     /* rows of axis 0 covered (whole variable: 0, shape[0]) */
    size_t offset;      /* slab offset, floats */
    size_t count;       /* floats */
    size_t ps_offset;   /* offset within the PS's shard, floats */
    int trainable;      /* 0 for batch-norm moving statistics */
} place_range;

typedef struct place_plan {
    place_kind kind;
    int nps;
    int nvars;
    nn_var *vars; /* copy of the variable list, owned */
    int nranges;
    place_range *ranges; /* sorted by (ps, offset): a PS's ranges are consecutive, owned */
    int *ps_first;       /* [nps] index of the PS's first range, owned */
    int *ps_nranges;     /* [nps] owned */
    size_t *ps_floats;   /* [nps] shard size in floats, owned */
    int64_t *ps_bytes;   /* [nps] owned */
    int64_t total_bytes;
    double imbalance; /* max/mean of ps_bytes (1 = perfect) */
} place_plan;

/* "round-robin" | "greedy" | "partition" -> kind; -1 if unknown. */
int place_parse(const char *name, place_kind *kind);
const char *place_name(place_kind kind);

/* Computes a plan for `nvars` variables (offsets/sizes as nn_model_var gives
 * them) over nps >= 1 servers. partition_bytes (> 0) is used by
 * PLACE_PARTITION only. Returns 0, or -1 with a message on bad arguments. */
int place_plan_new(place_plan **out, const nn_var *vars, int nvars, int nps, place_kind kind,
                   int64_t partition_bytes, pst_err *e);
void place_plan_free(place_plan *p); /* NULL-safe */
/* One line: strategy, PS count, variables, bytes and imbalance (what a
 * training run logs at its start; the table takes --verbose). */
void place_plan_summary(const place_plan *p, FILE *out);

/* Prints the table (variable, shape, bytes, PS, offset within the shard), one
 * line per range, then per-PS totals and the imbalance ratio. */
void place_plan_print(const place_plan *p, FILE *out);

#endif
