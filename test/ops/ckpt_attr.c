/*
 * ckpt_attr.c - test tool: `ckpt_attr FILE NAME VALUE` replaces root
 * attribute NAME of an HDF5 file by the 64-bit signed integer VALUE (a
 * hand-made bad checkpoint for the end-to-end tests). Exit 0 on success.
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: ckpt_attr FILE NAME VALUE\n");
        return 2;
    }
    char *end;
    long long v = strtoll(argv[3], &end, 10);
    if (*end) {
        fprintf(stderr, "ckpt_attr: bad value '%s'\n", argv[3]);
        return 2;
    }
    hid_t f = H5Fopen(argv[1], H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return 1;
    if (H5Aexists(f, argv[2]) > 0 && H5Adelete(f, argv[2]) < 0) return 1;
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, argv[2], H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a >= 0 && H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0 ? 0 : 1;
    H5Aclose(a);
    H5Sclose(sp);
    return H5Fclose(f) < 0 ? 1 : rc;
}
