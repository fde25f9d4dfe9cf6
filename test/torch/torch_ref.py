"""torch_ref.py - PyTorch models whose module paths are pstrain's variable
names ('.' -> '/', docs/torchvision.md), layer for layer as src/nn/models.c
builds them, and the input as pstrain's network sees it. Used by xcheck.py
(logits), test_ckpt2torch.py (export) and peer_resnet20.py (training)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvBN(nn.Conv2d):
    """pstrain's nn_add_conv_bn: conv (no bias) `name/kernel`, then batch norm
    `name/bn/...` (eps 1e-3) and ReLU."""

    def __init__(self, cin, cout, k, stride=1, pad=0, relu=True):
        super().__init__(cin, cout, k, stride, pad, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)
        self.relu = relu

    def forward(self, x):
        y = self.bn(super().forward(x))
        return F.relu(y) if self.relu else y


class MiniInception(nn.Module):
    def __init__(self, cin, w):
        super().__init__()
        b1, b3r, b3, bdr, bd, bp = w
        self.b1x1 = ConvBN(cin, b1, 1)
        self.b3x3_1 = ConvBN(cin, b3r, 1)
        self.b3x3_2 = ConvBN(b3r, b3, 3, 1, 1)
        self.bdbl_1 = ConvBN(cin, bdr, 1)
        self.bdbl_2 = ConvBN(bdr, bd, 3, 1, 1)
        self.bdbl_3 = ConvBN(bd, bd, 3, 1, 1)
        self.bpool_1 = ConvBN(cin, bp, 1)
        self.cout = b1 + b3 + bd + bp

    def forward(self, x):
        p = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
        return torch.cat([self.b1x1(x), self.b3x3_2(self.b3x3_1(x)),
                          self.bdbl_3(self.bdbl_2(self.bdbl_1(x))), self.bpool_1(p)], 1)


class InceptionMini(nn.Module):
    """src/nn/models.c build_inception_mini, layer for layer."""

    def __init__(self, cin, classes):
        super().__init__()
        self.stem = ConvBN(cin, 24, 3, 1, 1)
        self.mixed_a = MiniInception(24, (16, 16, 24, 8, 16, 8))
        self.reduce = nn.Module()
        self.reduce.b3x3 = ConvBN(self.mixed_a.cout, 64, 3, 2, 1)
        self.mixed_b = MiniInception(64 + self.mixed_a.cout, (48, 32, 64, 16, 32, 32))
        self.logits = nn.Linear(self.mixed_b.cout, classes)

    def forward(self, x):
        x = self.mixed_a(F.max_pool2d(self.stem(x), 3, 2, 1))
        x = torch.cat([self.reduce.b3x3(x), F.max_pool2d(x, 3, 2, 1)], 1)
        x = self.mixed_b(x)
        return self.logits(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))



class Basic(nn.Module):
    """He et al. 2016 CIFAR basic block (c1, b1, c2, b2, and a 1x1 conv + BN
    projection proj/0, proj/1 where the shape changes); BN eps 1e-3."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout, eps=1e-3)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout, eps=1e-3)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout, eps=1e-3))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.proj is None else self.proj(x)))


def resnet_cifar(n, cin, classes):
    """resnet-20 (n = 3) and resnet-56 (n = 9): module 0 the stem (0.0 conv
    3x3 16, 0.1 BN, 0.2 ReLU), 1..3n the blocks, then pool, flatten, dense."""
    layers, c = [nn.Sequential(nn.Conv2d(cin, 16, 3, 1, 1, bias=False),
                               nn.BatchNorm2d(16, eps=1e-3), nn.ReLU())], 16
    for i, w in enumerate([16, 32, 64]):
        for j in range(n):
            layers.append(Basic(c, w, 2 if (i > 0 and j == 0) else 1))
            c = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes)]
    return nn.Sequential(*layers)


def normalised_train(ds):
    """The train split of the pstrain data set `ds` as pstrain's network
    sees it, NCHW float32: pstrain holds mean and std as float (h5ds.h) and
    computes the scale and bias in double, then normalises in float."""
    import h5py

    with h5py.File(ds, "r") as f:
        px = f["train/images"][:]
        mean = np.asarray(f.attrs["mean"], dtype=np.float32).astype(np.float64)
        std = np.asarray(f.attrs["std"], dtype=np.float32).astype(np.float64)
    sd = np.where(std.astype(np.float32) > np.float32(1e-12), std, 1.0)
    scale = (1.0 / (255.0 * sd)).astype(np.float32)
    bias = (-mean / sd).astype(np.float32)
    x = px.astype(np.float32) * scale + bias  # N, H, W, C as pstrain
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
