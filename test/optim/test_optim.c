/* test_optim.c - optimizers against hand-derived values and a double
 * reference, sub-range (PS shard) updates against a whole-slab update, and the
 * learning-rate schedule at chosen steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pstrain/optim.h"

/* Runs `steps` updates of one element with the gradients g[] and returns the
 * weight after each step in w_out[]. */
static void run1(const opt_cfg *c, float lr, float w0, const float *g, int steps, float *w_out)
{
    float w = w0, slots[2];
    opt_init_slots(c, slots, 1, 1);
    for (int t = 1; t <= steps; t++) {
        opt_apply(c, lr, t, &w, &g[t - 1], slots, 1, 1);
        w_out[t - 1] = w;
    }
}

/* Hand-derived numbers for a few steps of each optimizer. */
static void test_hand_values(void)
{
    float w[3];

    /* sgd, lr 0.1, w0 1, g 0.5: 1 - 0.05 = 0.95, 0.90, 0.85 */
    opt_cfg c = opt_defaults(OPT_SGD);
    const float g_half[3] = {0.5f, 0.5f, 0.5f};
    run1(&c, 0.1f, 1.0f, g_half, 3, w);
    CHECK_CLOSE(w[0], 0.95, 1e-6, 0, "sgd step 1: %g", w[0]);
    CHECK_CLOSE(w[1], 0.90, 1e-6, 0, "sgd step 2: %g", w[1]);
    CHECK_CLOSE(w[2], 0.85, 1e-6, 0, "sgd step 3: %g", w[2]);

    /* momentum 0.9, lr 0.1, g 1: a = 1, 1.9, 2.71; w = -0.1, -0.29, -0.561 */
    c = opt_defaults(OPT_MOMENTUM);
    const float g_one[3] = {1, 1, 1};
    run1(&c, 0.1f, 0.0f, g_one, 3, w);
    CHECK_CLOSE(w[0], -0.1, 1e-6, 0, "momentum step 1: %g", w[0]);
    CHECK_CLOSE(w[1], -0.29, 1e-6, 0, "momentum step 2: %g", w[1]);
    CHECK_CLOSE(w[2], -0.561, 1e-6, 0, "momentum step 3: %g", w[2]);

    /* nesterov: w -= lr*(g + m*a): -0.1*(1+0.9) = -0.19;
     * -0.19 - 0.1*(1+0.9*1.9) = -0.461; -0.461 - 0.1*(1+0.9*2.71) = -0.8049 */
    c.nesterov = true;
    run1(&c, 0.1f, 0.0f, g_one, 3, w);
    CHECK_CLOSE(w[0], -0.19, 1e-6, 0, "nesterov step 1: %g", w[0]);
    CHECK_CLOSE(w[1], -0.461, 1e-6, 0, "nesterov step 2: %g", w[1]);
    CHECK_CLOSE(w[2], -0.8049, 1e-6, 0, "nesterov step 3: %g", w[2]);

    /* rmsprop d 0.9, m 0.9, eps 1, lr 0.1, g 2, ms starts at 1:
     * ms = 1 + (4-1)*0.1 = 1.3; mom = 0.2/sqrt(2.3) = 0.131876095; w = -0.131876095
     * ms = 1.3 + 2.7*0.1 = 1.57; mom = 0.9*0.131876095 + 0.2/sqrt(2.57) = 0.243445058;
     *   w = -0.375321152
     * ms = 1.57 + 2.43*0.1 = 1.813; mom = 0.9*0.243445058 + 0.2/sqrt(2.813) = 0.338346911;
     *   w = -0.713668064 */
    c = opt_defaults(OPT_RMSPROP);
    const float g_two[3] = {2, 2, 2};
    run1(&c, 0.1f, 0.0f, g_two, 3, w);
    CHECK_CLOSE(w[0], -0.131876095, 1e-6, 0, "rmsprop step 1: %.9g", w[0]);
    CHECK_CLOSE(w[1], -0.375321152, 1e-6, 0, "rmsprop step 2: %.9g", w[1]);
    CHECK_CLOSE(w[2], -0.713668064, 1e-6, 0, "rmsprop step 3: %.9g", w[2]);

    /* adam b1 0.9, b2 0.999, eps 1e-8, lr 0.001, g = 1, -0.5, 2:
     * t=1: m 0.1, v 0.001, lr_t = 0.001*sqrt(0.001)/0.1; step = lr_t*m/sqrt(v) ~ lr:
     *   w = -0.000999999684
     * t=2: m 0.04, v 0.001249, lr_t = 0.001*sqrt(1-0.999^2)/(1-0.81); w = -0.00126633665
     * t=3: m 0.236, v 0.005247751; w = -0.00192444816 */
    c = opt_defaults(OPT_ADAM);
    const float g_adam[3] = {1.0f, -0.5f, 2.0f};
    run1(&c, 0.001f, 0.0f, g_adam, 3, w);
    CHECK_CLOSE(w[0], -0.000999999684, 1e-9, 1e-5, "adam step 1: %.9g", w[0]);
    CHECK_CLOSE(w[1], -0.00126633665, 1e-9, 1e-5, "adam step 2: %.9g", w[1]);
    CHECK_CLOSE(w[2], -0.00192444816, 1e-9, 1e-5, "adam step 3: %.9g", w[2]);
}

