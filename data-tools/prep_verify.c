/*
 * prep_verify.c - `pstrain-prep verify FILE.h5`: exit 0 only for a sound data
 * set. The checks are h5ds_verify's, the same ones `pstrain train` makes
 * when it opens a data set.
 */
#include <string.h>

#include "prep.h"
#include "pstrain/common.h"
#include "pstrain/usage.h"
#include "pstrain/h5ds.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: pstrain-prep verify FILE.h5\n"
                 "\n"
                 "Checks that FILE.h5 is a sound pstrain data set: format attributes, shapes,\n"
                 "dtypes and counts of images and labels, labels within [0, num_classes),\n"
                 "mean/std present and finite, class names; for encoded storage the\n"
                 "format_version/storage pair, the offsets into the JPEG byte stream (0 first,\n"
                 "increasing, the last one its size) and image heights/widths >= 1 (no image\n"
                 "is decoded; every chunk carries a Fletcher-32 checksum checked on reading).\n"
                 "Prints each problem on its own line (FILE: problem) and exits 1, or prints\n"
                 "'FILE: ok ...' and exits 0.\n");
}

static void print_problem(void *ctx, const char *problem)
{
    printf("%s: %s\n", (const char *)ctx, problem);
}

int prep_cmd_verify(int argc, char **argv)
{
    int rc = prep_one_file_args(argc, argv, usage);
    if (rc >= 0) return rc;
    const char *path = argv[1];
    pst_err e;
    int n = h5ds_verify(path, print_problem, (void *)path, &e);
    if (n < 0) {
        pst_error("%s", e.msg);
        return 1;
    }
    if (n > 0) {
        fflush(stdout);
        pst_error("%s: %d problem%s", path, n, n == 1 ? "" : "s");
        return 1;
    }
    /* sound: summarise what was checked */
    h5ds ds;
    if (h5ds_open(&ds, path, &e) < 0) {
        pst_error("%s", e.msg);
        return 1;
    }
    printf("%s: ok (", path);
    for (int i = 0; i < ds.nsplits; i++)
        printf("%s%s %lld", i ? ", " : "", ds.splits[i].name, (long long)ds.splits[i].count);
    if (ds.storage == H5DS_STORE_ENCODED) {
        int64_t bytes = 0;
        for (int i = 0; i < ds.nsplits; i++) bytes += ds.splits[i].encoded_bytes;
        printf(" encoded images, %lld bytes of JPEG, %d channel%s, %d classes)\n", (long long)bytes,
               ds.channels, ds.channels == 1 ? "" : "s", ds.num_classes);
    } else {
        printf(" images of %dx%dx%d, %d classes)\n", ds.height, ds.width, ds.channels,
               ds.num_classes);
    }
    h5ds_close(&ds);
    return 0;
}
