/*
 * mkdata.c - small pstrain data sets for the end-to-end tests, written with
 * test/data/h5test.h, optionally broken so that `pstrain-prep verify`
 * refuses them.
 *
 *   mkdata OUT.h5 NTRAIN NTEST H W C K [DEFECT]
 *
 * DEFECT: "label-range" sets train label 3 to K (outside [0, K)).
 * Exit 0 on success, 1 with a message otherwise.
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5test.h"

static int parse(const char *s, long long lo, long long *v)
{
    char *end;
    *v = strtoll(s, &end, 10);
    return *s && !*end && *v >= lo ? 0 : -1;
}

/* Writes label value `value` at index `at` of /train/labels. */
static int set_label(const char *path, long long at, int value)
{
    int rc = -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return -1;
    hid_t d = H5Dopen2(f, "/train/labels", H5P_DEFAULT);
    hid_t fs = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t start = (hsize_t)at, one = 1;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    if (fs >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL) >= 0 &&
        H5Dwrite(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, &value) >= 0)
        rc = 0;
    H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (d >= 0) H5Dclose(d);
    if (H5Fclose(f) < 0) rc = -1;
    return rc;
}

int main(int argc, char **argv)
{
    long long v[6];
    if (argc < 8 || argc > 9) {
        fprintf(stderr, "usage: mkdata OUT.h5 NTRAIN NTEST H W C K [label-range]\n");
        return 1;
    }
    for (int i = 0; i < 6; i++)
        if (parse(argv[2 + i], i == 1 ? 0 : 1, &v[i]) < 0) {
            fprintf(stderr, "mkdata: argument %d: expected a number, got '%s'\n", i + 2,
                    argv[2 + i]);
            return 1;
        }
    const char *defect = argc == 9 ? argv[8] : NULL;
    if (defect && strcmp(defect, "label-range") != 0) {
        fprintf(stderr, "mkdata: unknown defect '%s'\n", defect);
        return 1;
    }
    if (h5test_write(argv[1], v[0], v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5], 64) < 0) {
        fprintf(stderr, "mkdata: %s: writing failed\n", argv[1]);
        return 1;
    }
    if (defect && set_label(argv[1], v[0] > 3 ? 3 : v[0] - 1, (int)v[5]) < 0) {
        fprintf(stderr, "mkdata: %s: cannot write the bad label\n", argv[1]);
        return 1;
    }
    return 0;
}
