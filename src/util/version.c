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

/* The MPI library's own version string (MPI_Get_library_version, allowed
 * before MPI_Init) on one line: its first line, tabs as spaces, without the
 * build details Open MPI appends after a comma ("Open MPI v4.1.4"); MPICH
 * and its derivatives put the version on the first line and the device on a
 * later one ("MPICH Version: 4.0.2, device ch4:ucx"). */
static void mpi_library_line(char *out, size_t size)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(lib, &len);
    const char *device = strstr(lib, "Device:");
    char *end = lib + strcspn(lib, ",\n");
    *end = 0;
    for (char *c = lib; *c; c++)
        if (*c == '\t') *c = ' ';
    int n = snprintf(out, size, "%s", lib);
    if (device && n >= 0 && (size_t)n < size) {
        device += strlen("Device:");
        device += strspn(device, " \t");
        snprintf(out + n, size - (size_t)n, ", device %.*s", (int)strcspn(device, "\r\n"), device);
    }
}

void pst_version_print(FILE *out, const char *progname)
{
    char mpi[256];
    mpi_library_line(mpi, sizeof mpi);
    unsigned maj, min, rel;
    H5get_libversion(&maj, &min, &rel);
    fprintf(out, "%s %s\n", progname, PSTRAIN_VERSION);
    fprintf(out, "MPI      %s (MPI %d.%d)\n", mpi, MPI_VERSION, MPI_SUBVERSION);
    fprintf(out, "HDF5     %u.%u.%u\n", maj, min, rel);
    fprintf(out, "libpng   %s\n", png_get_libpng_ver(NULL));
}
