/*
 * test_pipe_error.c - a fatal error on a pipeline thread reaches the main
 * thread: pipe_next returns -1 with the message, the process goes on (the
 * caller reports and exits or aborts), and the die hook (MPI_Abort in
 * pstrain) is never called from another thread.
 *
 * The error is an allocation failure on a preprocessing thread: this
 * executable replaces malloc (glibc's __libc_malloc does the work) and fails
 * the worker's one-image scratch allocation, recognised by its size (an
 * image of 7x11x3 = 231 bytes) and by being made off the main thread.
 * Before, pst_die ran exit(1) (under MPI: MPI_Abort) on that thread.
 * Sanitizer builds replace malloc themselves: that part is skipped there.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "data/h5test.h"
#include "pstrain/h5util.h"
#include "pstrain/pipeline.h"

enum { N = 120, NTEST = 10, H = 7, W = 11, C = 3, K = 4, CHUNK = 16, IMG = H * W * C };

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define REPLACE_MALLOC 0
#else
#define REPLACE_MALLOC 1
#endif

static pthread_t g_main;

#if REPLACE_MALLOC
static int g_fail_image_allocs; /* set before the pipeline's threads start */
static int g_failed;            /* atomically updated */

extern void *__libc_malloc(size_t n);
void *malloc(size_t n)
{
    if (__atomic_load_n(&g_fail_image_allocs, __ATOMIC_RELAXED) && n == IMG &&
        !pthread_equal(pthread_self(), g_main)) {
        __atomic_fetch_add(&g_failed, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    return __libc_malloc(n);
}
#endif

static int g_hook_calls;
static void die_hook(int status)
{
    (void)status;
    g_hook_calls++;
}

#if REPLACE_MALLOC
static void test_worker_oom(h5ds *ds)
{
    pipe_cfg c = pipe_cfg_defaults();
    c.batch = 16;
    c.epochs = 2;
    c.prep_threads = 2;
    c.aug_flip = true; /* augmentation: the preprocessing threads run */
    c.preload_bytes = 0;
    pipeline *p;
    pst_err e = {""};
    __atomic_store_n(&g_fail_image_allocs, 1, __ATOMIC_RELAXED);
    int rc = pipe_new(&p, ds, &c, &e);
    CHECK(rc == 0, "pipe_new: %s", e.msg);
    if (rc < 0) return;
    pipe_batch b;
    int got, batches = 0;
    while ((got = pipe_next(p, &b, &e)) == 1) batches++;
    __atomic_store_n(&g_fail_image_allocs, 0, __ATOMIC_RELAXED);
    CHECK(got == -1, "pipe_next returned %d after %d batches, expected -1 (an error)", got,
          batches);
    CHECK(strstr(e.msg, "out of memory allocating 231 bytes") != NULL,
          "the error names the failed allocation: '%s'", e.msg);
    CHECK(__atomic_load_n(&g_failed, __ATOMIC_RELAXED) >= 1, "no allocation was failed");
    CHECK(g_hook_calls == 0, "the die hook ran %d times", g_hook_calls);
    pipe_free(p);
}
#endif

static void child_hook(int status)
{
    (void)status;
    static const char msg[] = "die hook called\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(5);
}

static void *die_unhandled(void *arg)
{
    (void)arg;
    pst_die("unhandled error on a thread");
}

/* pst_die on a thread without a handler ends the process (status 1) without
 * calling the die hook there. */
static void test_unhandled_thread(void)
{
    int fd[2];
    if (pipe(fd) < 0) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        pst_set_die_hook(child_hook);
        pthread_t t;
        pthread_create(&t, NULL, die_unhandled, NULL);
        pthread_join(t, NULL);
        _exit(4); /* not reached: the thread ended the process */
    }
    close(fd[1]);
    char buf[512] = "";
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "unhandled pst_die on a thread: status 0x%x", st);
    CHECK(strstr(buf, "unhandled error on a thread") != NULL, "message printed: '%s'", buf);
    CHECK(strstr(buf, "die hook called") == NULL, "the die hook ran on the thread: '%s'", buf);
}

int main(void)
{
    g_main = pthread_self();
    pst_set_die_hook(die_hook);
    char dir[] = "/tmp/pst-pipe-err-XXXXXX", path[256];
    if (!mkdtemp(dir)) CHECK_SKIP("cannot create a temporary directory");
    snprintf(path, sizeof path, "%s/ds.h5", dir);
    h5u_lock();
    CHECK(h5test_write(path, N, NTEST, H, W, C, K, CHUNK) == 0, "writing %s", path);
    h5u_unlock();
    h5ds ds;
    pst_err e;
    if (h5ds_open(&ds, path, &e) < 0) {
        CHECK(0, "h5ds_open: %s", e.msg);
        return check_exit();
    }
#if REPLACE_MALLOC
    test_worker_oom(&ds);
#else
    fprintf(stderr, "sanitizer build: the allocation failure part is skipped\n");
#endif
    test_unhandled_thread();
    h5ds_close(&ds);
    unlink(path);
    rmdir(dir);
    return check_exit();
}
