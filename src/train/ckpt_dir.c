/* ckpt_dir.c - the checkpoint directory: ckpt-<step>.h5 names, DIR/latest,
 * finding the newest good checkpoint, pruning, stale temporaries and the
 * one-writer lock. The files themselves: ckpt.c. Layout and guarantees:
 * pstrain/ckpt.h. */
#include "pstrain/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h> /* kill(pid, 0) */
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PATH_LEN 4096

int ckpt_path(char *out, size_t n, const char *dir, int64_t step)
{
    int k = snprintf(out, n, "%s/ckpt-%" PRId64 ".h5", dir, step);
    return (k < 0 || (size_t)k >= n) ? -1 : 0;
}

/* "ckpt-<digits>.h5" -> step; -1 if the name has another form. */
static int64_t parse_ckpt_name(const char *name)
{
    if (strncmp(name, "ckpt-", 5)) return -1;
    const char *p = name + 5;
    const char *dot = strstr(p, ".h5");
    if (!dot || dot == p || strcmp(dot, ".h5")) return -1;
    int64_t step = 0;
    for (const char *c = p; c < dot; c++) {
        if (*c < '0' || *c > '9' || step > (INT64_MAX - 9) / 10) return -1;
        step = step * 10 + (*c - '0');
    }
    return step;
}

/* Writes DIR/latest = "name\n" atomically, through an exclusive temporary
 * (pst_tmp_create: never a planted file or symlink). */
static int write_latest(const char *dir, const char *name, pst_err *e)
{
    char tmp[PATH_LEN], fin[PATH_LEN];
    snprintf(fin, sizeof fin, "%s/latest", dir);
    int fd = pst_tmp_create(fin, true, tmp, sizeof tmp);
    if (fd < 0)
        return pst_fail(e, "%s: cannot create a temporary beside it: %s", fin, strerror(errno));
    char line[PATH_LEN];
    int len = snprintf(line, sizeof line, "%s\n", name);
    if (pst_write_all(fd, line, (size_t)len) < 0 || fsync(fd) < 0) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return pst_fail(e, "%s: %s", tmp, strerror(err));
    }
    if (close(fd) < 0 || rename(tmp, fin) < 0) {
        int err = errno;
        unlink(tmp);
        return pst_fail(e, "%s: %s", fin, strerror(err));
    }
    if (pst_fsync_path(dir, true) < 0) return pst_fail(e, "%s: fsync: %s", dir, strerror(errno));
    return 0;
}

/* The file name recorded in DIR/latest (no directory part), or "" if none. */
static void read_latest(const char *dir, char *out, size_t n)
{
    char p[PATH_LEN];
    out[0] = '\0';
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "r");
    if (!f) return;
    if (fgets(out, (int)n, f)) {
        out[strcspn(out, "\r\n")] = '\0';
        if (strchr(out, '/')) out[0] = '\0'; /* only names inside dir are honoured */
    } else {
        out[0] = '\0';
    }
    fclose(f);
}

typedef struct step_file {
    int64_t step;
    char name[256];
} step_file;

static int cmp_step_desc(const void *a, const void *b)
{
    int64_t x = ((const step_file *)a)->step, y = ((const step_file *)b)->step;
    return (x < y) - (x > y);
}

/* Lists ckpt-<step>.h5 in dir, newest first. *out owned by the caller.
 * Returns the count, 0 if dir does not exist, -1 on error. */
static int list_ckpts(const char *dir, step_file **out, pst_err *e)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return pst_fail(e, "%s: %s", dir, strerror(errno));
    }
    int n = 0, cap = 0;
    step_file *a = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step = parse_ckpt_name(de->d_name);
        if (step < 0 || strlen(de->d_name) >= sizeof a->name) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            a = pst_realloc(a, (size_t)cap * sizeof *a);
        }
        a[n].step = step;
        snprintf(a[n].name, sizeof a[n].name, "%s", de->d_name);
        n++;
    }
    closedir(d);
    if (n > 1) qsort(a, (size_t)n, sizeof *a, cmp_step_desc); /* a is NULL when n == 0 */
    *out = a;
    return n;
}

/* Verifies candidate DIR/name; a damaged one is reported (a checkpoint
 * that is skipped must say so, or a resume silently loses steps). One that
 * no longer exists was pruned by a writer meanwhile: *vanished. */
static bool candidate_ok(const char *dir, const char *name, char *p, size_t n, bool *vanished)
{
    pst_err why = {{0}};
    snprintf(p, n, "%s/%s", dir, name);
    if (ckpt_verify(p, &why) == 0) return true;
    struct stat st;
    if (stat(p, &st) == 0)
        pst_warn("skipping damaged checkpoint %s", why.msg);
    else if (errno == ENOENT)
        *vanished = true;
    return false;
}

/* One pass over the directory: 1 found, 0 none; *vanished when a listed
 * candidate was removed before it could be read. */