/* The TF update rules in double, one element at a time. */
static void ref_step(const opt_cfg *c, double lr, long t, double *w, double g, double *s0,
                     double *s1)
{
    switch (c->kind) {
    case OPT_SGD:
        *w -= lr * g;
        break;
    case OPT_MOMENTUM:
        *s0 = c->momentum * *s0 + g;
        *w -= c->nesterov ? lr * (g + c->momentum * *s0) : lr * *s0;
        break;
    case OPT_RMSPROP:
        *s0 = c->rms_decay * *s0 + (1 - (double)c->rms_decay) * g * g;
        *s1 = c->momentum * *s1 + lr * g / sqrt(*s0 + c->rms_eps);
        *w -= *s1;
        break;
    case OPT_ADAM: {
        double b1 = c->beta1, b2 = c->beta2;
        double lr_t = lr * sqrt(1 - pow(b2, (double)t)) / (1 - pow(b1, (double)t));
        *s0 = b1 * *s0 + (1 - b1) * g;
        *s1 = b2 * *s1 + (1 - b2) * g * g;
        *w -= lr_t * *s0 / (sqrt(*s1) + c->adam_eps);
        break;
    }
    }
}

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Many elements, several steps, odd n (vector loop + remainder): float
 * kernel against the double reference; then the same updates applied as
 * three shards (own slot arrays, stride = shard size) and as sub-ranges of
 * the whole slot array (stride = n) must give the whole-slab result. */
static void test_against_reference_and_shards(const opt_cfg *c, float lr)
{
    enum { N = 103, STEPS = 6 };
    const size_t cuts[] = {0, 40, 77, N};
    int ns = opt_nslots(c->kind);
    float w[N], ws[N], wr[N], g[STEPS][N];
    float *slots = calloc(2 * N, sizeof(float)), *slots_r = calloc(2 * N, sizeof(float));
    float *shard_slots[3];
    double wd[N], s0[N], s1[N];
    unsigned seed = 7;
    for (int j = 0; j < N; j++) w[j] = ws[j] = wr[j] = frand(&seed), wd[j] = w[j];
    for (int t = 0; t < STEPS; t++)
        for (int j = 0; j < N; j++) g[t][j] = frand(&seed) * (j % 5 == 0 ? 10.0f : 1.0f);

    opt_init_slots(c, slots, N, N);
    opt_init_slots(c, slots_r, N, N);
    for (int j = 0; j < N; j++) {
        s0[j] = ns > 0 ? slots[j] : 0;
        s1[j] = ns > 1 ? slots[N + j] : 0;
    }
    for (int k = 0; k < 3; k++) {
        size_t n = cuts[k + 1] - cuts[k];
        shard_slots[k] = calloc(2 * n, sizeof(float));
        opt_init_slots(c, shard_slots[k], n, n);
    }
    for (int t = 1; t <= STEPS; t++) {
        opt_apply(c, lr, t, w, g[t - 1], slots, N, N);
        for (int k = 0; k < 3; k++) {
            size_t off = cuts[k], n = cuts[k + 1] - cuts[k];
            opt_apply(c, lr, t, ws + off, g[t - 1] + off, shard_slots[k], n, n);
            opt_apply(c, lr, t, wr + off, g[t - 1] + off, slots_r + off, N, n);
        }
        for (int j = 0; j < N; j++) ref_step(c, lr, t, &wd[j], g[t - 1][j], &s0[j], &s1[j]);
    }
    double maxerr = 0, maxshard = 0, maxrange = 0;
    for (int j = 0; j < N; j++) {
        maxerr = fmax(maxerr, fabs(w[j] - wd[j]) / (1e-3 + fabs(wd[j])));
        maxshard = fmax(maxshard, fabs((double)w[j] - ws[j]));
        maxrange = fmax(maxrange, fabs((double)w[j] - wr[j]));
    }
    CHECK(maxerr < 1e-5, "%s%s: float vs double reference rel err %g", opt_name(c->kind),
          c->nesterov ? "+nesterov" : "", maxerr);
    CHECK(maxshard <= 1e-6, "%s: shard update differs from whole slab by %g", opt_name(c->kind),
          maxshard);
    CHECK(maxrange <= 1e-6, "%s: sub-range update differs from whole slab by %g", opt_name(c->kind),
          maxrange);
    /* the slots of a shard equal the matching range of the whole slab's slots */
    for (int s = 0; s < ns; s++)
        for (int k = 0; k < 3; k++) {
            size_t off = cuts[k], n = cuts[k + 1] - cuts[k];
            double d = 0;
            for (size_t j = 0; j < n; j++)
                d = fmax(d, fabs((double)shard_slots[k][s * n + j] - slots[s * N + off + j]));
            CHECK(d <= 1e-6, "%s: slot %d of shard %d differs by %g", opt_name(c->kind), s, k, d);
        }
    for (int k = 0; k < 3; k++) free(shard_slots[k]);
    free(slots), free(slots_r);
}

