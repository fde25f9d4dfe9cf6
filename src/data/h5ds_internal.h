/*
 * h5ds_internal.h - what the data set files share; private to src/data.
 *   h5ds.c        the API: h5ds_open, h5ds_close, the split lookup and the
 *                 reads (pixels, encoded bytes)
 *   h5ds_check.c  the one check of a file (h5ds_check_file) and h5ds_verify:
 *                 root attributes, /classes, each split's datasets, problem
 *                 reporting
 * The contract is include/pstrain/h5ds.h. Callers hold the HDF5 lock
 * (h5u_lock) around every function here.
 */
#ifndef PSTRAIN_H5DS_INTERNAL_H
#define PSTRAIN_H5DS_INTERNAL_H

#include <hdf5.h>

#include "pstrain/h5ds.h"
#include "pstrain/h5util.h"

/* Turns off HDF5's automatic error printing (our messages fold its reason in). */
static inline void h5ds_quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* Checks the file at `path`, reporting each problem through `report`; when
 * `ds` is given and the file is sound, fills it and leaves the file open.
 * Returns the number of problems, or -1 with `e` set when the file cannot
 * be opened as HDF5. (h5ds_check.c) */
int h5ds_check_file(const char *path, h5ds_problem_fn report, void *ctx, pst_err *e, h5ds *ds);

/* Closes the file and every open dataset id of `ds` (ids become -1). (h5ds.c) */
void h5ds_close_ids(h5ds *ds);

/* Frees `k` class names and the array (NULL is fine). (h5ds.c) */
void h5ds_free_names(char **names, int k);

/* Reads values [at, at+cnt) of 1-D dataset d as `mtype` into buf; 0 or -1. (h5ds.c) */
int h5ds_read_1d(hid_t d, hid_t mtype, int64_t at, int64_t cnt, void *buf);

#endif
