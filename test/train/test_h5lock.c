/*
 * test_h5lock.c - every HDF5 call of a training run is made under the one
 * HDF5 lock (pstrain/h5util.h), while the pipeline's reader thread streams
 * the training split and the main thread writes checkpoints and evaluates.
 *
 * Debian's HDF5 is not thread-safe. A race between two threads inside it
 * shows only now and then (and ThreadSanitizer cannot see into the
 * uninstrumented library), so this test makes the rule checkable: it
 * interposes HDF5's entry points (this executable's definitions take
 * precedence over libhdf5's for the statically linked core) and counts every
 * call made by a thread that does not hold the lock. A training run that
 * streams its split (preload limit 0) with checkpoints every 2 steps and an
 * evaluation every epoch must make none, and still train correctly. Under
 * the ThreadSanitizer build (jobs/test.sh) the wrappers also touch a shared
 * variable, so that an unlocked call from two threads is a reported race.
 */
#include <dlfcn.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "data/h5test.h"
#include "pstrain/ckpt.h"
#include "pstrain/h5util.h"
#include "pstrain/train.h"

static int unlocked_calls;         /* atomically updated */
static const char *first_unlocked; /* name of the first such call */
static unsigned long hdf5_state;   /* stands for libhdf5's global state */
static pthread_mutex_t note_mu = PTHREAD_MUTEX_INITIALIZER;

static void note(const char *fn)
{
    if (!h5u_held()) {
        if (__atomic_fetch_add(&unlocked_calls, 1, __ATOMIC_RELAXED) == 0) {
            pthread_mutex_lock(&note_mu);
            first_unlocked = fn;
            pthread_mutex_unlock(&note_mu);
        }
    }
    hdf5_state++; /* a plain write: unlocked callers on two threads race here */
}

static void *real(const char *name, void **cache)
{
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        if (!f) {
            fprintf(stderr, "test_h5lock: dlsym(%s) failed\n", name);
            abort();
        }
        __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    }
    return f;
}

/* WRAP(ret, name, (params), (args)): a checked pass-through of `name`. */
#define WRAP(ret, name, params, args)                                                              \
    ret name params                                                                                \
    {                                                                                              \
        static void *cache;                                                                        \
        note(#name);                                                                               \
        void *p_ = real(#name, &cache);                                                            \
        ret(*fn_) params;                                                                          \
        memcpy(&fn_, &p_, sizeof fn_); /* ISO C has no cast from void * to a function pointer */   \
        return fn_ args;                                                                           \
    }

WRAP(hid_t, H5Fopen, (const char *n, unsigned fl, hid_t p), (n, fl, p))
WRAP(hid_t, H5Fcreate, (const char *n, unsigned fl, hid_t c, hid_t a), (n, fl, c, a))
WRAP(herr_t, H5Fclose, (hid_t f), (f))
WRAP(herr_t, H5Fflush, (hid_t f, H5F_scope_t s), (f, s))
WRAP(htri_t, H5Fis_hdf5, (const char *n), (n))
WRAP(hid_t, H5Dopen2, (hid_t l, const char *n, hid_t p), (l, n, p))
WRAP(hid_t, H5Dcreate2, (hid_t l, const char *n, hid_t t, hid_t s, hid_t a, hid_t b, hid_t c),
     (l, n, t, s, a, b, c))
WRAP(herr_t, H5Dread, (hid_t d, hid_t t, hid_t m, hid_t f, hid_t p, void *b), (d, t, m, f, p, b))
WRAP(herr_t, H5Dwrite, (hid_t d, hid_t t, hid_t m, hid_t f, hid_t p, const void *b),
     (d, t, m, f, p, b))
WRAP(herr_t, H5Dclose, (hid_t d), (d))
WRAP(hid_t, H5Dget_space, (hid_t d), (d))
WRAP(htri_t, H5Aexists, (hid_t o, const char *n), (o, n))
WRAP(hid_t, H5Aopen, (hid_t o, const char *n, hid_t p), (o, n, p))
WRAP(hid_t, H5Acreate2, (hid_t o, const char *n, hid_t t, hid_t s, hid_t a, hid_t b),
     (o, n, t, s, a, b))
WRAP(herr_t, H5Aread, (hid_t a, hid_t t, void *b), (a, t, b))
WRAP(herr_t, H5Awrite, (hid_t a, hid_t t, const void *b), (a, t, b))
WRAP(htri_t, H5Lexists, (hid_t l, const char *n, hid_t p), (l, n, p))
WRAP(herr_t, H5Eset_auto2, (hid_t s, H5E_auto2_t f, void *d), (s, f, d))
WRAP(herr_t, H5Sselect_hyperslab,
     (hid_t s, H5S_seloper_t o, const hsize_t *a, const hsize_t *b, const hsize_t *c,
      const hsize_t *d),
     (s, o, a, b, c, d))

enum { N = 600, NTEST = 200, H = 12, W = 12, C = 1, K = 4, CHUNK = 50 };

int main(void)
{
    char dir[] = "/tmp/pst-h5lock-XXXXXX", data[256], ckdir[256];
    if (!mkdtemp(dir)) CHECK_SKIP("cannot create a temporary directory");
    snprintf(data, sizeof data, "%s/ds.h5", dir);
    snprintf(ckdir, sizeof ckdir, "%s/ck", dir);
    /* the test's own HDF5 calls take the lock like everybody's */
    h5u_lock();
    int wrc = h5test_write(data, N, NTEST, H, W, C, K, CHUNK);
    h5u_unlock();
    CHECK(wrc == 0, "writing %s", data);

    train_cfg cfg = train_cfg_defaults();
    cfg.data_path = data;
    cfg.model = "mlp";
    cfg.epochs = 3;
    cfg.batch = 32;
    cfg.quiet = true;
    cfg.pipe.preload_bytes = 0; /* stream the split: the reader thread reads HDF5 */
    cfg.checkpoint_dir = ckdir;
    cfg.checkpoint_every = 2;
    cfg.keep_checkpoints = 0;
    cfg.eval_every = 1;
    train_result res;
    memset(&res, 0, sizeof res);
    pst_err e = {""};
    int rc = train_single(&cfg, &res, &e);
    CHECK(rc == 0, "train_single: %s", e.msg);
    const int64_t steps = 3 * ((N + 31) / 32);
    CHECK(res.steps == steps, "steps %lld, expected %lld", (long long)res.steps, (long long)steps);
    CHECK(res.has_test && res.test_examples == NTEST, "test evaluation: %d, %lld examples",
          res.has_test, (long long)res.test_examples);
    /* every checkpoint (every 2 steps and the final one) is complete */
    for (int64_t s = 2; s <= steps + 1; s += 2) {
        char p[512];
        ckpt_path(p, sizeof p, ckdir, PST_MIN(s, steps));
        CHECK(ckpt_verify(p, &e) == 0, "%s: %s", p, e.msg);
    }
    int n = __atomic_load_n(&unlocked_calls, __ATOMIC_RELAXED);
    pthread_mutex_lock(&note_mu);
    CHECK(n == 0, "%d HDF5 calls without the HDF5 lock, the first %s", n,
          first_unlocked ? first_unlocked : "?");
    pthread_mutex_unlock(&note_mu);
    CHECK(hdf5_state > 0, "the HDF5 wrappers were not called: interposition failed");
    train_result_free(&res);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return check_exit();
}
