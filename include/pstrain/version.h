/*
 * pstrain/version.h - what pstrain was built with and what it runs on.
 *
 * `pstrain --version` and `pstrain-prep --version` print the versions of
 * pstrain, MPI, HDF5, BLIS (with the kernel set active at run time) and
 * libpng. Safe to call before MPI_Init.
 */
#ifndef PSTRAIN_VERSION_H
#define PSTRAIN_VERSION_H

#include <stdio.h>

const char *pst_version(void);
/* Prints one "component version" line per dependency to `out`, and a
 * warning line when BLIS runs its slow generic kernels. */
void pst_version_print(FILE *out, const char *progname);

#endif
