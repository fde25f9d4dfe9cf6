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

/* Initialisers. The builders add convolutions with He init (truncated
 * normal, variance 2/fan_in), ReLU dense layers with He and the logits with
 * Glorot uniform, biases zero, batch norm gamma 1 and beta 0: mlp, lenet5
 * and inception-mini keep that. The models with a PyTorch reference then
 * switch to their reference's distributions (docs/torchvision.md), so that
 * a run starts where the reference's would: every convolution kernel gets
 * `conv`, every dense kernel `dense`, every bias (dense, or convolution
 * with a bias) `bias`, drawn with the fan-in of its own layer's kernel.
 * Batch norm stays 1/0 (torchvision's too; zero_init_residual is off by
 * default). */
static int reference_init(nn_model *m, int out, nn_init conv, nn_init dense, nn_init bias)
{
    if (out == NN_FAILED || m->failed) return NN_FAILED;
    for (int i = 0; i < m->nlayers; i++) {
        const nn_layer *l = &m->layers[i];
        if (l->ops != &nn_conv_ops && l->ops != &nn_dense_ops) continue;
        nn_var_info *k = &m->info[l->var0];
        k->init = l->ops == &nn_conv_ops ? conv : dense;
        for (int j = 1; j < l->nvar; j++) { /* the bias */
            nn_var_info *b = &m->info[l->var0 + j];
            b->init = bias, b->fan_in = k->fan_in, b->fan_out = k->fan_out;
        }
    }
    return out;
}

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

/* The peer's resnet_cifar keeps PyTorch's defaults: U(+-1/sqrt(fan_in)) for
 * every convolution and dense weight and the dense bias. */
static int build_resnet20(nn_model *m)
{
    return reference_init(m, build_resnet_cifar(m, 3), NN_INIT_TORCH, NN_INIT_TORCH, NN_INIT_TORCH);
}

static int build_resnet56(nn_model *m)
{
    return reference_init(m, build_resnet_cifar(m, 9), NN_INIT_TORCH, NN_INIT_TORCH, NN_INIT_TORCH);
}

/* A published channel count divided by m->width_div, rounded up (tests'
 * narrow models, see nn_model_new_narrow). */
static int width(const nn_model *m, int c)
{
    return (c + m->width_div - 1) / m->width_div;
}

/* ---- torchvision resnet50 ------------------------------------------------------
 *
 * torchvision.models.resnet50 (ResNet v1.5: the stride on the 3x3 conv of a
 * bottleneck), variables named after its module paths: conv1 (7x7/2 pad 3,
 * C -> 64), bn1 + ReLU, maxpool 3x3/2 pad 1; layer1..layer4 of [3, 4, 6, 3]
 * bottlenecks of width 64/128/256/512 and 4x as many output channels
 * (layerS/B/conv1 1x1, bn1, ReLU; conv2 3x3/stride pad 1, bn2, ReLU; conv3
 * 1x1, bn3; the shortcut downsample/0 1x1/stride + downsample/1 batch norm
 * in the first block of each stage, the identity elsewhere; add, ReLU);
 * avgpool (global), fc. Batch norm eps 1e-5. Any image size fits (stride
 * 32 in all, every window padded). */

#define RESNET_BN_EPS 1e-5f

static int bottleneck(nn_model *m, const char *blk, int in, int cin, int planes, int stride)
{
    char c[2 * NN_LAYER_NAME_LEN], b[2 * NN_LAYER_NAME_LEN]; /* nn_new_layer refuses long ones */
    int w = width(m, planes), out = width(m, 4 * planes);
    snprintf(c, sizeof c, "%s/conv1", blk), snprintf(b, sizeof b, "%s/bn1", blk);
    int y = nn_add_conv_bn_named(m, c, b, in, w, 1, 1, 1, 0, 0, RESNET_BN_EPS, true);
    snprintf(c, sizeof c, "%s/conv2", blk), snprintf(b, sizeof b, "%s/bn2", blk);
    y = nn_add_conv_bn_named(m, c, b, y, w, 3, 3, stride, 1, 1, RESNET_BN_EPS, true);
    snprintf(c, sizeof c, "%s/conv3", blk), snprintf(b, sizeof b, "%s/bn3", blk);
    y = nn_add_conv_bn_named(m, c, b, y, out, 1, 1, 1, 0, 0, RESNET_BN_EPS, false);
    int sc = in;
    if (stride != 1 || cin != out) {
        snprintf(c, sizeof c, "%s/downsample/0", blk),
            snprintf(b, sizeof b, "%s/downsample/1", blk);
        sc = nn_add_conv_bn_named(m, c, b, in, out, 1, 1, stride, 0, 0, RESNET_BN_EPS, false);
    }
    snprintf(c, sizeof c, "%s/add", blk);
    return nn_add_sum(m, c, (int[]){y, sc}, 2, true);
}