static int find_latest_pass(const char *dir, char *p, size_t n, bool *vanished, pst_err *e)
{
    step_file *a;
    int count = list_ckpts(dir, &a, e);
    if (count < 0) return -1;
    char latest[256];
    read_latest(dir, latest, sizeof latest);
    /* The latest pointer first when no file with a higher step exists (a
     * kill between the rename and the pointer update leaves a newer
     * complete file: it wins). */
    int64_t lstep = parse_ckpt_name(latest);
    bool tried_latest = false;
    int rc = 0;
    if (lstep >= 0 && (count == 0 || a[0].step <= lstep)) {
        tried_latest = true;
        if (candidate_ok(dir, latest, p, n, vanished)) rc = 1;
    }
    for (int i = 0; i < count && !rc; i++) {
        if (tried_latest && !strcmp(a[i].name, latest)) continue;
        if (candidate_ok(dir, a[i].name, p, n, vanished)) rc = 1;
    }
    free(a);
    return rc;
}

int ckpt_find_latest(const char *dir, char *out, size_t n, pst_err *e)
{
    char p[PATH_LEN];
    /* A reader (eval, a resume) races with a writer that saves and prunes:
     * every file listed may be gone by the time it is read. The writer
     * publishes each new file before it removes an old one, so a pass that
     * saw a file vanish is retried on a fresh listing; a pass without that
     * sees the directory as it is. */
    for (int pass = 0; pass < 1000; pass++) {
        bool vanished = false;
        int rc = find_latest_pass(dir, p, sizeof p, &vanished, e);
        if (rc < 0) return -1;
        if (rc == 1) {
            if ((size_t)snprintf(out, n, "%s", p) >= n) return pst_fail(e, "%s: path too long", p);
            return 1;
        }
        if (!vanished) return 0;
    }
    return 0;
}

