/*
 * pstrain/h5ds.h - reading and checking pstrain data sets (HDF5).
 *
 * Layout (docs/design.md §5, written by pstrain-prep):
 *   file format      HDF5 1.10 (H5Pset_libver_bounds V110): superblock, object
 *                    headers and chunk indexes carry checksums
 *   /classes         fixed-length UTF-8 strings [K], one chunk, Fletcher-32
 *   /class_descriptions  optional, the same layout: a description per class
 *                    (`pstrain-prep images --synsets`: the synset's words)
 *   attributes of /: format = "pstrain-dataset", format_version, storage,
 *                    height, width, channels, num_classes, mean[C], std[C]
 *                    (train pixels scaled to [0,1]), source, created; strings
 *                    are fixed-length (no global heap)
 *   per split (train | val | test), by the storage attribute:
 *   storage = "pixels" (format_version 2; a missing storage attribute means
 *   pixels):
 *     /<split>/images   uint8 [N][H][W][C], chunked by whole images, shuffle+deflate
 *     /<split>/labels   int32 [N], chunked, Fletcher-32
 *   storage = "encoded" (format_version 3; height = width = 0, channels = the
 *   decoded channels, 1 or 3; every stored image is a JPEG):
 *     /<split>/encoded  uint8 [total_bytes], the images' bytes one after
 *                       another, chunked (about 1 MiB), Fletcher-32, no deflate
 *     /<split>/offsets  int64 [N+1]: image i is encoded[offsets[i], offsets[i+1]),
 *                       offsets[0] = 0, strictly increasing, offsets[N] = total_bytes
 *     /<split>/heights, /<split>/widths  int32 [N] >= 1, the image's size
 *     /<split>/labels   int32 [N]; all four chunked, Fletcher-32
 *     A byte stream + offsets, not an HDF5 variable-length type: those bytes
 *     would live in the global heap, which has no checksums and is read
 *     element by element (docs/design.md §5).
 * Version 1 files (the HDF5 1.8 format, variable-length strings in the global
 * heap, no checksums) are still read. Datasets must be chunked or contiguous
 * datasets in the file itself (no virtual or external storage).
 *
 * h5ds_verify() is the one definition of a sound data set: `pstrain-prep
 * verify` prints its problems, and h5ds_open() refuses a file that has any,
 * so `pstrain train` never starts on a bad file. Serial HDF5 only (no MPI-IO):
 * works in programs that never call MPI_Init.
 *
 * Thread safety: Debian's HDF5 is not thread-safe; every h5ds_* call holds
 * the one HDF5 lock (h5u_lock, pstrain/h5util.h), so the pipeline's reader
 * thread and a main thread evaluating or writing a checkpoint may use HDF5
 * at the same time.
 */
#ifndef PSTRAIN_H5DS_H
#define PSTRAIN_H5DS_H

#include <stdbool.h>
#include <stdint.h>

#include "pstrain/common.h"

#define H5DS_FORMAT "pstrain-dataset"
#define H5DS_FORMAT_VERSION 2         /* what pstrain-prep writes for pixels */
#define H5DS_FORMAT_VERSION_ENCODED 3 /* ... and for encoded storage */
#define H5DS_FORMAT_VERSION_MIN 1     /* the oldest version read */
#define H5DS_FORMAT_VERSION_MAX 3     /* the newest version read */
#define H5DS_MAX_CHANNELS 4
#define H5DS_MAX_SPLITS 3

/* h5ds.storage, the root attribute `storage` */
enum { H5DS_STORE_PIXELS = 0, H5DS_STORE_ENCODED = 1 };

