/* ckpt_cmp.c - test tool: are two checkpoints of the same run bitwise equal?
 *
 *   ckpt_cmp A.h5 B.h5
 *
 * Builds the model named in A's attributes (so the variable list is the
 * model's own, as a training loop would), loads both checkpoints with
 * ckpt_read (variables, optimizer slots and moving averages) and compares
 * every float bitwise, plus the run state (global step, epoch, data cursor,
 * examples, seed). Checkpoints with averages and without are different. Exit 0 if equal, 1 with the
 * first differing variable named, 2 on a load error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/ckpt.h"
#include "pstrain/model.h"
#include "pstrain/optim.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_cmp A.h5 B.h5\n");
        return 2;
    }
    pst_err e;
    ckpt_meta ma;
    if (ckpt_read_meta(argv[1], &ma, &e) < 0) {
        fprintf(stderr, "ckpt_cmp: %s\n", e.msg);
        return 2;
    }
    nn_model_cfg mc = {.name = ma.model_name,
                       .height = ma.height,
                       .width = ma.width,
                       .channels = ma.channels,
                       .num_classes = ma.num_classes,
                       .max_batch = 1,
                       .seed = ma.seed};
    nn_model *m = NULL;
    if (nn_model_new(&m, &mc, &e) < 0) {
        fprintf(stderr, "ckpt_cmp: %s\n", e.msg);
        return 2;
    }
    int nvars = nn_model_nvars(m);
    nn_var *vars = malloc(sizeof *vars * (size_t)nvars);
    for (int i = 0; i < nvars; i++) vars[i] = *nn_model_var(m, i);
    size_t n = nn_model_size(m);
    int ns = opt_nslots(ma.opt.kind);
    size_t total = n * (size_t)(ns + 2); /* params, slots, averages */
    float *a = calloc(total, sizeof(float)), *b = calloc(total, sizeof(float));
    ckpt_expect x = {.model_name = ma.model_name,
                     .vars = vars,
                     .nvars = nvars,
                     .check_opt = true,
                     .opt_kind = ma.opt.kind};
    float *avg_a = a + n * (size_t)(ns + 1), *avg_b = b + n * (size_t)(ns + 1);
    int rc = 2;
    ckpt_meta ra = {0}, rb = {0};
    x.averages = avg_a;
    if (ckpt_read(argv[1], &x, a, ns ? a + n : NULL, n, &ra, &e) < 0) {
        fprintf(stderr, "ckpt_cmp: %s\n", e.msg);
        goto out;
    }
    x.averages = avg_b;
    if (ckpt_read(argv[2], &x, b, ns ? b + n : NULL, n, &rb, &e) < 0) {
        fprintf(stderr, "ckpt_cmp: %s\n", e.msg);
        goto out;
    }
    rc = 0;
    if (ra.has_averages != rb.has_averages) {
        fprintf(stderr, "ckpt_cmp: %s has moving averages, %s has none\n",
                ra.has_averages ? argv[1] : argv[2], ra.has_averages ? argv[2] : argv[1]);
        rc = 1;
        goto out;
    }
    if (ra.has_averages)
        for (int i = 0; i < nvars; i++) {
            const nn_var *v = &vars[i];
            const float *pa = avg_a + v->offset, *pb = avg_b + v->offset;
            if (memcmp(pa, pb, v->size * sizeof(float))) {
                size_t j = 0;
                while (!memcmp(pa + j, pb + j, sizeof(float))) j++;
                fprintf(stderr,
                        "ckpt_cmp: average of %s differs first at element %zu: %.9g vs "
                        "%.9g\n",
                        v->name, j, (double)pa[j], (double)pb[j]);
                rc = 1;
                goto out;
            }
        }
    for (int i = 0; i < nvars; i++) {
        const nn_var *v = &vars[i];
        for (int s = 0; s <= (v->trainable ? ns : 0); s++) {
            size_t off = (size_t)s * n + v->offset;
            if (memcmp(a + off, b + off, v->size * sizeof(float))) {
                size_t j = 0;
                while (!memcmp(a + off + j, b + off + j, sizeof(float))) j++;
                fprintf(stderr, "ckpt_cmp: %s%s%s differs first at element %zu: %.9g vs %.9g\n",
                        v->name, s ? " slot " : "", s ? ckpt_slot_name(ma.opt.kind, s - 1) : "", j,
                        (double)a[off + j], (double)b[off + j]);
                rc = 1;
                goto out;
            }
        }
    }
    if (ra.global_step != rb.global_step || ra.epoch != rb.epoch ||
        ra.epoch_batch != rb.epoch_batch || ra.next_batch != rb.next_batch ||
        ra.examples != rb.examples || ra.seed != rb.seed) {
        fprintf(stderr,
                "ckpt_cmp: run state differs: step %lld/%lld epoch %d/%d epoch_batch %lld/%lld "
                "next_batch %lld/%lld examples %lld/%lld\n",
                (long long)ra.global_step, (long long)rb.global_step, ra.epoch, rb.epoch,
                (long long)ra.epoch_batch, (long long)rb.epoch_batch, (long long)ra.next_batch,
                (long long)rb.next_batch, (long long)ra.examples, (long long)rb.examples);
        rc = 1;
        goto out;
    }
    printf("ckpt_cmp: %s and %s are bitwise equal (%d variables, %zu floats, %d slot(s)%s, step "
           "%lld)\n",
           argv[1], argv[2], nvars, n, ns, ra.has_averages ? ", averages" : "",
           (long long)ra.global_step);
out:
    ckpt_meta_free(&ma);
    ckpt_meta_free(&ra);
    ckpt_meta_free(&rb);
    nn_model_free(m);
    free(vars);
    free(a);
    free(b);
    return rc;
}
