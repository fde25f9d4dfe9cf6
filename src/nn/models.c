/*
 * models.c - the built-in models, written with the graph builders.
 *
 *   mlp             H*W*C -> 256 -> 256 -> K, ReLU
 *   lenet5          the peer's LeNet-5: conv5x5 C->6 pad 2, ReLU, maxpool 2;
 *                   conv5x5 6->16 valid, ReLU, maxpool 2; flatten -> 120 -> 84 -> K
 *                   (flatten is 400 for 28x28 inputs and follows the image size)
 *   inception-mini  stem conv3x3+BN+ReLU, maxpool 3x3/2; Inception module A;
 *                   grid reduction (conv3x3/2 tower + maxpool 3x3/2, concat);
 *                   Inception module B; global average pool; dropout 0.2;
 *                   dense to K. About 0.1 M parameters.
 * Every convolution of inception-mini is followed by batch norm and ReLU.
 * The table at the end registers them.
 */
#include <string.h>

#include "graph.h"

static int build_mlp(nn_model *m)
{
    int x = nn_add_dense(m, "fc1", NN_INPUT, 256, true);
    x = nn_add_dense(m, "fc2", x, 256, true);
    x = nn_add_dense(m, "logits", x, m->cfg.num_classes, false);
    return x;
}

static int build_lenet5(nn_model *m)
{
    int x = nn_add_conv(m, "conv1", NN_INPUT, 6, 5, 5, 1, 2, true, true, NN_INIT_HE);
    x = nn_add_pool(m, "pool1", x, true, 2, 2, 2, 0);
    x = nn_add_conv(m, "conv2", x, 16, 5, 5, 1, 0, true, true, NN_INIT_HE);
    x = nn_add_pool(m, "pool2", x, true, 2, 2, 2, 0);
    x = nn_add_dense(m, "fc1", x, 120, true);
    x = nn_add_dense(m, "fc2", x, 84, true);
    x = nn_add_dense(m, "logits", x, m->cfg.num_classes, false);
    return x;
}

/* Tower widths of one Inception module. */
typedef struct inception_widths {
    int b1x1;         /* 1x1 */
    int b3x3_r, b3x3; /* 1x1 reduce -> 3x3 */
    int bdbl_r, bdbl; /* 1x1 reduce -> 3x3 -> 3x3 (the factorised 5x5) */
    int bpool;        /* avgpool 3x3 -> 1x1 projection */
} inception_widths;

static int inception_module(nn_model *m, const char *name, int in, inception_widths w)
{
    char n[NN_LAYER_NAME_LEN];
    int t[4];
    snprintf(n, sizeof n, "%s/b1x1", name);
    t[0] = nn_add_conv_bn(m, n, in, w.b1x1, 1, 1, 1, 0);
    snprintf(n, sizeof n, "%s/b3x3_1", name);
    t[1] = nn_add_conv_bn(m, n, in, w.b3x3_r, 1, 1, 1, 0);
    snprintf(n, sizeof n, "%s/b3x3_2", name);
    t[1] = nn_add_conv_bn(m, n, t[1], w.b3x3, 3, 3, 1, 1);
    snprintf(n, sizeof n, "%s/bdbl_1", name);
    t[2] = nn_add_conv_bn(m, n, in, w.bdbl_r, 1, 1, 1, 0);
    snprintf(n, sizeof n, "%s/bdbl_2", name);
    t[2] = nn_add_conv_bn(m, n, t[2], w.bdbl, 3, 3, 1, 1);
    snprintf(n, sizeof n, "%s/bdbl_3", name);
    t[2] = nn_add_conv_bn(m, n, t[2], w.bdbl, 3, 3, 1, 1);
    snprintf(n, sizeof n, "%s/bpool_0", name);
    t[3] = nn_add_pool(m, n, in, false, 3, 3, 1, 1);
    snprintf(n, sizeof n, "%s/bpool_1", name);
    t[3] = nn_add_conv_bn(m, n, t[3], w.bpool, 1, 1, 1, 0);
    snprintf(n, sizeof n, "%s/concat", name);
    return nn_add_concat(m, n, t, 4);
}

/* Two stride-2 stages leave 2x2 of an 8x8 image; anything smaller reduces
 * to single pixels and the 3x3 towers see only padding. */
#define INCEPTION_MIN_SIZE 8

static int build_inception_mini(nn_model *m)
{
    if (m->cfg.height < INCEPTION_MIN_SIZE || m->cfg.width < INCEPTION_MIN_SIZE)
        return pst_fail(m->err, "model %s does not fit a %dx%dx%d image: expected at least %dx%d",
                        m->name, m->cfg.height, m->cfg.width, m->cfg.channels, INCEPTION_MIN_SIZE,
                        INCEPTION_MIN_SIZE),
               NN_FAILED;
    int x = nn_add_conv_bn(m, "stem", NN_INPUT, 24, 3, 3, 1, 1);
    x = nn_add_pool(m, "stem_pool", x, true, 3, 3, 2, 1);
    x = inception_module(m, "mixed_a", x, (inception_widths){16, 16, 24, 8, 16, 8});
    /* grid reduction, Inception-v3 style: a strided conv tower beside a pool */
    int t[2];
    t[0] = nn_add_conv_bn(m, "reduce/b3x3", x, 64, 3, 3, 2, 1);
    t[1] = nn_add_pool(m, "reduce/pool", x, true, 3, 3, 2, 1);
    x = nn_add_concat(m, "reduce/concat", t, 2);
    x = inception_module(m, "mixed_b", x, (inception_widths){48, 32, 64, 16, 32, 32});
    x = nn_add_pool(m, "global_pool", x, false, 0, 0, 0, 0);
    x = nn_add_dropout(m, "dropout", x, 0.2f);
    x = nn_add_dense(m, "logits", x, m->cfg.num_classes, false);
    return x;
}

/* The table of models: the one list of their names. --help, the errors
 * naming the choices and `pstrain plan` derive theirs from it
 * (nn_model_names, nn_model_names_join). A new model is one row here. */
static const struct {
    const char *name;
    int (*build)(nn_model *m);
} models[] = {
    {"mlp", build_mlp},
    {"lenet5", build_lenet5},
    {"inception-mini", build_inception_mini},
};

const char *const *nn_model_names(void)
{
    static const char *names[PST_ARRAY_LEN(models) + 1];
    for (size_t i = 0; i < PST_ARRAY_LEN(models); i++) names[i] = models[i].name;
    return names;
}

bool nn_model_known(const char *name)
{
    for (size_t i = 0; i < PST_ARRAY_LEN(models); i++)
        if (name && strcmp(name, models[i].name) == 0) return true;
    return false;
}

const char *nn_model_names_join(char *buf, size_t len, const char *sep, const char *last)
{
    size_t o = 0, n = PST_ARRAY_LEN(models);
    buf[0] = 0;
    for (size_t i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s",
                              i == 0       ? ""
                              : i + 1 == n ? last
                                           : sep,
                              models[i].name);
    return buf;
}

int nn_build_named(nn_model *m)
{
    for (size_t i = 0; i < PST_ARRAY_LEN(models); i++)
        if (strcmp(m->name, models[i].name) == 0) return models[i].build(m) == NN_FAILED ? -1 : 0;
    char names[NN_MODEL_NAMES_LEN];
    return pst_fail(m->err, "unknown model '%s': expected %s", m->name,
                    nn_model_names_join(names, sizeof names, ", ", " or "));
}
