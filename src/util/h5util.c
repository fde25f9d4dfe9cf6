/* h5util.c - the most specific reason on HDF5's error stack; the one lock
 * around HDF5 calls. */
#include "pstrain/h5util.h"

#include <hdf5.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static herr_t innermost_cb(unsigned n, const H5E_error2_t *err, void *data)
{
    if (n == 0 && err->desc) snprintf(data, 4352, "%s", err->desc);
    return 0;
}

/* HDF5's POSIX driver describes a failed read or write over two lines, with
 * the time, file name, descriptor and buffer address ("file write failed:
 * time = ...\n, filename = '...', ..., errno = 28, error message = 'No space
 * left on device', ..."): keep what the user needs, "file write failed: No
 * space left on device". Any other reason is kept, on one line. */
static void tidy_reason(const char *desc, char out[256])
{
    static const char key[] = "error message = '";
    const char *msg = strstr(desc, key);
    const char *time = strstr(desc, ": time = ");
    if (msg && time && time < msg) {
        msg += sizeof key - 1;
        const char *end = strchr(msg, '\'');
        snprintf(out, 256, "%.*s: %.*s", (int)(time - desc), desc,
                 (int)(end ? end - msg : (ptrdiff_t)strlen(msg)), msg);
    } else {
        snprintf(out, 256, "%s", desc);
    }
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

const char *h5u_reason(char buf[256])
{
    char desc[4352] = "HDF5 gave no reason";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cb, desc);
    H5Eclear2(H5E_DEFAULT);
    tidy_reason(desc, buf);
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
