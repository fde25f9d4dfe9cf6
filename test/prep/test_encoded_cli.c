/*
 * test_encoded_cli.c - pstrain-prep info, verify and preview on data sets
 * with encoded storage (format_version 3): info shows the storage mode, the
 * encoded bytes per split and per image and the range of image sizes;
 * verify says ok for a sound file and names the problem of a damaged one;
 * preview decodes real JPEGs (made with jpg_encode) into thumbnails whose
 * longer side is the tile's, centred on black, and warns about an image
 * that does not decode.
 */
#include <hdf5.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "encoded_fixture.h"
#include "font5x7.h"
#include "pngio.h"
#include "prep_run.h"
#include "pstrain/jpeg.h"

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

/* Pixel (y, x) of an RGB image. */
static const uint8_t *at(const pngio_image *im, int y, int x)
{
    return im->pixels + ((size_t)y * (size_t)im->width + (size_t)x) * 3;
}

static bool near(const uint8_t *p, int r, int g, int b, int tol)
{
    return abs(p[0] - r) <= tol && abs(p[1] - g) <= tol && abs(p[2] - b) <= tol;
}

static void test_preview(void)
{
    enum { T = 32, SEP = 2 };
    const char *path = scratch_path("jpegs.h5"), *png = scratch_path("grid.png");
    /* solid colours: 40x20 red, 10x30 green, 64x64 blue, and bytes that are no JPEG */
    const int ws[3] = {40, 10, 64}, hs[3] = {20, 30, 64};
    const uint8_t rgb[3][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
    h5w_opts o = {.storage = H5DS_STORE_ENCODED,
                  .channels = 3,
                  .num_classes = ENC_K,
                  .class_names = enc_classes,
                  .force = true};
    pst_err e = {""};
    h5w *w = NULL;
    int rc = h5w_create(&w, path, &o, &e);
    if (rc == 0) rc = h5w_split_begin(w, "train", 4, &e);
    for (int i = 0; i < 3 && rc == 0; i++) {
        size_t np = (size_t)ws[i] * (size_t)hs[i];
        uint8_t *px = malloc(np * 3), *jpg = NULL;
        size_t n = 0;
        for (size_t j = 0; j < np * 3; j++) px[j] = rgb[i][j % 3];
        rc = jpg_encode(px, ws[i], hs[i], 3, 95, &jpg, &n, &e);
        if (rc == 0) rc = h5w_split_append_encoded(w, jpg, n, hs[i], ws[i], i, px, (int64_t)np, &e);
        free(px);
        free(jpg);
    }
    const uint8_t junk[5] = {'h', 'e', 'l', 'l', 'o'}, one[3] = {1, 1, 1};
    if (rc == 0) rc = h5w_split_append_encoded(w, junk, 5, 7, 7, 0, one, 1, &e);
    if (rc == 0) rc = h5w_split_end(w, &e);
    if (rc == 0)
        rc = h5w_commit(w, &e);
    else
        h5w_abort(w);
    CHECK(rc == 0, "writing JPEGs: %s", e.msg);
    if (rc) return;

    prep_out r;
    prep_run(&r, (const char *[]){"preview", path, "--first", "--tile", "32", "-o", png, NULL});
    CHECK(r.status == 0, "preview: %d\n%s", r.status, r.err);
    CHECK(strstr(r.err, "/train example 3: ") && strstr(r.err, "(tile left black)"),
          "warning for the broken image:\n%s", r.err);
    pngio_image im = {0};
    pngio_opts po = {.channels = 3};
    rc = pngio_read(png, &po, &im, &e);
    CHECK(rc == 0, "reading %s: %s", png, e.msg);
    if (rc) return;
    /* 2 x 2 cells of a 32 px tile and the label strip, 2 px separators */
    const int cell_h = T + FONT_CELL_H + 2, y0 = SEP, y1 = SEP + cell_h + SEP;
    const int x0 = SEP, x1 = SEP + T + SEP;
    CHECK(im.width == 2 * T + 3 * SEP && im.height == 2 * cell_h + 3 * SEP, "grid %dx%d", im.width,
          im.height);
    /* red 40x20 -> 32x16, rows 8..23 of its tile */
    CHECK(near(at(&im, y0 + 16, x0 + 16), 255, 0, 0, 4) &&
              near(at(&im, y0 + 9, x0 + 1), 255, 0, 0, 4),
          "red thumbnail %d,%d,%d", at(&im, y0 + 16, x0 + 16)[0], at(&im, y0 + 16, x0 + 16)[1],
          at(&im, y0 + 16, x0 + 16)[2]);
    CHECK(near(at(&im, y0 + 6, x0 + 16), 0, 0, 0, 0) && near(at(&im, y0 + 25, x0 + 16), 0, 0, 0, 0),
          "black above and below the red thumbnail");
    /* green 10x30 -> 11x32, columns 10..20 */
    CHECK(near(at(&im, y0 + 16, x1 + 15), 0, 255, 0, 4) &&
              near(at(&im, y0 + 1, x1 + 11), 0, 255, 0, 4),
          "green thumbnail");
    CHECK(near(at(&im, y0 + 16, x1 + 8), 0, 0, 0, 0) && near(at(&im, y0 + 16, x1 + 22), 0, 0, 0, 0),
          "black beside the green thumbnail");
    /* blue fills its tile; the broken image's tile stays black */
    CHECK(near(at(&im, y1, x0), 0, 0, 255, 4) &&
              near(at(&im, y1 + T - 1, x0 + T - 1), 0, 0, 255, 4),
          "blue tile");
    CHECK(near(at(&im, y1 + 16, x1 + 16), 0, 0, 0, 0), "broken image: black tile");
    pngio_image_free(&im);

    prep_run(&r, (const char *[]){"preview", path, "--scale", "2", "-o", png, NULL});
    CHECK(r.status == 1 && strstr(r.err, "--scale is for pixels data sets; this one is encoded"),
          "--scale on encoded: %d %s", r.status, r.err);
    prep_run(&r, (const char *[]){"preview", path, "--tile", "4", "-o", png, NULL});
    CHECK(r.status == 2 && strstr(r.err, "--tile '4', expected 8-1024"), "--tile 4: %d %s",
          r.status, r.err);
}

int main(void)
{
    scratch_dir();
    test_info_verify();
    test_preview();
    scratch_cleanup();
    return check_exit();
}