typedef struct h5ds_split {
    char name[8];                 /* "train", "val", "test" */
    int64_t count;                /* number of examples */
    int64_t chunk_images;         /* images per HDF5 chunk of /<split>/images (whole-image
                                   * chunks; other layouts: a read unit of about 1 MiB);
                                   * encoded: the mean number of images per chunk of
                                   * /<split>/encoded (at least 1) */
    int64_t encoded_bytes;        /* encoded: total bytes of /<split>/encoded (pixels: 0) */
    int64_t encoded_chunk_bytes;  /* encoded: bytes per HDF5 chunk of it (a read unit of
                                   * about 1 MiB when not chunked; pixels: 0) */
    int64_t images_id, labels_id; /* hid_t of the open datasets (internal; images_id -1
                                   * for encoded splits) */
    int64_t encoded_id, offsets_id, heights_id, widths_id; /* encoded only (internal) */
} h5ds_split;

typedef struct h5ds {
    char path[4096];
    int64_t file; /* hid_t of the open file */
    int format_version;
    int storage;                              /* H5DS_STORE_PIXELS or H5DS_STORE_ENCODED */
    int height, width, channels, num_classes; /* encoded: height = width = 0 */
    /* the file's mean and std attributes; a run's --normalize replaces them
     * (pipe_norm_apply), so they are what its inputs are normalised with */
    float mean[H5DS_MAX_CHANNELS], std[H5DS_MAX_CHANNELS];
    char **class_names; /* num_classes strings, owned */
    int nsplits;
    h5ds_split splits[H5DS_MAX_SPLITS];
    char source[2048], created[64];
} h5ds;

/* Called once per problem found by h5ds_verify, with a one-line message
 * naming the dataset or attribute and what was expected. */
typedef void (*h5ds_problem_fn)(void *ctx, const char *problem);

/* Checks everything that makes a data set sound: format attributes, shapes
 * and dtypes, image/label counts, labels in [0, num_classes), mean/std
 * present and finite, class names; for encoded storage also the version and
 * storage pair, the offsets (0 first, strictly increasing, the last one the
 * byte count) and heights/widths >= 1. Cheap: it decodes no image. Reports each problem through
 * `report` (may be NULL) and returns how many there were (0 = sound), or -1 with `e` set when the
 * file cannot be opened as HDF5 at all. */
int h5ds_verify(const char *path, h5ds_problem_fn report, void *ctx, pst_err *e);

/* Opens a data set for reading after h5ds_verify found no problem; on
 * failure returns -1 with the first problem (prefixed by the path) in `e`. */
int h5ds_open(h5ds *ds, const char *path, pst_err *e);
/* Closes the file and frees what h5ds_open allocated. NULL-safe, idempotent. */
void h5ds_close(h5ds *ds);

/* The split named `name`, or NULL when the file has none. */
const h5ds_split *h5ds_find_split(const h5ds *ds, const char *name);
/* The error for a split the file lacks, naming those it has:
 * "PATH: no 'val' split (this data set has train, test)". Returns -1. */
int h5ds_no_split(const h5ds *ds, const char *name, pst_err *e);

/* Reads examples [first, first+count) of a split: `images` (may be NULL)
 * receives count*H*W*C bytes, `labels` (may be NULL) count int32. Reading
 * whole chunks (first and count multiples of chunk_images) is the fast path;
 * other reads go through a 32 MiB chunk cache per split, so that nearby
 * single-image reads do not decompress a chunk each. Asking for `images` of
 * an encoded split fails (read it with h5ds_read_encoded); labels alone are
 * read from either. */
int h5ds_read(h5ds *ds, const char *split, int64_t first, int64_t count, uint8_t *images,
              int32_t *labels, pst_err *e);

/* Encoded splits: examples [first, first+count). offsets receives count+1 values relative
 * to the first example's start (offsets[0] = 0); bytes (may be NULL: then only offsets,
 * labels, heights, widths are read, each may be NULL) receives offsets[count] bytes and
 * must hold bytes_cap >= that, else the call fails naming the size needed. Fails on a
 * pixels split. Reads of /<split>/encoded use no chunk cache (each reads and checks the
 * chunks it touches; HDF5 1.10's cache outgrew its limit on such reads). */
int h5ds_read_encoded(h5ds *ds, const char *split, int64_t first, int64_t count, int64_t *offsets,
                      uint8_t *bytes, size_t bytes_cap, int32_t *labels, int32_t *heights,
                      int32_t *widths, pst_err *e);

#endif
