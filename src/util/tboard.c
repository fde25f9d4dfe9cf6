/* tboard.c - TensorBoard event files: CRC-32C, TFRecord framing and the
 * protocol-buffer encoding of tensorflow.Event, by hand (tboard.h). */
#include "pstrain/tboard.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- CRC-32C: reflected Castagnoli polynomial 0x82f63b78, one table
 * lookup per byte (records are a few hundred bytes: speed does not matter,
 * test/util/test_tboard.c checks the table against the bitwise definition) */

static const uint32_t crc32c_table[256] = {
    0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c, 0x26a1e7e8, 0xd4ca64eb,
    0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b, 0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24,
    0x105ec76f, 0xe235446c, 0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
    0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc, 0xbc267848, 0x4e4dfb4b,
    0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a, 0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35,
    0xaa64d611, 0x580f5512, 0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
    0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad, 0x1642ae59, 0xe4292d5a,
    0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a, 0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595,
    0x417b1dbc, 0xb3109ebf, 0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
    0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f, 0xed03a29b, 0x1f682198,
    0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927, 0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38,
    0xdbfc821c, 0x2997011f, 0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
    0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e, 0x4767748a, 0xb50cf789,
    0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859, 0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46,
    0x7198540d, 0x83f3d70e, 0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
    0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de, 0xdde0eb2a, 0x2f8b6829,
    0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c, 0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93,
    0x082f63b7, 0xfa44e0b4, 0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
    0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b, 0xb4091bff, 0x466298fc,
    0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c, 0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033,
    0xa24bb5a6, 0x502036a5, 0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
    0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975, 0x0e330a81, 0xfc588982,
    0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d, 0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622,
    0x38cc2a06, 0xcaa7a905, 0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
    0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8, 0xe52cc12c, 0x1747422f,
    0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff, 0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0,
    0xd3d3e1ab, 0x21b862a8, 0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
    0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78, 0x7fab5e8c, 0x8dc0dd8f,
    0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee, 0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1,
    0x69e9f0d5, 0x9b8273d6, 0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
    0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69, 0xd5cf889d, 0x27a40b9e,
    0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e, 0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

uint32_t tb_crc32c(uint32_t crc, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t tb_masked_crc32c(const void *buf, size_t n)
{
    const uint32_t c = tb_crc32c(0, buf, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protocol-buffer encoding (wire types: 0 varint, 1 fixed64, 2
 * length-delimited, 5 fixed32; all fixed-width fields little-endian) ---- */

typedef struct pb_buf {
    uint8_t *p;
    size_t n, cap;
} pb_buf;

static void pb_put(pb_buf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = PST_MAX(2 * b->cap, b->n + n + 256);
        b->p = pst_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void pb_varint(pb_buf *b, uint64_t v)
{
    uint8_t out[10];
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_put(b, out, n);
}

static void pb_le(pb_buf *b, uint64_t v, int nbytes)
{
    uint8_t out[8];
    for (int i = 0; i < nbytes; i++) out[i] = (uint8_t)(v >> (8 * i));
    pb_put(b, out, (size_t)nbytes);
}

static void pb_key(pb_buf *b, int field, int wire)
{
    pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

static void pb_double(pb_buf *b, int field, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    pb_key(b, field, 1);
    pb_le(b, u, 8);
}

static void pb_float(pb_buf *b, int field, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    pb_key(b, field, 5);
    pb_le(b, u, 4);
}

/* int64: two's complement as a 64-bit varint (negative values take 10 bytes) */
static void pb_int64(pb_buf *b, int field, int64_t v)
{
    pb_key(b, field, 0);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(pb_buf *b, int field, const void *data, size_t n)
{
    pb_key(b, field, 2);
    pb_varint(b, n);
    pb_put(b, data, n);
}

/* ---- the writer ---- */

enum { EV_WALL_TIME = 1, EV_STEP = 2, EV_FILE_VERSION = 3, EV_SUMMARY = 5, EV_SESSION_LOG = 7 };
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE = 2, SESSION_STATUS = 1, SESSION_START = 1 };

struct tb_writer {
    FILE *f;
    char *path;
    bool failed;    /* a write failed: warned once, nothing more is written */
    pb_buf ev, sub; /* the Event being encoded, a nested message */
};

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The first write error, once; nothing is written after it. */
static void write_failed(tb_writer *w, int err)
{
    if (w->failed) return;
    w->failed = true;
    pst_warn("%s: write error on the TensorBoard event file: %s; no more TensorBoard records "
             "are written, training goes on",
             w->path, strerror(err ? err : EIO));
}

/* Frames w->ev as one TFRecord, writes and flushes it: 0, or the errno of
 * the failed write. The event is reset. */
static int write_record(tb_writer *w)
{
    uint8_t head[12], tail[4];
    const uint64_t len = w->ev.n;
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
    uint32_t c = tb_masked_crc32c(head, 8);
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(c >> (8 * i));
    c = tb_masked_crc32c(w->ev.p, w->ev.n);
    for (int i = 0; i < 4; i++) tail[i] = (uint8_t)(c >> (8 * i));
    w->ev.n = 0;
    errno = 0;
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head ||
        fwrite(w->ev.p, 1, (size_t)len, w->f) != len ||
        fwrite(tail, 1, sizeof tail, w->f) != sizeof tail || fflush(w->f) != 0)
        return errno ? errno : EIO;
    return 0;
}

static void event_head(tb_writer *w, int64_t step)
{
    w->ev.n = 0;
    pb_double(&w->ev, EV_WALL_TIME, wall_time());
    pb_int64(&w->ev, EV_STEP, step);
}

void tb_scalars(tb_writer *w, int64_t step, const tb_scalar *v, int n)
{
    if (!w || w->failed) return;
    event_head(w, step);
    pb_buf *val = &w->sub, summary = {0};
    for (int i = 0; i < n; i++) {
        val->n = 0;
        pb_bytes(val, VALUE_TAG, v[i].tag, strlen(v[i].tag));
        pb_float(val, VALUE_SIMPLE, (float)v[i].value);
        pb_bytes(&summary, SUMMARY_VALUE, val->p, val->n);
    }
    pb_bytes(&w->ev, EV_SUMMARY, summary.p, summary.n);
    free(summary.p);
    const int err = write_record(w);
    if (err) write_failed(w, err);
}

/* mkdir -p: every missing directory of `dir`, then `dir`. */
static int make_dirs(const char *dir, pst_err *e)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return pst_fail(e, "%s: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        const char c = *s;
        *s = 0;
        struct stat st;
        if (stat(p, &st) < 0) {
            if (errno != ENOENT || (mkdir(p, 0777) < 0 && errno != EEXIST))
                return pst_fail(e, "%s: cannot create directory %s: %s", dir, p, strerror(errno));
        } else if (!S_ISDIR(st.st_mode)) {
            if (!c) return pst_fail(e, "%s: not a directory", dir);
            return pst_fail(e, "%s: %s is not a directory", dir, p);
        }
        *s = c;
        if (!c) return 0;
    }
}

int tb_check_dir(const char *dir, pst_err *e)
{
    if (!*dir) return pst_fail(e, "'': expected a directory");
    if (make_dirs(dir, e) < 0) return -1;
    /* a probe file: access() says yes to root on a read-only mount */
    char probe[4200], tmp[4300];
    snprintf(probe, sizeof probe, "%s/tfevents-probe", dir);
    int fd = pst_tmp_create(probe, true, tmp, sizeof tmp);
    if (fd < 0) return pst_fail(e, "%s: cannot create a file in it: %s", dir, strerror(errno));
    close(fd);
    unlink(tmp);
    return 0;
}

/* Creates DIR/events.out.tfevents.<seconds>.<host>.<pid>.<n> exclusively. */
static FILE *create_file(const char *dir, char **path)
{
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) < 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *s = host; *s; s++)
        if (*s == '/') *s = '_';
    const long long secs = (long long)time(NULL);
    char p[4800];
    for (int n = 0; n < 1000; n++) {
        snprintf(p, sizeof p, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, secs, host,
                 (long)getpid(), n);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) break;
        FILE *f = fdopen(fd, "wb");
        if (!f) {
            close(fd);
            break;
        }
        *path = pst_strdup(p);
        return f;
    }
    const int err = errno;
    *path = pst_strdup(p);
    errno = err;
    return NULL;
}

int tb_open(tb_writer **out, const char *dir, int64_t start_step, pst_err *e)
{
    *out = NULL;
    if (make_dirs(dir, e) < 0) return -1;
    tb_writer *w = pst_calloc(1, sizeof *w);
    w->f = create_file(dir, &w->path);
    if (!w->f) {
        pst_fail(e, "%s: cannot create the TensorBoard event file: %s", w->path, strerror(errno));
        goto fail;
    }
    static const char version[] = "brain.Event:2";
    event_head(w, 0);
    pb_bytes(&w->ev, EV_FILE_VERSION, version, sizeof version - 1);
    int err = write_record(w);
    if (!err && start_step > 0) {
        const uint8_t start[2] = {SESSION_STATUS << 3, SESSION_START};
        event_head(w, start_step + 1);
        pb_bytes(&w->ev, EV_SESSION_LOG, start, sizeof start);
        err = write_record(w);
    }
    if (err) {
        pst_fail(e, "%s: cannot write the TensorBoard event file: %s", w->path, strerror(err));
        w->failed = true; /* the error says it: no warning on top */
        goto fail;
    }
    *out = w;
    return 0;
fail:
    tb_close(w);
    return -1;
}

const char *tb_path(const tb_writer *w)
{
    return w->path;
}

void tb_close(tb_writer *w)
{
    if (!w) return;
    if (w->f) {
        errno = 0;
        if (fclose(w->f) != 0) write_failed(w, errno);
    }
    free(w->ev.p);
    free(w->sub.p);
    free(w->path);
    free(w);
}
