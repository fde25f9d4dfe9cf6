/*
 * prep_run.h - helpers for the pstrain-prep CLI tests: a scratch directory,
 * running $PSTRAIN_PREP with captured stdout/stderr, small file utilities.
 */
#ifndef PSTRAIN_TEST_PREP_RUN_H
#define PSTRAIN_TEST_PREP_RUN_H

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct prep_out {
    int status;      /* exit status, or 128 + signal */
    char out[65536]; /* stdout */
    char err[16384]; /* stderr */
} prep_out;

static char g_scratch[256];

/* Creates a scratch directory (removed by scratch_cleanup). */
static inline const char *scratch_dir(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_scratch, sizeof g_scratch, "%s/pstrain-prep-test.XXXXXX", base);
    if (!mkdtemp(g_scratch)) {
        perror("mkdtemp");
        exit(1);
    }
    return g_scratch;
}

static inline void scratch_cleanup(void)
{
    DIR *d = opendir(g_scratch);
    if (!d) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", g_scratch, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(g_scratch);
}

static inline const char *scratch_path(const char *name)
{
    static char bufs[32][512]; /* a ring: each result stays valid for 31 more calls */
    static int next;
    char *b = bufs[next++ % 32];
    snprintf(b, 512, "%s/%s", g_scratch, name);
    return b;
}

static inline bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Number of entries of the scratch directory whose name contains `part`. */
static inline int scratch_count(const char *part)
{
    DIR *d = opendir(g_scratch);
    int n = 0;
    struct dirent *de;
    if (!d) return -1;
    while ((de = readdir(d))) n += strstr(de->d_name, part) != NULL;
    closedir(d);
    return n;
}

static inline void read_into(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = 0;
    if (f) fclose(f);
}

static inline const char *prep_exe(void)
{
    const char *p = getenv("PSTRAIN_PREP");
    if (!p) {
        fprintf(stderr, "PSTRAIN_PREP is not set (run through meson test)\n");
        exit(1);
    }
    return p;
}

/* Starts `pstrain-prep args...` (args NULL-terminated, without the program)
 * with stdout/stderr going to scratch files; returns the pid. */
static inline pid_t prep_start(const char *const *args)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = prep_exe();
    while (args[n - 1] && n < 63) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    char o[512], e[512];
    snprintf(o, sizeof o, "%s/stdout.txt", g_scratch);
    snprintf(e, sizeof e, "%s/stderr.txt", g_scratch);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(o, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0) _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static inline void prep_wait(pid_t pid, prep_out *r)
{
    int st = 0;
    waitpid(pid, &st, 0);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char o[512], e[512];
    snprintf(o, sizeof o, "%s/stdout.txt", g_scratch);
    snprintf(e, sizeof e, "%s/stderr.txt", g_scratch);
    read_into(o, r->out, sizeof r->out);
    read_into(e, r->err, sizeof r->err);
}

/* Runs pstrain-prep to completion. */
static inline void prep_run(prep_out *r, const char *const *args)
{
    prep_wait(prep_start(args), r);
}

/* The problems h5ds_verify reports, collected one per line. */
typedef struct problems {
    int n;
    char all[8192];
} problems;

static inline void collect(void *ctx, const char *msg)
{
    problems *p = ctx;
    size_t len = strlen(p->all);
    snprintf(p->all + len, sizeof p->all - len, "%s\n", msg);
    p->n++;
}

#endif
