/* version.c - versions of pstrain and of what it links. */
#include "pstrain/version.h"

#include <hdf5.h>
#include <mpi.h>
#include <png.h>
#include <string.h>

#include "pstrain/blas.h"
#include "pstrain_config.h"

const char *pst_version(void)
{
    return PSTRAIN_VERSION;
}

void pst_version_print(FILE *out, const char *progname)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len); /* allowed before MPI_Init */
    char *nl = strchr(mpi, ',');        /* Open MPI appends repo details */
    if (nl) *nl = 0;
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    const char *arch = nn_blis_arch();
    fprintf(out, "%s %s\n", progname, PSTRAIN_VERSION);
    fprintf(out, "MPI      %s (MPI %d.%d)\n", mpi, MPI_VERSION, MPI_SUBVERSION);
    fprintf(out, "HDF5     %u.%u.%u\n", maj, min, rel);
    fprintf(out, "BLIS     %s, kernels: %s (%s)\n", nn_blis_version(), arch,
            PSTRAIN_BLIS_OVERRIDE ? "chosen by pstrain from cpuid" : "chosen by BLIS");
    fprintf(out, "libpng   %s\n", png_get_libpng_ver(NULL));
    if (strcmp(arch, "generic") == 0)
        fprintf(out, "warning: BLIS runs its slow generic reference kernels; rebuild with "
                     "-Dblis_arch=auto (static BLIS) or set PSTRAIN_BLIS_ARCH\n");
}
