/*
 * pstrain/common.h - small utilities every module uses.
 *
 * Errors are values: a function that can fail for reasons outside the
 * program (bad input, I/O, a library) returns a negative status and, when
 * given a pst_err, leaves a one-line message in it that names the file, the
 * field and what was expected. Programming errors are assert()s.
 *
 * The rest: checked allocation (out of memory is fatal), a monotonic clock,
 * and fatal-error helpers for the command-line programs.
 */
#ifndef PSTRAIN_COMMON_H
#define PSTRAIN_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PST_ERR_LEN 1024

/* An error message carried back to the caller. */
typedef struct pst_err {
    char msg[PST_ERR_LEN];
} pst_err;

/* Formats the message into `e` (when not NULL) and returns -1, so that
 * `return pst_fail(e, "...")` reads naturally. A message already in `e` is
 * replaced. */
int pst_fail(pst_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the message in `e` (for adding context on the way
 * up) and returns -1. */
int pst_err_prefix(pst_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The program name used by pst_die/pst_warn ("pstrain", "pstrain-prep"). */
void pst_set_progname(const char *name);
const char *pst_progname(void);

/* Prints "prog: message" to stderr and exits with status 1. */
void pst_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Prints "prog: warning: message" to stderr. */
void pst_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Allocation that cannot fail: on out-of-memory the process ends with a
 * message naming the size (and, under MPI, the caller is expected to have
 * installed a hook that aborts the job; see pst_set_die_hook). */
void *pst_malloc(size_t n);
void *pst_calloc(size_t count, size_t size);
void *pst_realloc(void *p, size_t n);
char *pst_strdup(const char *s);
/* 64-byte aligned (cache line / AVX-512) allocation; free with free(). */
void *pst_aligned_alloc(size_t n);

/* Called by pst_die before exiting (MPI programs set it to MPI_Abort). Only
 * ever on the main thread: MPI runs MPI_THREAD_FUNNELED. */
void pst_set_die_hook(void (*hook)(int status));

/* Errors on threads other than the main one. A thread that sets a handler
 * hands pst_die's message to it and ends (pthread_exit) instead of ending the
 * process: the handler passes the message on to the main thread, which
 * reports it and exits or aborts the job (the input pipeline does this).
 * pst_die on a thread without a handler prints the message and ends the
 * process with _exit(1), never calling the die hook (MPI) from that thread.
 * The handler must not rely on locks the dying thread might hold. NULL
 * removes it. */
void pst_set_thread_die_handler(void (*fn)(void *ctx, const char *msg), void *ctx);

/* Seconds on a monotonic clock. */
double pst_now(void);
/* Seconds of CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID:
 * what a benchmark or a profile charges to one thread, whatever else the
 * machine runs). */
double pst_thread_cpu(void);
/* CPUs in this process's affinity mask (sched_getaffinity; what mpirun
 * --bind-to gives a rank), at least 1. */
int pst_cpu_count(void);
/* A --threads value: 0 means pst_cpu_count(), anything else itself. */
int pst_threads_resolve(int threads);

/* Parses a whole string as a number; -1 on junk, overflow or empty. */
int pst_parse_i64(const char *s, int64_t *out);
int pst_parse_int(const char *s, int *out);
int pst_parse_double(const char *s, double *out);

/* fsyncs a file (or, with dir, a directory: after a rename into it).
 * -1 with errno set on failure. */
int pst_fsync_path(const char *path, bool dir);

/* Splits path into its directory ("." when it has none, "/" for the root)
 * and its base name (a pointer into path). Returns -1 if the directory does
 * not fit in dir[ndir]. */
int pst_split_path(const char *path, char *dir, size_t ndir, const char **base);

/* Where to write the whole-file output `path` (a summary, a PNG): for a new
 * or regular file, `tmp` gets a temporary name beside it (pst_tmp_name)
 * and the function returns 1: write there, then rename it into place (or
 * remove it on failure), so that readers never see half a file. For an
 * existing non-regular file (/dev/stdout, /dev/null, a FIFO) `tmp` gets
 * `path` and it returns 0: write in place, never rename over it or remove
 * it (that would replace or delete the device). -1 if `tmp` is too small. */
int pst_out_tmp(const char *path, char *tmp, size_t n);

/* A temporary name beside `path` that no other user can predict:
 * "PATH.tmp.PID.RANDOM", or with `hidden` "DIR/.BASE.tmp.PID.RANDOM" (the
 * pid lets a later run remove it once its writer is gone). -1 if it does
 * not fit in tmp[n]. */
int pst_tmp_name(const char *path, bool hidden, char *tmp, size_t n);

/* Creates such a temporary exclusively (O_CREAT|O_EXCL|O_NOFOLLOW: never an
 * existing file, never through a planted symlink), a fresh name on each
 * collision. Returns the descriptor (write-only), or -1 with errno. */
int pst_tmp_create(const char *path, bool hidden, char *tmp, size_t n);

/* Opens the whole-file output `path` as pst_out_tmp decides, for fopen
 * `mode`: a new or regular file through an exclusive temporary (then
 * *renamed = 1: rename tmp over path when complete, remove it on failure),
 * a device in place (*renamed = 0), a FIFO only if it has a reader (never
 * blocking). NULL with errno on failure. */
FILE *pst_out_fopen(const char *path, const char *mode, char *tmp, size_t n, int *renamed);

/* Checks at start-up that output `path` can be written: an existing file
 * must be writable and be a regular file, a character device (/dev/null) or
 * this process's own stdout/stderr (a FIFO or socket would block or lose
 * the output); a new file (or, with `whole_file`, one replaced by a rename)
 * needs a writable directory. Returns 0, or -1 with `e` naming the path. */
int pst_out_check(const char *path, bool whole_file, pst_err *e);

/* Writes `s` to `f` as a JSON string literal, quotes included ('"', '\\'
 * and control characters escaped; NULL writes ""). */
void pst_json_str(FILE *f, const char *s);

/* Writes all of buf or fails with errno set. */
int pst_write_all(int fd, const void *buf, size_t n);

/* splitmix64: one step of a small, well-mixed 64-bit generator (seeding
 * other generators, hashing seeds and ids). Advances *state. */
static inline uint64_t pst_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define PST_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define PST_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PST_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