static void test_names(void)
{
    opt_kind k;
    const char *names[] = {"sgd", "momentum", "rmsprop", "adam"};
    const int nslots[] = {0, 1, 2, 2};
    for (int i = 0; i < 4; i++) {
        CHECK(opt_parse(names[i], &k) == 0 && (int)k == i, "parse %s", names[i]);
        CHECK(strcmp(opt_name((opt_kind)i), names[i]) == 0, "name %d", i);
        CHECK(opt_nslots((opt_kind)i) == nslots[i], "nslots %s", names[i]);
    }
    CHECK(opt_parse("adagrad", &k) == -1, "unknown name accepted");
    opt_cfg r = opt_defaults(OPT_RMSPROP);
    CHECK(r.rms_decay == 0.9f && r.momentum == 0.9f && r.rms_eps == 1.0f, "rmsprop defaults");
    opt_cfg a = opt_defaults(OPT_ADAM);
    CHECK(a.beta1 == 0.9f && a.beta2 == 0.999f && a.adam_eps == 1e-8f, "adam defaults");
    float s[6];
    opt_init_slots(&r, s, 3, 3);
    CHECK(s[0] == 1 && s[2] == 1 && s[3] == 0 && s[5] == 0, "rmsprop slots: ms 1, mom 0");
}

static void test_schedule(void)
{
    /* Inception: base 0.1, 0.94 every 2 epochs, 100 steps per epoch:
     * decay steps = 200, lr = 0.1 * 0.94^floor(step/200) */
    lr_schedule s = {.base = 0.1f, .decay = 0.94f, .decay_epochs = 2, .steps_per_epoch = 100};
    const struct {
        long step;
        double lr;
    } want[] = {
        {0, 0.1},       {1, 0.1},       {199, 0.1},       {200, 0.094},         {399, 0.094},
        {400, 0.08836}, {599, 0.08836}, {600, 0.0830584}, {1000, 0.0733904022}, /* 0.1*0.94^5 */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        float lr = lr_at(&s, want[i].step);
        CHECK_CLOSE(lr, want[i].lr, 0, 1e-6, "inception step %ld: %.9g want %.9g", want[i].step, lr,
                    want[i].lr);
    }
    /* fractional decay epochs: every half epoch = 50 steps */
    s.decay_epochs = 0.5f;
    CHECK_CLOSE(lr_at(&s, 49), 0.1, 0, 1e-6, "half-epoch decay step 49");
    CHECK_CLOSE(lr_at(&s, 50), 0.094, 0, 1e-6, "half-epoch decay step 50");
    CHECK_CLOSE(lr_at(&s, 150), 0.1 * 0.94 * 0.94 * 0.94, 0, 1e-6, "half-epoch decay step 150");
    /* constant: decay 1, decay 0, or no decay epochs */
    lr_schedule c1 = {.base = 0.01f, .decay = 1.0f, .decay_epochs = 2, .steps_per_epoch = 100};
    lr_schedule c0 = {.base = 0.01f, .decay = 0.0f, .decay_epochs = 0, .steps_per_epoch = 100};
    const long steps[] = {0, 1, 199, 200, 12345, 1000000};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        CHECK(lr_at(&c1, steps[i]) == 0.01f, "constant (decay 1) at %ld", steps[i]);
        CHECK(lr_at(&c0, steps[i]) == 0.01f, "constant (decay 0) at %ld", steps[i]);
    }
}

/* Gradual warm-up (Goyal et al. 2017): step s < N = E * steps_per_epoch runs
 * at sched(s) * (0.1 + 0.9 s / N), rising from a tenth to the full rate at
 * step N; the decay keeps counting from step 0. */
