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

/* ---- He et al. 2016 (section 4.2) CIFAR ResNets ---------------------------------
 *
 * Exactly the peer's resnet_cifar (torch_models.py), an nn.Sequential whose
 * module paths name the variables ('.' -> '/'): module 0 the stem (0/0 conv
 * 3x3, 16 channels; 0/1 batch norm + ReLU), modules 1..3n the basic blocks
 * (c1, b1, c2, b2 and, where the shape changes, the projection shortcut
 * proj/0 conv 1x1 + proj/1 batch norm), 3n+1 the global average pool, 3n+2
 * Flatten (no layer here), 3n+3 the dense layer. Batch norm eps 1e-3. */

#define CIFAR_BN_EPS 1e-3f

/* One basic block, module `idx`: conv3x3(stride)-BN-ReLU, conv3x3-BN, plus
 * the identity or a 1x1 projection, ReLU. */
static int cifar_block(nn_model *m, int idx, int in, int cin, int cout, int stride)
{
    char c[NN_LAYER_NAME_LEN], b[NN_LAYER_NAME_LEN];
    snprintf(c, sizeof c, "%d/c1", idx), snprintf(b, sizeof b, "%d/b1", idx);
    int y = nn_add_conv_bn_named(m, c, b, in, cout, 3, 3, stride, 1, 1, CIFAR_BN_EPS, true);
    snprintf(c, sizeof c, "%d/c2", idx), snprintf(b, sizeof b, "%d/b2", idx);
    y = nn_add_conv_bn_named(m, c, b, y, cout, 3, 3, 1, 1, 1, CIFAR_BN_EPS, false);
    int sc = in;
    if (stride != 1 || cin != cout) {
        snprintf(c, sizeof c, "%d/proj/0", idx), snprintf(b, sizeof b, "%d/proj/1", idx);
        sc = nn_add_conv_bn_named(m, c, b, in, cout, 1, 1, stride, 0, 0, CIFAR_BN_EPS, false);
    }
    snprintf(c, sizeof c, "%d/add", idx);
    return nn_add_sum(m, c, (int[]){y, sc}, 2, true);
}

/* n basic blocks per stage: depth 6n + 2. */
static int build_resnet_cifar(nn_model *m, int n)
{
    int x = nn_add_conv_bn_named(m, "0/0", "0/1", NN_INPUT, 16, 3, 3, 1, 1, 1, CIFAR_BN_EPS, true);
    int c = 16, idx = 1;
    static const int widths[3] = {16, 32, 64};
    for (int stage = 0; stage < 3; stage++)
        for (int j = 0; j < n; j++, idx++) {
            x = cifar_block(m, idx, x, c, widths[stage], stage > 0 && j == 0 ? 2 : 1);
            c = widths[stage];
        }
    char name[NN_LAYER_NAME_LEN];
    snprintf(name, sizeof name, "%d", idx); /* AdaptiveAvgPool2d(1) */
    x = nn_add_pool(m, name, x, false, 0, 0, 0, 0);
    snprintf(name, sizeof name, "%d", idx + 2); /* after Flatten */
    return nn_add_dense(m, name, x, m->cfg.num_classes, false);
}

static int build_resnet20(nn_model *m)
{
    return build_resnet_cifar(m, 3);
}

static int build_resnet56(nn_model *m)
{
    return build_resnet_cifar(m, 9);
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
    {"resnet-20", build_resnet20},
    {"resnet-56", build_resnet56},
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
        if (strcmp(m->name, models[i].name) == 0)
            return models[i].build(m) == NN_FAILED || m->failed ? -1 : 0;
    char names[NN_MODEL_NAMES_LEN];
    return pst_fail(m->err, "unknown model '%s': expected %s", m->name,
                    nn_model_names_join(names, sizeof names, ", ", " or "));
}