static int build_resnet50(nn_model *m)
{
    int x = nn_add_conv_bn_named(m, "conv1", "bn1", NN_INPUT, width(m, 64), 7, 7, 2, 3, 3,
                                 RESNET_BN_EPS, true);
    x = nn_add_pool(m, "maxpool", x, true, 3, 3, 2, 1);
    static const int blocks[4] = {3, 4, 6, 3}, planes[4] = {64, 128, 256, 512};
    int c = width(m, 64);
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < blocks[s]; j++) {
            char blk[NN_LAYER_NAME_LEN];
            snprintf(blk, sizeof blk, "layer%d/%d", s + 1, j);
            x = bottleneck(m, blk, x, c, planes[s], s > 0 && j == 0 ? 2 : 1);
            c = width(m, 4 * planes[s]);
        }
    x = nn_add_pool(m, "avgpool", x, false, 0, 0, 0, 0);
    x = nn_add_dense(m, "fc", x, m->cfg.num_classes, false);
    /* torchvision's ResNet.__init__: kaiming_normal_(mode='fan_out',
     * nonlinearity='relu') for every Conv2d; fc keeps Linear's default */
    return reference_init(m, x, NN_INIT_HE_FAN_OUT, NN_INIT_TORCH, NN_INIT_TORCH);
}

/* ---- torchvision inception_v3 --------------------------------------------------
 *
 * torchvision.models.inception_v3 without the auxiliary logits (and without
 * transform_input), variables named after its module paths: every
 * convolution is a BasicConv2d, conv (no bias) + bn (eps 1e-3) + ReLU,
 * named <path>/conv and <path>/bn. Stem Conv2d_1a_3x3 (3x3/2) ..
 * Conv2d_4a_3x3 with two 3x3/2 max pools; Mixed_5b..5d (InceptionA),
 * Mixed_6a (B, grid reduction), Mixed_6b..6e (C, factorised 1x7/7x1),
 * Mixed_7a (D, reduction), Mixed_7b, 7c (E, split 1x3/3x1 towers); global
 * average pool, dropout 0.5, fc. Tower pools are avg_pool2d(3, 1, 1) with
 * the padding counted, reductions max_pool2d(3, 2) unpadded. The first
 * convolution takes the data set's C channels. */

#define INCEPTION_BN_EPS 1e-3f
/* The stem and the two unpadded reductions take 75x75 to 1x1 (torchvision
 * documents the same minimum). */
#define INCEPTION_V3_MIN_SIZE 75

/* BasicConv2d <mod>/<br>: conv KHxKW, stride, padding (PH, PW), K channels
 * (published width). */
static int basic(nn_model *m, const char *mod, const char *br, int in, int K, int KH, int KW,
                 int stride, int PH, int PW)
{
    char c[2 * NN_LAYER_NAME_LEN], b[2 * NN_LAYER_NAME_LEN]; /* nn_new_layer refuses long ones */
    snprintf(c, sizeof c, "%s%s%s/conv", mod, *mod ? "/" : "", br);
    snprintf(b, sizeof b, "%s%s%s/bn", mod, *mod ? "/" : "", br);
    return nn_add_conv_bn_named(m, c, b, in, width(m, K), KH, KW, stride, PH, PW, INCEPTION_BN_EPS,
                                true);
}

static int tower_pool(nn_model *m, const char *mod, int in)
{
    char n[2 * NN_LAYER_NAME_LEN];
    snprintf(n, sizeof n, "%s/avg_pool", mod);
    return nn_add_avgpool_count_pad(m, n, in, 3, 3, 1, 1);
}