int ckpt_resolve(const char *arg, char *out, size_t n, pst_err *e)
{
    struct stat st;
    if (stat(arg, &st) < 0) {
        /* A checkpoint directory that does not exist yet: nothing to resume
         * (a first run). A missing *.h5 file is an error. */
        size_t len = strlen(arg);
        if (errno == ENOENT && !(len > 3 && !strcmp(arg + len - 3, ".h5"))) return 0;
        return pst_fail(e, "%s: cannot read checkpoint: %s", arg, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) return ckpt_find_latest(arg, out, n, e);
    /* DIR/latest (the pointer file) stands for its directory */
    char dir[PATH_LEN];
    const char *base;
    pst_split_path(arg, dir, sizeof dir, &base);
    if (!strcmp(base, "latest")) return ckpt_find_latest(dir, out, n, e);
    if (ckpt_verify(arg, e) < 0) return -1; /* the message names the file */
    if ((size_t)snprintf(out, n, "%s", arg) >= n) return pst_fail(e, "%s: path too long", arg);
    return 1;
}

/* Temporaries of a write: ".<name>.tmp.<pid>.<random>" of a checkpoint or
 * of the latest pointer (".<name>.tmp.<pid>" before pstrain 0.x wrote them
 * exclusively). */
static bool is_temp_name(const char *s)
{
    return (!strncmp(s, ".ckpt-", 6) || !strncmp(s, ".latest.", 8)) && strstr(s, ".tmp.");
}

/* The writer's pid in a temporary's name, 0 if there is none. */
static long temp_pid(const char *s)
{
    const char *t = NULL;
    for (const char *p = strstr(s, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p + 5;
    if (!t) return 0;
    long pid = 0;
    for (const char *c = t; *c && *c != '.'; c++) {
        if (*c < '0' || *c > '9' || pid > 1L << 40) return 0;
        pid = pid * 10 + (*c - '0');
    }
    return pid;
}

/* A temporary is stale when its writer is gone: this process (its own
 * writes are finished when it prunes) or a pid that no longer exists. A
 * live writer's file is left alone, so a second process in the same
 * directory cannot pull a checkpoint from under the first. (On a shared
 * file system a temporary from another host whose pid exists here is only
 * left behind, never a danger.) */
static bool temp_is_stale(const char *s)
{
    long pid = temp_pid(s);
    if (pid <= 0) return false;
    if (pid == (long)getpid()) return true;
    return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

int ckpt_prune(const char *dir, int keep, pst_err *e)
{
    char p[PATH_LEN], latest[256];
    DIR *d = opendir(dir);
    if (!d) return pst_fail(e, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_temp_name(de->d_name) || !temp_is_stale(de->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    if (keep <= 0) return 0;
    step_file *a;
    int count = list_ckpts(dir, &a, e);
    if (count < 0) return -1;
    read_latest(dir, latest, sizeof latest);
    int removed = 0;
    for (int i = keep; i < count; i++) {
        if (!strcmp(a[i].name, latest)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, a[i].name);
        if (unlink(p) < 0 && errno != ENOENT) {
            pst_fail(e, "%s: %s", p, strerror(errno));
            free(a);
            return -1;
        }
        removed++;
    }
    free(a);
    return removed;
}

/* ---- one writer per directory ---------------------------------------------
 * DIR/lock is held with flock() by the process that writes checkpoints
 * there, from ckpt_prepare_dir to its exit (or ckpt_unlock_dir). It names
 * the holder, so that a second run is refused with who to ask. The kernel
 * drops the lock when the holder dies, whatever the way. */
static int g_lock_fd = -1;
static char g_lock_dir[PATH_LEN];

void ckpt_unlock_dir(void)
{
    if (g_lock_fd >= 0) close(g_lock_fd);
    g_lock_fd = -1;
    g_lock_dir[0] = '\0';
}

static int lock_dir(const char *dir, pst_err *e)
{
    if (g_lock_fd >= 0 && !strcmp(g_lock_dir, dir)) return 0;
    ckpt_unlock_dir();
    char p[PATH_LEN];
    if ((size_t)snprintf(p, sizeof p, "%s/lock", dir) >= sizeof p)
        return pst_fail(e, "checkpoint directory %s: path too long", dir);
    /* O_NOFOLLOW: a symlink planted as DIR/lock is refused, not written through */
    int fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int err = fd < 0 ? errno : 0;
        if (fd >= 0) close(fd);
        return pst_fail(e, "checkpoint directory %s: cannot use the lock file %s: %s", dir, p,
                        err == ELOOP ? "it is a symbolic link"
                        : err        ? strerror(err)
                                     : "not a regular file");
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int err = errno;
        if (err == EWOULDBLOCK) {
            char who[256] = "", host[128] = "?", since[64] = "?";
            long pid = 0;
            ssize_t k = pread(fd, who, sizeof who - 1, 0);
            who[k > 0 ? k : 0] = '\0';
            close(fd);
            if (sscanf(who, "pid %ld host %127s since %63s", &pid, host, since) < 2)
                return pst_fail(e,
                                "checkpoint directory %s is in use by another run (its lock file "
                                "%s names no holder yet); one run writes to a directory at a "
                                "time",
                                dir, p);
            return pst_fail(e,
                            "checkpoint directory %s is in use by another run: pid %ld on host "
                            "%s (since %s) holds %s; one run writes to a directory at a time: "
                            "wait for it, stop it, or give this run another --checkpoint-dir",
                            dir, pid, host, since, p);
        }
        close(fd);
        if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) {
            pst_warn("checkpoint directory %s: the file system cannot lock %s (%s): make sure no "
                     "other run writes there",
                     dir, p, strerror(err));
            return 0;
        }
        return pst_fail(e, "checkpoint directory %s: cannot lock %s: %s", dir, p, strerror(err));
    }
    char host[128] = "unknown", since[32], line[256];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == ' ' || *c == '\n') *c = '_';
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int len =
        snprintf(line, sizeof line, "pid %ld host %s since %s\n", (long)getpid(), host, since);
    if (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        int err = errno;
        close(fd);
        return pst_fail(e, "checkpoint directory %s: cannot write %s: %s", dir, p, strerror(err));
    }
    g_lock_fd = fd;
    snprintf(g_lock_dir, sizeof g_lock_dir, "%s", dir);
    return 0;
}

int ckpt_prepare_dir(const char *dir, pst_err *e)
{
    struct stat st;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return pst_fail(e, "checkpoint directory %s: %s", dir, strerror(errno));
    if (stat(dir, &st) < 0) return pst_fail(e, "checkpoint directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return pst_fail(e, "checkpoint directory %s: not a directory", dir);
    if (access(dir, W_OK | X_OK) < 0)
        return pst_fail(e, "checkpoint directory %s: not writable: %s", dir, strerror(errno));
    if (lock_dir(dir, e) < 0) return -1;
    /* temporaries of a killed run go now, not at the first checkpoint */
    return ckpt_prune(dir, 0, e) < 0 ? -1 : 0;
}

int ckpt_save(const char *dir, int keep, const ckpt_meta *meta, const nn_var *vars, int nvars,
              const float *params, const float *slots, size_t slot_stride, char *out_path,
              size_t out_len, pst_err *e)
{
    char p[PATH_LEN];
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return pst_fail(e, "checkpoint directory %s: %s", dir, strerror(errno));
    if (ckpt_path(p, sizeof p, dir, meta->global_step) < 0)
        return pst_fail(e, "checkpoint directory %s: path too long", dir);
    if (ckpt_write(p, meta, vars, nvars, params, slots, slot_stride, e) < 0) return -1;
    if (write_latest(dir, strrchr(p, '/') + 1, e) < 0) return -1;
    if (ckpt_prune(dir, keep, e) < 0) return -1;
    if (out_path && (size_t)snprintf(out_path, out_len, "%s", p) >= out_len)
        return pst_fail(e, "%s: path too long", p);
    return 0;
}
