/*
 * pstrain/version.h - what pstrain was built with and what it runs on.
 *
 * `pstrain --version` and `pstrain-prep --version` print the versions of
 * pstrain, MPI, HDF5 and libpng; `pstrain --version` adds BLIS (with the
 * kernel set active at run time) through nn_blis_version_print() (blas.h),
 * so that this utility module does not pull BLIS into pstrain-prep. Safe to
 * call before MPI_Init.
 */
#ifndef PSTRAIN_VERSION_H
#define PSTRAIN_VERSION_H

#include <stdio.h>

const char *pst_version(void);
/* Prints one "component version" line per dependency to `out`. */
void pst_version_print(FILE *out, const char *progname);

#endif