static int reduce_pool(nn_model *m, const char *mod, int in)
{
    char n[2 * NN_LAYER_NAME_LEN];
    snprintf(n, sizeof n, "%s/max_pool", mod);
    return nn_add_pool(m, n, in, true, 3, 3, 2, 0);
}

static int concat(nn_model *m, const char *mod, const int *t, int n)
{
    char name[2 * NN_LAYER_NAME_LEN];
    snprintf(name, sizeof name, "%s/concat", mod);
    return nn_add_concat(m, name, t, n);
}

static int inception_a(nn_model *m, const char *mod, int in, int pool_features)
{
    int t[4];
    t[0] = basic(m, mod, "branch1x1", in, 64, 1, 1, 1, 0, 0);
    t[1] = basic(m, mod, "branch5x5_1", in, 48, 1, 1, 1, 0, 0);
    t[1] = basic(m, mod, "branch5x5_2", t[1], 64, 5, 5, 1, 2, 2);
    t[2] = basic(m, mod, "branch3x3dbl_1", in, 64, 1, 1, 1, 0, 0);
    t[2] = basic(m, mod, "branch3x3dbl_2", t[2], 96, 3, 3, 1, 1, 1);
    t[2] = basic(m, mod, "branch3x3dbl_3", t[2], 96, 3, 3, 1, 1, 1);
    t[3] = basic(m, mod, "branch_pool", tower_pool(m, mod, in), pool_features, 1, 1, 1, 0, 0);
    return concat(m, mod, t, 4);
}

static int inception_b(nn_model *m, const char *mod, int in)
{
    int t[3];
    t[0] = basic(m, mod, "branch3x3", in, 384, 3, 3, 2, 0, 0);
    t[1] = basic(m, mod, "branch3x3dbl_1", in, 64, 1, 1, 1, 0, 0);
    t[1] = basic(m, mod, "branch3x3dbl_2", t[1], 96, 3, 3, 1, 1, 1);
    t[1] = basic(m, mod, "branch3x3dbl_3", t[1], 96, 3, 3, 2, 0, 0);
    t[2] = reduce_pool(m, mod, in);
    return concat(m, mod, t, 3);
}

static int inception_c(nn_model *m, const char *mod, int in, int c7)
{
    int t[4];
    t[0] = basic(m, mod, "branch1x1", in, 192, 1, 1, 1, 0, 0);
    t[1] = basic(m, mod, "branch7x7_1", in, c7, 1, 1, 1, 0, 0);
    t[1] = basic(m, mod, "branch7x7_2", t[1], c7, 1, 7, 1, 0, 3);
    t[1] = basic(m, mod, "branch7x7_3", t[1], 192, 7, 1, 1, 3, 0);
    t[2] = basic(m, mod, "branch7x7dbl_1", in, c7, 1, 1, 1, 0, 0);
    t[2] = basic(m, mod, "branch7x7dbl_2", t[2], c7, 7, 1, 1, 3, 0);
    t[2] = basic(m, mod, "branch7x7dbl_3", t[2], c7, 1, 7, 1, 0, 3);
    t[2] = basic(m, mod, "branch7x7dbl_4", t[2], c7, 7, 1, 1, 3, 0);
    t[2] = basic(m, mod, "branch7x7dbl_5", t[2], 192, 1, 7, 1, 0, 3);
    t[3] = basic(m, mod, "branch_pool", tower_pool(m, mod, in), 192, 1, 1, 1, 0, 0);
    return concat(m, mod, t, 4);
}

static int inception_d(nn_model *m, const char *mod, int in)
{
    int t[3];
    t[0] = basic(m, mod, "branch3x3_1", in, 192, 1, 1, 1, 0, 0);
    t[0] = basic(m, mod, "branch3x3_2", t[0], 320, 3, 3, 2, 0, 0);
    t[1] = basic(m, mod, "branch7x7x3_1", in, 192, 1, 1, 1, 0, 0);
    t[1] = basic(m, mod, "branch7x7x3_2", t[1], 192, 1, 7, 1, 0, 3);
    t[1] = basic(m, mod, "branch7x7x3_3", t[1], 192, 7, 1, 1, 3, 0);
    t[1] = basic(m, mod, "branch7x7x3_4", t[1], 192, 3, 3, 2, 0, 0);
    t[2] = reduce_pool(m, mod, in);
    return concat(m, mod, t, 3);
}

