/* version.c - versions of pstrain and of the libraries every program links.
 * BLIS is not one of them (pstrain-prep does not use it): the nn layer prints
 * its own line, nn_blis_version_print() in blis_arch.c. */
#include "pstrain/version.h"

#include <hdf5.h>
#include <mpi.h>
#include <png.h>
#include <string.h>

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
    fprintf(out, "%s %s\n", progname, PSTRAIN_VERSION);
    fprintf(out, "MPI      %s (MPI %d.%d)\n", mpi, MPI_VERSION, MPI_SUBVERSION);
    fprintf(out, "HDF5     %u.%u.%u\n", maj, min, rel);
    fprintf(out, "libpng   %s\n", png_get_libpng_ver(NULL));
}
