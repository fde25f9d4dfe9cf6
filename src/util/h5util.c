/* h5util.c - the most specific reason on HDF5's error stack; the one lock
 * around HDF5 calls. */
#include "pstrain/h5util.h"

#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>

static herr_t innermost_cb(unsigned n, const H5E_error2_t *err, void *data)
{
    if (n == 0 && err->desc) snprintf(data, 256, "%s", err->desc);
    return 0;
}

const char *h5u_reason(char buf[256])
{
    snprintf(buf, 256, "HDF5 gave no reason");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cb, buf);
    H5Eclear2(H5E_DEFAULT);
    return buf;
}

static pthread_mutex_t h5_mutex;
static pthread_once_t h5_mutex_once = PTHREAD_ONCE_INIT;
static __thread int h5_depth; /* this thread's nesting depth of the lock */

static void h5_mutex_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&h5_mutex, &a);
    pthread_mutexattr_destroy(&a);
}

void h5u_lock(void)
{
    pthread_once(&h5_mutex_once, h5_mutex_init);
    pthread_mutex_lock(&h5_mutex);
    h5_depth++;
}

void h5u_unlock(void)
{
    h5_depth--;
    pthread_mutex_unlock(&h5_mutex);
}

bool h5u_held(void)
{
    return h5_depth > 0;
}