/* The two split towers are concatenated in torchvision's order: 1x1,
 * 3x3_2a, 3x3_2b, 3x3dbl_3a, 3x3dbl_3b, pool (one concat of six, the same
 * channels as its nested torch.cat). */
static int inception_e(nn_model *m, const char *mod, int in)
{
    int t[6];
    t[0] = basic(m, mod, "branch1x1", in, 320, 1, 1, 1, 0, 0);
    int b3 = basic(m, mod, "branch3x3_1", in, 384, 1, 1, 1, 0, 0);
    t[1] = basic(m, mod, "branch3x3_2a", b3, 384, 1, 3, 1, 0, 1);
    t[2] = basic(m, mod, "branch3x3_2b", b3, 384, 3, 1, 1, 1, 0);
    int d = basic(m, mod, "branch3x3dbl_1", in, 448, 1, 1, 1, 0, 0);
    d = basic(m, mod, "branch3x3dbl_2", d, 384, 3, 3, 1, 1, 1);
    t[3] = basic(m, mod, "branch3x3dbl_3a", d, 384, 1, 3, 1, 0, 1);
    t[4] = basic(m, mod, "branch3x3dbl_3b", d, 384, 3, 1, 1, 1, 0);
    t[5] = basic(m, mod, "branch_pool", tower_pool(m, mod, in), 192, 1, 1, 1, 0, 0);
    return concat(m, mod, t, 6);
}

static int build_inception_v3(nn_model *m)
{
    if (m->cfg.height < INCEPTION_V3_MIN_SIZE || m->cfg.width < INCEPTION_V3_MIN_SIZE)
        return pst_fail(m->err, "model %s does not fit a %dx%dx%d image: expected at least %dx%d",
                        m->name, m->cfg.height, m->cfg.width, m->cfg.channels,
                        INCEPTION_V3_MIN_SIZE, INCEPTION_V3_MIN_SIZE),
               NN_FAILED;
    int x = basic(m, "", "Conv2d_1a_3x3", NN_INPUT, 32, 3, 3, 2, 0, 0);
    x = basic(m, "", "Conv2d_2a_3x3", x, 32, 3, 3, 1, 0, 0);
    x = basic(m, "", "Conv2d_2b_3x3", x, 64, 3, 3, 1, 1, 1);
    x = nn_add_pool(m, "maxpool1", x, true, 3, 3, 2, 0);
    x = basic(m, "", "Conv2d_3b_1x1", x, 80, 1, 1, 1, 0, 0);
    x = basic(m, "", "Conv2d_4a_3x3", x, 192, 3, 3, 1, 0, 0);
    x = nn_add_pool(m, "maxpool2", x, true, 3, 3, 2, 0);
    x = inception_a(m, "Mixed_5b", x, 32);
    x = inception_a(m, "Mixed_5c", x, 64);
    x = inception_a(m, "Mixed_5d", x, 64);
    x = inception_b(m, "Mixed_6a", x);
    x = inception_c(m, "Mixed_6b", x, 128);
    x = inception_c(m, "Mixed_6c", x, 160);
    x = inception_c(m, "Mixed_6d", x, 160);
    x = inception_c(m, "Mixed_6e", x, 192);
    x = inception_d(m, "Mixed_7a", x);
    x = inception_e(m, "Mixed_7b", x);
    x = inception_e(m, "Mixed_7c", x);
    x = nn_add_pool(m, "avgpool", x, false, 0, 0, 0, 0);
    x = nn_add_dropout(m, "dropout", x, 0.5f);
    x = nn_add_dense(m, "fc", x, m->cfg.num_classes, false);
    /* torchvision's Inception3.__init__ (init_weights=True): trunc_normal_(
     * std=0.1, a=-2, b=2) for every Conv2d and Linear weight (the 0.01 and
     * 0.001 overrides belong to the auxiliary head, absent here); fc's bias
     * keeps Linear's default */
    return reference_init(m, x, NN_INIT_NORMAL_01, NN_INIT_NORMAL_01, NN_INIT_TORCH);
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
    {"resnet-50", build_resnet50},
    {"inception-v3", build_inception_v3},
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
