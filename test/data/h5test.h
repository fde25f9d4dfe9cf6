/*
 * h5test.h - writes small pstrain data sets for the data tests, directly
 * with the HDF5 API in the layout of include/pstrain/h5ds.h (the writer in
 * data-tools/ belongs to pstrain-prep, not to the core the tests link).
 *
 * Image i of a split has pixel (y, x, c) = h5test_pixel(i, y, x, c), never
 * 0 (so zero padding is visible) and not mirror-symmetric; label i % K.
 */
#ifndef PSTRAIN_TEST_H5TEST_H
#define PSTRAIN_TEST_H5TEST_H

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint8_t h5test_pixel(int64_t i, int y, int x, int c)
{
    return (uint8_t)(1 + (uint64_t)(i * 7 + y * 31 + x * 3 + c * 101) % 251);
}

static inline int h5test_attr_int(hid_t f, const char *name, int64_t v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (s < 0 || a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &v) < 0) ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    return rc;
}

static inline int h5test_attr_str(hid_t f, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (a < 0 || H5Awrite(a, t, &v) < 0) ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return rc;
}

static inline int h5test_attr_floats(hid_t f, const char *name, const float *v, int n)
{
    hsize_t d = (hsize_t)n;
    hid_t s = H5Screate_simple(1, &d, NULL);
    hid_t a = H5Acreate2(f, name, H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (a < 0 || H5Awrite(a, H5T_NATIVE_FLOAT, v) < 0) ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    return rc;
}

/* Set *h5test_fletcher32() to add a Fletcher-32 filter to the images
 * (after shuffle and deflate, as HDF5 orders them). */
static inline bool *h5test_fletcher32(void)
{
    static bool on;
    return &on;
}

/* One split of n images, chunked by `chunk` images, deflate level 1. */
static inline int h5test_split(hid_t f, const char *name, int64_t n, int H, int W, int C, int K,
                               int64_t chunk)
{
    size_t img = (size_t)H * W * C;
    if (chunk > n) chunk = n; /* HDF5 refuses chunks larger than a fixed dimension */
    uint8_t *px = malloc((size_t)n * img);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        lab[i] = (int32_t)(i % K);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < C; c++)
                    px[(size_t)i * img + ((size_t)y * W + x) * C + c] = h5test_pixel(i, y, x, c);
    }
    int rc = -1;
    hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[4] = {(hsize_t)n, (hsize_t)H, (hsize_t)W, (hsize_t)C};
    hsize_t cd[4] = {(hsize_t)chunk, (hsize_t)H, (hsize_t)W, (hsize_t)C};
    hid_t s = H5Screate_simple(4, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 4, cd);
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 1);
    if (*h5test_fletcher32()) H5Pset_fletcher32(dcpl);
    hid_t d = H5Dcreate2(g, "images", H5T_STD_U8LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d < 0 || H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px) < 0) goto out;
    H5Dclose(d);
    hsize_t nl = (hsize_t)n;
    hid_t sl = H5Screate_simple(1, &nl, NULL);
    d = H5Dcreate2(g, "labels", H5T_STD_I32LE, sl, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(sl);
    if (d < 0 || H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab) < 0) goto out;
    rc = 0;
out:
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(s);
    H5Gclose(g);
    free(px);
    free(lab);
    return rc;
}

/* Writes `path`: a train split of n_train images and, when n_test > 0, a
 * test split, both chunked by `chunk`. mean/std are fixed test values.
 * Returns 0 or -1. */
static inline int h5test_write(const char *path, int64_t n_train, int64_t n_test, int H, int W,
                               int C, int K, int64_t chunk)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return -1;
    float mean[4] = {0.25f, 0.5f, 0.125f, 0.75f}, std[4] = {0.25f, 0.125f, 0.5f, 0.0625f};
    int rc = 0;
    rc |= h5test_attr_str(f, "format", "pstrain-dataset");
    rc |= h5test_attr_int(f, "format_version", 1);
    rc |= h5test_attr_int(f, "height", H);
    rc |= h5test_attr_int(f, "width", W);
    rc |= h5test_attr_int(f, "channels", C);
    rc |= h5test_attr_int(f, "num_classes", K);
    rc |= h5test_attr_floats(f, "mean", mean, C);
    rc |= h5test_attr_floats(f, "std", std, C);
    rc |= h5test_attr_str(f, "source", "test/data/h5test.h");
    rc |= h5test_attr_str(f, "created", "2026-01-01T00:00:00Z");
    /* /classes: variable-length UTF-8 strings */
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hsize_t nk = (hsize_t)K;
    hid_t s = H5Screate_simple(1, &nk, NULL);
    hid_t d = H5Dcreate2(f, "classes", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    char **names = calloc((size_t)K, sizeof *names);
    for (int k = 0; k < K; k++) {
        names[k] = malloc(16);
        snprintf(names[k], 16, "class%d", k);
    }
    if (d < 0 || H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, names) < 0) rc = -1;
    for (int k = 0; k < K; k++) free(names[k]);
    free(names);
    if (d >= 0) H5Dclose(d);
    H5Sclose(s);
    H5Tclose(t);
    if (h5test_split(f, "train", n_train, H, W, C, K, chunk) < 0) rc = -1;
    if (n_test > 0 && h5test_split(f, "test", n_test, H, W, C, K, chunk) < 0) rc = -1;
    if (H5Fclose(f) < 0) rc = -1;
    return rc ? -1 : 0;
}

/* FNV-1a of n bytes: the tests compare images by it. */
static inline uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

#endif
