/* test_tboard.c - the CRC-32C of TensorBoard event files against published
 * check values (the CRC catalogue's "123456789", RFC 3720 B.4) and the
 * bitwise definition; the TFRecord framing of a written file; --tensorboard
 * directory errors. Prints the time of one tb_scalars call (encode, write,
 * flush) for the record; no timed assertion. The event encoding itself is
 * checked by an independent decoder (test/train/test_tensorboard.sh). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "pstrain/common.h"
#include "pstrain/tboard.h"

/* the definition: reflected polynomial 0x82f63b78, one bit at a time */
static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void check_vectors(void)
{
    CHECK(tb_crc32c(0, "123456789", 9) == 0xe3069283u, "check value %08x",
          tb_crc32c(0, "123456789", 9));
    CHECK(tb_crc32c(0, "", 0) == 0, "empty");
    uint8_t b[48];
    memset(b, 0, 32);
    CHECK(tb_crc32c(0, b, 32) == 0x8a9136aau, "32 zeros %08x", tb_crc32c(0, b, 32));
    memset(b, 0xff, 32);
    CHECK(tb_crc32c(0, b, 32) == 0x62a8ab43u, "32 ones %08x", tb_crc32c(0, b, 32));
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
    CHECK(tb_crc32c(0, b, 32) == 0x46dd794eu, "ascending %08x", tb_crc32c(0, b, 32));
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
    CHECK(tb_crc32c(0, b, 32) == 0x113fdb5cu, "descending %08x", tb_crc32c(0, b, 32));
    /* RFC 3720 B.4: an iSCSI read command PDU */
    static const uint8_t pdu[48] = {0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0,    0, 0, 0,    0, 0, 0, 0,
                                    0x14, 0,    0, 0, 0, 0, 4, 0, 0,    0, 0, 0x14, 0, 0, 0, 0x18,
                                    0x28, 0,    0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0,    0, 0, 0, 0};
    CHECK(tb_crc32c(0, pdu, 48) == 0xd9963a56u, "iSCSI PDU %08x", tb_crc32c(0, pdu, 48));
    /* the mask of TFRecord framing */
    CHECK(tb_masked_crc32c("", 0) == 0xa282ead8u, "masked empty %08x", tb_masked_crc32c("", 0));
    const uint32_t c = 0xe3069283u;
    CHECK(tb_masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u,
          "masked check value");
}

/* every byte value at every position, and chained pieces */
static void check_against_definition(void)
{
    uint8_t buf[1031];
    uint64_t s = 27;
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)pst_splitmix64(&s);
    for (size_t n = 0; n <= sizeof buf; n += 13)
        CHECK(tb_crc32c(0, buf, n) == crc_bitwise(buf, n), "random %zu bytes", n);
    for (size_t cut = 0; cut <= sizeof buf; cut += 97)
        CHECK(tb_crc32c(tb_crc32c(0, buf, cut), buf + cut, sizeof buf - cut) ==
                  crc_bitwise(buf, sizeof buf),
              "chained at %zu", cut);
    for (int v = 0; v < 256; v++) {
        uint8_t one = (uint8_t)v;
        CHECK(tb_crc32c(0, &one, 1) == crc_bitwise(&one, 1), "byte %02x", v);
    }
}

/* A written file: records framed with valid masked CRCs, the first one
 * holding the file version; the time of one flushed Event. */
static void check_file(const char *dir)
{
    pst_err e = {{0}};
    tb_writer *w;
    CHECK(tb_open(&w, dir, 0, &e) == 0, "tb_open: %s", e.msg);
    if (!w) return;
    char path[4096];
    snprintf(path, sizeof path, "%s", tb_path(w));
    CHECK(strstr(path, "/events.out.tfevents.") != NULL, "name %s", path);
    const tb_scalar v[11] = {
        {"train/loss", 0.5},           {"train/accuracy", 0.25},   {"train/lr", 0.01},
        {"train/images_per_sec", 1e4}, {"timing/wait_data", 1e-4}, {"timing/pull", 2e-4},
        {"timing/compute", 3e-3},      {"timing/push", 2e-4},      {"timing/wait_version", 0.0},
        {"timing/ps_apply", 1e-3},     {"timing/ps_idle", 2e-3}};
    const int N = 2000;
    double t0 = pst_now();
    for (int i = 1; i <= N; i++) tb_scalars(w, i, v, 11);
    double dt = (pst_now() - t0) / N;
    printf("tb_scalars (11 scalars, written and flushed): %.2f us per call\n", dt * 1e6);
    tb_writer *w2;
    CHECK(tb_open(&w2, dir, 0, &e) == 0, "second writer: %s", e.msg);
    if (w2) {
        CHECK(strcmp(tb_path(w2), path) != 0, "two writers share %s", path);
        tb_close(w2);
    }
    tb_close(w);

    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "%s: %s", path, strerror(errno));
    if (!f) return;
    int records = 0;
    uint8_t head[12], data[4096], tail[4];
    while (fread(head, 1, 12, f) == 12) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)head[i] << (8 * i);
        CHECK(le32(head + 8) == tb_masked_crc32c(head, 8), "record %d: length CRC", records);
        if (len > sizeof data || fread(data, 1, len, f) != len || fread(tail, 1, 4, f) != 4) {
            CHECK(0, "record %d: truncated (length %llu)", records, (unsigned long long)len);
            break;
        }
        CHECK(le32(tail) == tb_masked_crc32c(data, len), "record %d: data CRC", records);
        if (records == 0)
            CHECK(len > 13 && !memcmp(data + len - 13, "brain.Event:2", 13),
                  "first record is not the file version");
        records++;
    }
    CHECK(feof(f) && records == N + 1, "%d records, expected %d", records, N + 1);
    fclose(f);
    unlink(path);
}

static void check_dirs(const char *tmp)
{
    pst_err e = {{0}};
    char p[4400], file[4200];
    snprintf(p, sizeof p, "%s/a/b/c", tmp);
    CHECK(tb_check_dir(p, &e) == 0, "nested: %s", e.msg);
    struct stat st;
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode), "%s not made", p);
    snprintf(file, sizeof file, "%s/file", tmp);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    CHECK(tb_check_dir(file, &e) < 0 && strstr(e.msg, file) && strstr(e.msg, "not a directory"),
          "a file as DIR: '%s'", e.msg);
    snprintf(p, sizeof p, "%s/sub", file);
    CHECK(tb_check_dir(p, &e) < 0 && strstr(e.msg, p), "under a file: '%s'", e.msg);
    tb_writer *w = NULL;
    CHECK(tb_open(&w, p, 0, &e) < 0 && !w && strstr(e.msg, p), "tb_open under a file: '%s'", e.msg);
}

int main(void)
{
    check_vectors();
    check_against_definition();
    char tmp[] = "/tmp/test-tboard.XXXXXX";
    if (!mkdtemp(tmp)) CHECK_SKIP("mkdtemp: %s", strerror(errno));
    char dir[64];
    snprintf(dir, sizeof dir, "%s/run", tmp);
    check_file(dir);
    check_dirs(tmp);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return check_exit();
}