static void test_warmup(void)
{
    lr_schedule w = {.base = 0.1f, .decay = 1, .steps_per_epoch = 100, .warmup_epochs = 2};
    const struct {
        long step;
        double lr;
    } want[] = {{0, 0.01},    {1, 0.01 + 0.09 / 200},
                {100, 0.055}, {199, 0.1 * (0.1 + 0.9 * 199 / 200.0)},
                {200, 0.1},   {201, 0.1},
                {100000, 0.1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_CLOSE(lr_at(&w, want[i].step), want[i].lr, 0, 1e-7,
                    "warm-up step %ld: %.9g want %.9g", want[i].step,
                    (double)lr_at(&w, want[i].step), want[i].lr);
    /* strictly rising over the warm-up */
    for (long st = 1; st < 200; st++)
        CHECK(lr_at(&w, st) > lr_at(&w, st - 1), "warm-up not rising at step %ld", st);
    /* fractional epochs: N = 150 steps */
    w.warmup_epochs = 1.5f;
    CHECK_CLOSE(lr_at(&w, 75), 0.1 * (0.1 + 0.9 * 0.5), 0, 1e-7, "1.5-epoch warm-up at step 75");
    CHECK(lr_at(&w, 150) == 0.1f, "1.5-epoch warm-up ends at step 150");
    /* with the staircase decay (0.5 every epoch) under it */
    w.decay = 0.5f, w.decay_epochs = 1, w.warmup_epochs = 2;
    CHECK_CLOSE(lr_at(&w, 150), 0.05 * (0.1 + 0.9 * 150 / 200.0), 0, 1e-7, "warm-up x decay");
    CHECK_CLOSE(lr_at(&w, 250), 0.025, 0, 1e-7, "decay after the warm-up");
    /* --lr-scale linear */
    CHECK(lr_scale_linear(0.1f, 1, 256) == 0.1f && lr_scale_linear(0.1f, 4, 64) == 0.1f,
          "linear scaling at 256 examples a step");
    CHECK_CLOSE(lr_scale_linear(0.1f, 8, 256), 0.8, 0, 1e-7, "8 workers x 256");
    CHECK_CLOSE(lr_scale_linear(0.1f, 1, 16), 0.00625, 0, 1e-7, "one process, batch 16");
}

/* TF's ExponentialMovingAverage with num_updates: decay min(D, (1+t)/(10+t))
 * in float, shadow -= (shadow - value) * (1 - decay), bitwise. */
static void test_ema(void)
{
    CHECK(ema_decay_at(0.9999f, 1) == 2.0f / 11.0f, "decay at t=1: %.9g",
          (double)ema_decay_at(0.9999f, 1));
    CHECK(ema_decay_at(0.9999f, 90) == 91.0f / 100.0f, "decay at t=90");
    CHECK(ema_decay_at(0.9f, 1000) == 0.9f, "decay capped at D");
    CHECK(ema_decay_at(0.9999f, 100000000) == 0.9999f, "decay capped at D for large t");
    enum { N = 37 };
    float avg[N], ref[N], val[N];
    for (int j = 0; j < N; j++) avg[j] = ref[j] = (float)j * 0.25f - 3.0f;
    for (int64_t t = 1; t <= 500; t++) {
        for (int j = 0; j < N; j++) val[j] = sinf((float)(t * N + j)) * 2.0f;
        float d = ema_decay_at(0.99f, t);
        ema_apply(d, avg, val, N);
        for (int j = 0; j < N; j++) {
            volatile float delta = (ref[j] - val[j]) * (1.0f - d);
            ref[j] = ref[j] - delta;
        }
    }
    CHECK(!memcmp(avg, ref, sizeof avg), "ema_apply differs from TF's assign_sub form");
    /* and it averages: constant input converges to it */
    for (int j = 0; j < N; j++) val[j] = 5.0f;
    for (int k = 0; k < 3000; k++) ema_apply(0.99f, avg, val, N);
    CHECK_CLOSE(avg[3], 5.0, 0, 1e-5, "ema of a constant: %g", (double)avg[3]);
}

int main(void)
{
    test_names();
    test_hand_values();
    const opt_kind kinds[] = {OPT_SGD, OPT_MOMENTUM, OPT_RMSPROP, OPT_ADAM};
    for (size_t i = 0; i < 4; i++) {
        opt_cfg c = opt_defaults(kinds[i]);
        test_against_reference_and_shards(&c, kinds[i] == OPT_ADAM ? 0.01f : 0.1f);
        if (kinds[i] == OPT_MOMENTUM) {
            c.nesterov = true;
            test_against_reference_and_shards(&c, 0.1f);
        }
    }
    opt_cfg r = opt_defaults(OPT_RMSPROP);
    r.momentum = 0; /* plain RMSProp */
    test_against_reference_and_shards(&r, 0.01f);
    test_schedule();
    test_warmup();
    test_ema();
    return check_exit();
}
