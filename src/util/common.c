/* common.c - error values, checked allocation, clock, number parsing. */
#include "pstrain/common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *g_progname = "pstrain";
static void (*g_die_hook)(int status);
static pthread_t g_main_thread;
static __thread void (*t_die_fn)(void *ctx, const char *msg);
static __thread void *t_die_ctx;

/* Runs on the main thread, before main. */
__attribute__((constructor)) static void record_main_thread(void)
{
    g_main_thread = pthread_self();
}

void pst_set_thread_die_handler(void (*fn)(void *ctx, const char *msg), void *ctx)
{
    t_die_fn = fn;
    t_die_ctx = ctx;
}

int pst_fail(pst_err *e, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int pst_err_prefix(pst_err *e, const char *fmt, ...)
{
    if (!e) return -1;
    char prefix[PST_ERR_LEN], joined[2 * PST_ERR_LEN + 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t np = strlen(prefix), nm = strnlen(e->msg, sizeof e->msg - 1);
    memcpy(joined, prefix, np);
    memcpy(joined + np, ": ", 2);
    memcpy(joined + np + 2, e->msg, nm);
    joined[np + 2 + nm] = 0;
    size_t n = PST_MIN(np + 2 + nm, sizeof e->msg - 1); /* truncate to fit */
    memcpy(e->msg, joined, n);
    e->msg[n] = 0;
    return -1;
}

void pst_set_progname(const char *name)
{
    g_progname = name;
}

const char *pst_progname(void)
{
    return g_progname;
}

void pst_set_die_hook(void (*hook)(int status))
{
    g_die_hook = hook;
}

void pst_die(const char *fmt, ...)
{
    char msg[PST_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (t_die_fn) { /* a thread that hands its errors to the main thread */
        t_die_fn(t_die_ctx, msg);
        pthread_exit(NULL);
    }
    fprintf(stderr, "%s: %s\n", g_progname, msg);
    fflush(stderr);
    if (!pthread_equal(pthread_self(), g_main_thread)) _exit(1); /* no MPI off the main thread */
    if (g_die_hook) g_die_hook(1);
    exit(1);
}

void pst_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: warning: ", g_progname);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void *pst_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) pst_die("out of memory allocating %zu bytes", n);
    return p;
}

void *pst_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) pst_die("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *pst_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) pst_die("out of memory reallocating %zu bytes", n);
    return q;
}

char *pst_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = pst_malloc(n);
    memcpy(d, s, n);
    return d;
}

void *pst_aligned_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        pst_die("out of memory allocating %zu aligned bytes", n);
    return p;
}

double pst_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double pst_thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int pst_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int pst_parse_int(const char *s, int *out)
{
    int64_t v;
    if (pst_parse_i64(s, &v) || v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

int pst_parse_double(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int pst_fsync_path(const char *path, bool dir)
{
    int fd = open(path, O_RDONLY | (dir ? O_DIRECTORY : 0) | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* 64 unpredictable bits for temporary names: getrandom, or (where it is
 * unavailable) a mix of the clock, the pid and a counter. */
static uint64_t tmp_random(void)
{
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    static uint64_t counter;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t x =
        (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 30) ^ ((uint64_t)getpid() << 16) ^ ++counter;
    return pst_splitmix64(&x);
}

int pst_split_path(const char *path, char *dir, size_t ndir, const char **base)
{
    const char *slash = strrchr(path, '/');
    int len = slash == path ? snprintf(dir, ndir, "/")
              : slash       ? snprintf(dir, ndir, "%.*s", (int)(slash - path), path)
                            : snprintf(dir, ndir, ".");
    *base = slash ? slash + 1 : path;
    return len < 0 || (size_t)len >= ndir ? -1 : 0;
}

int pst_tmp_name(const char *path, bool hidden, char *tmp, size_t n)
{
    const char *slash = strrchr(path, '/');
    int len;
    if (hidden)
        len = snprintf(tmp, n, "%.*s.%s.tmp.%ld.%012llx", slash ? (int)(slash - path + 1) : 0, path,
                       slash ? slash + 1 : path, (long)getpid(),
                       (unsigned long long)(tmp_random() & 0xffffffffffffull));
    else
        len = snprintf(tmp, n, "%s.tmp.%ld.%012llx", path, (long)getpid(),
                       (unsigned long long)(tmp_random() & 0xffffffffffffull));
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

int pst_tmp_create(const char *path, bool hidden, char *tmp, size_t n)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        if (pst_tmp_name(path, hidden, tmp, n) < 0) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1; /* EEXIST 16 times: someone is creating our names */
}

int pst_out_tmp(const char *path, char *tmp, size_t n)
{
    struct stat st;
    const bool in_place = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    if (in_place) {
        int len = snprintf(tmp, n, "%s", path);
        return len < 0 || (size_t)len >= n ? -1 : 0;
    }
    return pst_tmp_name(path, false, tmp, n) < 0 ? -1 : 1;
}

/* Is the open file st this process's standard output or error? */
static bool is_own_std_stream(const struct stat *st)
{
    for (int fd = 1; fd <= 2; fd++) {
        struct stat s;
        if (fstat(fd, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino) return true;
    }
    return false;
}

FILE *pst_out_fopen(const char *path, const char *mode, char *tmp, size_t n, int *renamed)
{
    struct stat st;
    *renamed = 0;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if ((int)snprintf(tmp, n, "%s", path) >= (int)n) {
            errno = ENAMETOOLONG;
            return NULL;
        }
        if (S_ISDIR(st.st_mode)) {
            errno = EISDIR;
            return NULL;
        }
        /* in place, never blocking: a FIFO without a reader fails (ENXIO) */
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) return NULL;
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        FILE *f = fdopen(fd, mode);
        if (!f) close(fd);
        return f;
    }
    int fd = pst_tmp_create(path, false, tmp, n);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, mode);
    if (!f) {
        int err = errno;
        close(fd);
        unlink(tmp);
        errno = err;
        return NULL;
    }
    *renamed = 1;
    return f;
}

int pst_out_check(const char *path, bool whole_file, pst_err *e)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return pst_fail(e, "%s: is a directory, expected a file", path);
        if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode) && !is_own_std_stream(&st))
            return pst_fail(e,
                            "%s: not a regular file (a FIFO or socket would block or lose the "
                            "output), expected a file or a character device",
                            path);
        if (access(path, W_OK) < 0)
            return pst_fail(e, "%s: not writable: %s", path, strerror(errno));
        if (!S_ISREG(st.st_mode) || !whole_file) return 0;
    } else if (errno != ENOENT) {
        return pst_fail(e, "%s: %s", path, strerror(errno));
    }
    /* a new file, or one replaced by a rename: its directory must take it */
    char dir[4096];
    const char *base;
    if (pst_split_path(path, dir, sizeof dir, &base) < 0)
        return pst_fail(e, "%s: path too long", path);
    if (stat(dir, &st) < 0)
        return pst_fail(e, "%s: cannot create: %s: %s", path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pst_fail(e, "%s: cannot create: %s is not a directory", path, dir);
    if (access(dir, W_OK | X_OK) < 0)
        return pst_fail(e, "%s: cannot create: directory %s: %s", path, dir, strerror(errno));
    return 0;
}

void pst_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

int pst_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int pst_cpu_count(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int pst_threads_resolve(int threads)
{
    return threads > 0 ? threads : pst_cpu_count();
}
