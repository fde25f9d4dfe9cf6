/*
 * ops_util.h - shared bits of the checkpoint tests: a scratch directory, a
 * small fake model layout over one slab, and deterministic fill values.
 */
#ifndef PSTRAIN_TEST_OPS_UTIL_H
#define PSTRAIN_TEST_OPS_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pstrain/ckpt.h"

/* A fresh directory under $TMPDIR (or /tmp); the path is static storage. */
static inline const char *ops_tmpdir(const char *tag)
{
    static char buf[512];
    const char *base = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/pstrain-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(1);
    }
    return buf;
}

/* Removes a flat directory (files only) and the directory. */
static inline void ops_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[4200];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* A model-like layout: nested names, 1-4 dimensions, one non-trainable
 * variable. `scale` multiplies the sizes (the kill test uses a larger one).
 * Returns the variable count; *total gets the slab size. */
static inline int ops_vars(nn_var *v, int scale, size_t *total)
{
    static const struct {
        const char *name;
        int ndim, shape[4];
        int trainable;
    } spec[] = {
        {"conv1/kernel", 4, {5, 5, 1, 6}, 1}, {"conv1/bias", 1, {6}, 1},
        {"conv2/bn/gamma", 1, {16}, 1},       {"conv2/bn/moving_mean", 1, {16}, 0},
        {"fc1/kernel", 2, {400, 12}, 1},      {"fc1/bias", 1, {12}, 1},
        {"logits/kernel", 3, {3, 4, 10}, 1},
    };
    size_t off = 0;
    int n = (int)(sizeof spec / sizeof spec[0]);
    for (int i = 0; i < n; i++) {
        memset(&v[i], 0, sizeof v[i]);
        snprintf(v[i].name, sizeof v[i].name, "%s", spec[i].name);
        v[i].ndim = spec[i].ndim;
        size_t size = 1;
        for (int d = 0; d < spec[i].ndim; d++) {
            v[i].shape[d] = spec[i].shape[d] * (d == 0 ? scale : 1);
            size *= (size_t)v[i].shape[d];
        }
        v[i].offset = off;
        v[i].size = size;
        v[i].trainable = spec[i].trainable;
        off += size;
    }
    *total = off;
    return n;
}

/* Value j of a slab tagged `tag` (e.g. the step): distinct per element and
 * tag, with awkward bit patterns (negative, subnormal-ish, large). */
static inline float ops_value(uint64_t tag, size_t j)
{
    uint64_t x = (tag + 1) * 0x9E3779B97F4A7C15ull ^ (j * 0xD1B54A32D192ED03ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    uint32_t bits = (uint32_t)x & 0xBF7FFFFFu; /* never NaN/Inf: exponent top bit cleared */
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline void ops_fill(float *a, size_t n, uint64_t tag)
{
    for (size_t j = 0; j < n; j++) a[j] = ops_value(tag, j);
}

#endif
