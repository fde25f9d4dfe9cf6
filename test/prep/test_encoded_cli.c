/*
 * test_encoded_cli.c - pstrain-prep info, verify and preview on data sets
 * with encoded storage (format_version 3): info shows the storage mode, the
 * encoded bytes per split and per image and the range of image sizes;
 * verify says ok for a sound file and names the problem of a damaged one.
 */
#include <hdf5.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "encoded_fixture.h"
#include "prep_run.h"

enum { NT = 40, NV = 6 };

static void test_info_verify(void)
{
    const char *path = scratch_path("enc.h5");
    pst_err e = {""};
    CHECK(enc_write(path, NT, NV, &e) == 0, "write: %s", e.msg);
    int64_t tbytes = 0, hmin = 1 << 30, hmax = 0, wmin = 1 << 30, wmax = 0;
    double hsum = 0, wsum = 0;
    for (int64_t i = 0; i < NT; i++) {
        tbytes += (int64_t)enc_len(0, i);
        hmin = PST_MIN(hmin, enc_height(i)), hmax = PST_MAX(hmax, enc_height(i));
        wmin = PST_MIN(wmin, enc_width(i)), wmax = PST_MAX(wmax, enc_width(i));
        hsum += enc_height(i), wsum += enc_width(i);
    }
    prep_out r;
    prep_run(&r, (const char *[]){"info", path, NULL});
    CHECK(r.status == 0, "info: %d\n%s", r.status, r.err);
    char want[256];
    CHECK(strstr(r.out, "pstrain-dataset version 3") && strstr(r.out, "storage   encoded") &&
              strstr(r.out, "decoded to 3 channels"),
          "info header:\n%s", r.out);
    snprintf(want, sizeof want, "train         40 images  %.1f kB encoded, %.0f B per image",
             (double)tbytes / 1e3, (double)tbytes / NT);
    CHECK(strstr(r.out, want), "info expected '%s' in:\n%s", want, r.out);
    snprintf(want, sizeof want, "height %lld..%lld (mean %.1f), width %lld..%lld (mean %.1f)",
             (long long)hmin, (long long)hmax, hsum / NT, (long long)wmin, (long long)wmax,
             wsum / NT);
    CHECK(strstr(r.out, want), "info expected '%s' in:\n%s", want, r.out);
    CHECK(strstr(r.out, "chunks of 64 B, uncompressed, Fletcher-32"), "info chunks:\n%s", r.out);
    /* the class table counts labels as for pixels */
    CHECK(strstr(r.out, "wombat") && strstr(r.out, "        13         2"), "info classes:\n%s",
          r.out);

    prep_run(&r, (const char *[]){"verify", path, NULL});
    int64_t vbytes = 0;
    for (int64_t i = 0; i < NV; i++) vbytes += (int64_t)enc_len(1, i);
    snprintf(want, sizeof want, "ok (train 40, val 6 encoded images, %lld bytes of JPEG",
             (long long)(tbytes + vbytes));
    CHECK(r.status == 0 && strstr(r.out, want), "verify: %d, expected '%s' in\n%s%s", r.status,
          want, r.out, r.err);

    /* a damaged copy: offsets no longer increasing */
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/val/offsets", H5P_DEFAULT), fs = H5Dget_space(d);
    hsize_t at = 2, one = 1;
    int64_t v = 0;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &one, NULL);
    H5Dwrite(d, H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, &v);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    H5Fclose(f);
    prep_run(&r, (const char *[]){"verify", path, NULL});
    snprintf(want, sizeof want, "%s: /val/offsets[2] = 0 after offsets[1] = ", path);
    CHECK(r.status == 1 && strstr(r.out, want) && strstr(r.err, "1 problem"),
          "verify damaged: %d\n%s%s", r.status, r.out, r.err);
    prep_run(&r, (const char *[]){"info", path, NULL});
    CHECK(r.status == 1 && strstr(r.err, "/val/offsets[2]") && !strchr(r.err, '\n')[1],
          "info damaged: %d\n%s", r.status, r.err);
}

int main(void)
{
    scratch_dir();
    test_info_verify();
    scratch_cleanup();
    return check_exit();
}
