/* h5util.c - the most specific reason on HDF5's error stack. */
#include "pstrain/h5util.h"

#include <hdf5.h>
#include <stdio.h>

static herr_t innermost_cb(unsigned n, const H5E_error2_t *err, void *data)
{
    if (n == 0 && err->desc) snprintf(data, 256, "%s", err->desc);
    return 0;
}

const char *h5u_reason(char buf[256])
{
    snprintf(buf, 256, "HDF5 gave no reason");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cb, buf);
    H5Eclear2(H5E_DEFAULT);
    return buf;
}
