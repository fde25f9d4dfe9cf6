/*
 * pstrain/tboard.h - TensorBoard event files (--tensorboard DIR).
 *
 * A writer owns one file DIR/events.out.tfevents.<unix seconds>.<host>.<pid>.<n>
 * (the name TensorBoard's own writer gives; <n> makes it unique when two
 * runs start in the same second), opened exclusively, so a resumed run adds
 * a file beside the first one's instead of touching it.
 *
 * The file is a sequence of TFRecords, each
 *   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
 *   length bytes of data          | uint32 masked CRC-32C of the data,
 * with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. The data of each
 * record is one tensorflow.Event protocol buffer (tensorflow/core/util/
 * event.proto), encoded here by hand with the fields pstrain uses:
 *   Event   { double wall_time = 1; int64 step = 2; oneof { string file_version = 3;
 *             Summary summary = 5; SessionLog session_log = 7; } }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 *   SessionLog { enum status = 1 (START = 1); }
 * The first record is file_version "brain.Event:2". A writer for a resumed
 * run (start_step > 0) writes next a SessionLog START at start_step + 1:
 * TensorBoard then drops the points the earlier run logged after its last
 * checkpoint (steps > start_step), which this run computes again.
 *
 * Each tb_scalars call is one Event and ends with a flush, so that a running
 * job can be watched. A write error is not an error of the run (TensorFlow's
 * summary writer logs and goes on): the first one is reported once as a
 * warning naming the file, and the writer writes nothing more (a record
 * after a torn one would be unreadable anyway). Not thread-safe.
 */
#ifndef PSTRAIN_TBOARD_H
#define PSTRAIN_TBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "pstrain/common.h"

typedef struct tb_writer tb_writer;

/* One scalar of an Event: TensorBoard's tag ("train/loss") and its value
 * (written as a float; NaN and infinities as they are). */
typedef struct tb_scalar {
    const char *tag;
    double value;
} tb_scalar;

/* CRC-32C (Castagnoli) of n bytes, continuing from `crc` (0 to start):
 * tb_crc32c(tb_crc32c(0, a, na), b, nb) is the CRC of a then b. The check
 * value of "123456789" is 0xe3069283. */
uint32_t tb_crc32c(uint32_t crc, const void *buf, size_t n);
/* The masked CRC-32C that TFRecord framing stores. */
uint32_t tb_masked_crc32c(const void *buf, size_t n);

/* Makes `dir` (and its missing parents) and checks that a file can be
 * created in it, before any work: -1 with `e` naming the path otherwise. */
int tb_check_dir(const char *dir, pst_err *e);

/* Creates a new event file in `dir` (made if missing) and writes its first
 * record (and the SessionLog of a resumed run, start_step > 0). -1 with `e`
 * naming the path when the file cannot be created or written. */
int tb_open(tb_writer **out, const char *dir, int64_t start_step, pst_err *e);
/* Writes one Event of n scalars at `step` and flushes the file. A write error
 * is reported once as a warning (see above). */
void tb_scalars(tb_writer *w, int64_t step, const tb_scalar *v, int n);
/* The event file's path. */
const char *tb_path(const tb_writer *w);
/* Closes the file (a write error: the warning, if not given yet). NULL-safe. */
void tb_close(tb_writer *w);

#endif
