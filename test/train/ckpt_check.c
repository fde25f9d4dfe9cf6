/*
 * ckpt_check.c - `ckpt_check FILE`: exit 0 when FILE is a complete pstrain
 * checkpoint (ckpt_verify: format attributes and every dataset's checksum),
 * and print its global step; exit 1 with the reason otherwise. The
 * end-to-end tests use it after kill -9.
 */
#include <stdio.h>

#include "pstrain/ckpt.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ckpt_check FILE.h5\n");
        return 2;
    }
    pst_err e = {{0}};
    ckpt_meta m;
    if (ckpt_verify(argv[1], &e) < 0 || ckpt_read_meta(argv[1], &m, &e) < 0) {
        fprintf(stderr, "ckpt_check: %s\n", e.msg);
        return 1;
    }
    printf("%lld\n", (long long)m.global_step);
    ckpt_meta_free(&m);
    return 0;
}
