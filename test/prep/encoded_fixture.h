/*
 * encoded_fixture.h - a small data set with encoded storage, written through
 * pstrain-prep's writer (h5write), for the storage-layer tests. The stored
 * "images" are arbitrary bytes (the storage layer never decodes them):
 * example i of split s has enc_len(s, i) bytes enc_byte(s, i, j), height
 * enc_height(i), width enc_width(i), label i % K, and for the train split
 * enc_npx(i) decoded pixels enc_px(i, j) of ENC_C channels feeding mean/std.
 * Lengths vary from 1 byte to more than a chunk (ENC_CHUNK bytes), so
 * images straddle chunk boundaries and one spans several chunks.
 */
#ifndef PSTRAIN_TEST_ENCODED_FIXTURE_H
#define PSTRAIN_TEST_ENCODED_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "h5write.h"
#include "pstrain/common.h"

enum { ENC_C = 3, ENC_K = 3, ENC_CHUNK = 64, ENC_BIG = 7 /* the example larger than a chunk */ };

static const char *const enc_classes[ENC_K] = {"cat", "dog", "wombat"};

static inline size_t enc_len(int split, int64_t i)
{
    if (i == ENC_BIG) return 5 * ENC_CHUNK + 11;
    return 1 + (size_t)((i * 37 + split * 5) % 150);
}

static inline uint8_t enc_byte(int split, int64_t i, size_t j)
{
    uint64_t x = (uint64_t)split * 1000003u + (uint64_t)i * 7919u + j * 104729u;
    x ^= x >> 13;
    x *= 0x9E3779B97F4A7C15ull;
    return (uint8_t)(x >> 56);
}

static inline int enc_height(int64_t i)
{
    return 1 + (int)(i % 50) * 13;
}

static inline int enc_width(int64_t i)
{
    return 2 + (int)(i % 30) * 17;
}

static inline int64_t enc_npx(int64_t i)
{
    return 2 + i % 5;
}

static inline uint8_t enc_px(int64_t i, int64_t j)
{
    return (uint8_t)((i * 53 + j * 29) % 256);
}

/* Writes `path` with a train split of n_train and (when n_val > 0) a val
 * split of n_val examples. 0, or -1 with e set. */
static inline int enc_write(const char *path, int64_t n_train, int64_t n_val, pst_err *e)
{
    h5w_opts o = {.storage = H5DS_STORE_ENCODED,
                  .channels = ENC_C,
                  .num_classes = ENC_K,
                  .class_names = enc_classes,
                  .encoded_chunk_bytes = ENC_CHUNK,
                  .compression = 1,
                  .force = true,
                  .source = "encoded fixture"};
    h5w *w = NULL;
    if (h5w_create(&w, path, &o, e) < 0) return -1;
    uint8_t *buf = malloc(8 * ENC_CHUNK), px[64];
    const char *names[2] = {"train", "val"};
    int64_t counts[2] = {n_train, n_val};
    int rc = 0;
    for (int s = 0; s < 2 && rc == 0; s++) {
        if (counts[s] == 0) continue;
        rc = h5w_split_begin(w, names[s], counts[s], e);
        for (int64_t i = 0; i < counts[s] && rc == 0; i++) {
            size_t n = enc_len(s, i);
            for (size_t j = 0; j < n; j++) buf[j] = enc_byte(s, i, j);
            for (int64_t j = 0; j < enc_npx(i) * ENC_C; j++) px[j] = enc_px(i, j);
            rc = h5w_split_append_encoded(w, buf, n, enc_height(i), enc_width(i),
                                          (int32_t)(i % ENC_K), s == 0 ? px : NULL,
                                          s == 0 ? enc_npx(i) : 0, e);
        }
        if (rc == 0) rc = h5w_split_end(w, e);
    }
    free(buf);
    if (rc < 0) {
        h5w_abort(w);
        return -1;
    }
    return h5w_commit(w, e);
}

#endif
