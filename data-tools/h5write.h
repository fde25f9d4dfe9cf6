/*
 * h5write.h - writing a pstrain data set (layout in include/pstrain/h5ds.h).
 *
 * The file is written under a temporary name in the output's directory
 * (OUT.h5.tmp.<pid>) and renamed over OUT.h5 only by h5w_commit, after
 * fsync: an interrupted or failed run never leaves a half-written OUT.h5,
 * and SIGINT/SIGTERM during writing remove the temporary file. An existing
 * OUT.h5 is refused unless `force`.
 *
 * Splits are written one after another, images appended in order. The
 * per-channel mean/std attribute is accumulated from the "train" split.
 *
 * Two storage modes (pstrain/h5ds.h): H5DS_STORE_PIXELS, whole images of
 * one shape appended with h5w_split_append (format_version 2); and
 * H5DS_STORE_ENCODED, each image's JPEG bytes appended with
 * h5w_split_append_encoded (format_version 3). Encoded bytes stream to the
 * file: the writer holds about one chunk of them (encoded_chunk_bytes) and a
 * block of per-image entries, never a split.
 */
#ifndef PSTRAIN_H5WRITE_H
#define PSTRAIN_H5WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "pstrain/common.h"
#include "pstrain/h5ds.h"

typedef struct h5w_opts {
    int storage;                 /* H5DS_STORE_PIXELS (0, the default) or H5DS_STORE_ENCODED */
    int height, width, channels; /* pixels: every image of every split has this shape;
                                  * encoded: height and width unused (0), channels = the
                                  * decoded channels (1 or 3) */
    int num_classes;
    const char *const *class_names; /* num_classes UTF-8 names */
    int chunk_images;               /* images per chunk; 0 = about 512 KiB of images */
    int64_t encoded_chunk_bytes;    /* encoded: bytes per chunk of /<split>/encoded; 0 = 1 MiB */
    int compression;                /* deflate level 0-9 (0 = none); shuffle filter on when > 0 */
    bool force;                     /* overwrite an existing output */
    int threads;                    /* compression threads; 0 = one per CPU (at most 8) */
    const char *source;             /* free text for the `source` attribute */
    /* NULL, or num_classes UTF-8 strings (may be empty) for /class_descriptions,
     * e.g. the words of each synset of `pstrain-prep images --synsets` */
    const char *const *class_descriptions;
} h5w_opts;

typedef struct h5w h5w;

/* Creates the temporary file. Fails if the output exists and !force. */
int h5w_create(h5w **out, const char *path, const h5w_opts *o, pst_err *e);
/* Starts split `name` ("train", "val", "test") of exactly n examples. */
int h5w_split_begin(h5w *w, const char *name, int64_t n, pst_err *e);
/* Appends `count` images (count*H*W*C bytes) and their labels, which must
 * lie in [0, num_classes). */
int h5w_split_append(h5w *w, const uint8_t *images, const int32_t *labels, int64_t count,
                     pst_err *e);
/* Appends one image of an encoded split: its JPEG bytes, the image's height and width,
 * its label, and `px` (npx pixels of `channels` channels, e.g. a DCT-scaled decode of it;
 * may be NULL for other splits) which feeds the train split's mean/std. */
int h5w_split_append_encoded(h5w *w, const uint8_t *jpeg, size_t n, int height, int width,
                             int32_t label, const uint8_t *px, int64_t npx, pst_err *e);
/* Ends the current split; fails if fewer than n examples were appended. */
int h5w_split_end(h5w *w, pst_err *e);
/* Writes the attributes (mean/std of train, created, ...), closes, fsyncs
 * and renames to the final path. Frees w whether it succeeds or not (on
 * failure the temporary file is removed). */
int h5w_commit(h5w *w, pst_err *e);
/* Closes and removes the temporary file; frees w. NULL-safe. */
void h5w_abort(h5w *w);

#endif
