#!/usr/bin/env python3
"""Generate the ONNX model fixtures and PyTorch goldens used by the Go tests.

Run from the repository root with the Debian PyTorch stack:

    /usr/bin/python3 testdata/gen/make_fixtures.py --out testdata
    /usr/bin/python3 testdata/gen/make_fixtures.py --out testdata --full /tmp/full

See testdata/gen/README.md for the file formats. Everything is float32, seeded
and single-threaded so that two runs produce byte-identical files.
"""

import argparse
import collections
import copy
import io
import json
import math
import os
import sys
import time
import warnings
import zipfile

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock, conv1x1
from torch.nn.utils.fusion import fuse_conv_bn_eval

sys.dont_write_bytecode = True  # no __pycache__ under testdata/gen
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_ref  # noqa: E402  (numpy reference evaluator, same directory)

OPSET = 14
WEIGHT_SEED = 0
INPUT_SEED = 1
PERTURB_SEED = 2
BATCH = 8

# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------


class TramerBonehCNN(nn.Module):
    """Tramèr & Boneh (2021) CNN for 1x28x28 (MNIST / Fashion-MNIST)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 8, stride=2, padding=2), nn.Tanh(), nn.MaxPool2d(2, 1),
            nn.Conv2d(16, 32, 4, stride=2), nn.Tanh(), nn.MaxPool2d(2, 1),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 4 * 4, 32), nn.Tanh(), nn.Linear(32, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class NarrowResNet(nn.Module):
    """torchvision.models.resnet.ResNet with BasicBlock, but with configurable
    (narrow) widths. Attribute names mirror torchvision exactly (conv1, bn1,
    maxpool, layerN.M.{conv1,bn1,conv2,bn2,downsample.{0,1}}, avgpool, fc)."""

    def __init__(self, layers=(1, 1, 1, 1), widths=(8, 16, 32, 64), num_classes=10):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(widths[0], layers[0])
        self.layer2 = self._make_layer(widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3], num_classes)
        for m in self.modules():  # torchvision's init
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes, stride), nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


class NarrowVGG(nn.Module):
    """VGG-style: conv3x3+ReLU stages with MaxPool, an AvgPool2d, an
    AdaptiveAvgPool2d((2,2)) head, classifier Linear-ReLU-Dropout-Linear."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),      # 16x16
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),     # 8x8
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True),
            # torch 1.13 exports every AvgPool2d at opset >= 11 as Pad (explicit
            # pads, here 1; all zeros when padding=0) + AveragePool without pads;
            # count_include_pad=True is what makes the explicit zero Pad exact.
            nn.AvgPool2d(kernel_size=3, stride=1, padding=1),                               # 8x8
        )
        # 8x8 -> 2x2 exports as AveragePool(kernel 4, stride 4).
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))                                         # 2x2
        self.classifier = nn.Sequential(
            nn.Linear(32 * 2 * 2, 32), nn.ReLU(True), nn.Dropout(p=0.5), nn.Linear(32, num_classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        x = torch.flatten(x, 1)
        return self.classifier(x)


class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin, cout, k=3, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: (expand 1x1) -> depthwise 3x3 -> project 1x1 (+ skip)."""

    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers.append(ConvBNReLU6(cin, hidden, k=1))
        layers += [ConvBNReLU6(hidden, hidden, 3, stride, groups=hidden), ConvBNReLU6(hidden, cout, 1, act=False)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class TinyMobileNetV2(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            ConvBNReLU6(3, 16, 3, stride=2),            # 16x16
            InvertedResidual(16, 16, 1, expand=1),      # depthwise only, skip
            InvertedResidual(16, 24, 2, expand=2),      # 8x8, no skip
            InvertedResidual(24, 24, 1, expand=2),      # skip
            ConvBNReLU6(24, 64, 1),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class BeitAttention(nn.Module):
    """BEiT attention: qkv without bias + (q_bias, 0, v_bias), relative
    position bias table gathered through relative_position_index."""

    def __init__(self, dim, num_heads, window):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.v_bias = nn.Parameter(torch.zeros(dim))
        wh, ww = window
        self.num_relative_distance = (2 * wh - 1) * (2 * ww - 1) + 3
        self.relative_position_bias_table = nn.Parameter(torch.zeros(self.num_relative_distance, num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        rel = (coords_flatten[:, :, None] - coords_flatten[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += wh - 1
        rel[:, :, 1] += ww - 1
        rel[:, :, 0] *= 2 * ww - 1
        index = torch.zeros((wh * ww + 1,) * 2, dtype=torch.int64)
        index[1:, 1:] = rel.sum(-1)
        index[0, 0:] = self.num_relative_distance - 3
        index[0:, 0] = self.num_relative_distance - 2
        index[0, 0] = self.num_relative_distance - 1
        self.register_buffer("relative_position_index", index)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        # EXPORT NOTE: timm writes torch.zeros_like(self.v_bias) and indexes the
        # full relative_position_index. With do_constant_folding=True the
        # exporter then folds cat(q_bias, 0, v_bias) and table[index] into new
        # constants (onnx::Add_*), i.e. q_bias, v_bias and the table vanish as
        # initializers. Deriving the zero block and the index slice from the
        # runtime shape (C, N) is numerically identical and keeps Concat(q_bias,
        # ConstantOfShape, v_bias) and Gather(table, index) in the graph.
        qkv_bias = torch.cat((self.q_bias, torch.zeros(C, dtype=x.dtype), self.v_bias))
        qkv = F.linear(x, self.qkv.weight, qkv_bias)
        qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        idx = self.relative_position_index[:N, :N].reshape(-1)
        rel_bias = self.relative_position_bias_table[idx].view(N, N, -1).permute(2, 0, 1).contiguous()
        attn = attn + rel_bias.unsqueeze(0)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
        return self.proj(x)


class BeitBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim, window, init_values=0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = BeitAttention(dim, num_heads, window)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, mlp_dim)
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        x = x + self.gamma_1 * self.attn(self.norm1(x))
        x = x + self.gamma_2 * self.mlp(self.norm2(x))
        return x


class TinyBeit(nn.Module):
    def __init__(self, img=32, patch=8, dim=32, depth=2, heads=2, mlp_dim=64, num_classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        window = (img // patch, img // patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.blocks = nn.ModuleList([BeitBlock(dim, heads, mlp_dim, window) for _ in range(depth)])
        self.fc_norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.fc_norm(x[:, 1:, :].mean(1)))


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, mlp_dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class CrossAttention(nn.Module):
    """CrossViT cross-attention: the class token (row 0) queries all tokens."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.wq = nn.Linear(dim, dim)
        self.wk = nn.Linear(dim, dim)
        self.wv = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        h = self.num_heads
        q = self.wq(x[:, 0:1, ...]).reshape(B, 1, h, C // h).permute(0, 2, 1, 3)
        k = self.wk(x).reshape(B, N, h, C // h).permute(0, 2, 1, 3)
        v = self.wv(x).reshape(B, N, h, C // h).permute(0, 2, 1, 3)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, 1, C)
        return self.proj(x)


class CrossViTBranch(nn.Module):
    def __init__(self, img, patch, dim, heads, mlp_dim):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        n = (img // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, dim))
        self.block = Block(dim, heads, mlp_dim)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        return self.block(x + self.pos_embed)


class TinyCrossViT(nn.Module):
    """Two branches (patch 8 / dim 32 and patch 16 / dim 48), one block each,
    one cross-attention fusion exchanging class tokens, averaged heads."""

    def __init__(self, img=32, patches=(8, 16), dims=(32, 48), heads=(2, 2), mlp_ratio=2, num_classes=10):
        super().__init__()
        self.branches = nn.ModuleList(
            [CrossViTBranch(img, p, d, h, d * mlp_ratio) for p, d, h in zip(patches, dims, heads)])
        # projections of class token i into dim of branch j, and back (timm's MultiScaleBlock)
        self.projs = nn.ModuleList()
        self.fusion_norm = nn.ModuleList()
        self.fusion = nn.ModuleList()
        self.revert_projs = nn.ModuleList()
        for i in range(2):
            j = 1 - i
            self.projs.append(nn.Sequential(nn.LayerNorm(dims[i], eps=1e-6), nn.GELU(), nn.Linear(dims[i], dims[j])))
            self.fusion_norm.append(nn.LayerNorm(dims[j], eps=1e-6))
            self.fusion.append(CrossAttention(dims[j], heads[j]))
            self.revert_projs.append(
                nn.Sequential(nn.LayerNorm(dims[j], eps=1e-6), nn.GELU(), nn.Linear(dims[j], dims[i])))
        self.norms = nn.ModuleList([nn.LayerNorm(d, eps=1e-6) for d in dims])
        self.heads = nn.ModuleList([nn.Linear(d, num_classes) for d in dims])

    def forward(self, x):
        xs = [b(x) for b in self.branches]
        outs = []
        for i in range(2):
            j = 1 - i
            cls = self.projs[i](xs[i][:, 0:1, :])                       # (B,1,d_j)
            tmp = torch.cat((cls, xs[j][:, 1:, :]), dim=1)              # (B,1+N_j,d_j)
            cls = cls + self.fusion[i](self.fusion_norm[i](tmp))       # (B,1,d_j)
            cls = self.revert_projs[i](cls)                             # (B,1,d_i)
            outs.append(torch.cat((cls, xs[i][:, 1:, :]), dim=1))
        logits = [self.heads[i](self.norms[i](outs[i])[:, 0]) for i in range(2)]
        return torch.mean(torch.stack(logits, dim=0), dim=0)


# ---------------------------------------------------------------------------
# initialisation helpers
# ---------------------------------------------------------------------------


class PackedQKVNet(nn.Module):
    """Attention whose q/k/v weights are slices of one packed parameter, and
    other weights stored in a layout the matmul does not use, so that every
    weight reaches its MatMul through layout-only ops when exported without
    constant folding: qkv_weight (3D x D) -> Slice (q) and Slice -> Split
    (k, v) -> Transpose; qkv_bias -> Split -> Add; proj_weight stored flat
    (D*D) -> Reshape -> Transpose; fc_weight stored (D, D, 1) -> Squeeze ->
    Transpose."""

    def __init__(self, img=32, patch=8, dim=32, heads=2, num_classes=10):
        super().__init__()
        self.dim, self.heads = dim, heads
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.qkv_weight = nn.Parameter(torch.empty(3 * dim, dim))
        nn.init.xavier_uniform_(self.qkv_weight)
        self.qkv_bias = nn.Parameter(torch.zeros(3 * dim))
        self.proj_weight = nn.Parameter(torch.empty(dim * dim).uniform_(-dim ** -0.5, dim ** -0.5))
        self.proj_bias = nn.Parameter(torch.zeros(dim))
        self.fc_weight = nn.Parameter(torch.empty(dim, dim, 1).uniform_(-dim ** -0.5, dim ** -0.5))
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, T, D)
        B, N, C = x.shape
        h = self.heads
        wq = self.qkv_weight[:C]
        wk, wv = torch.split(self.qkv_weight[C:], [C, C], dim=0)
        bq, bk, bv = torch.split(self.qkv_bias, [C, C, C])
        q = (x @ wq.t() + bq).reshape(B, N, h, C // h).permute(0, 2, 1, 3)
        k = (x @ wk.t() + bk).reshape(B, N, h, C // h).permute(0, 2, 1, 3)
        v = (x @ wv.t() + bv).reshape(B, N, h, C // h).permute(0, 2, 1, 3)
        attn = ((q @ k.transpose(-2, -1)) * (C // h) ** -0.5).softmax(dim=-1)
        a = (attn @ v).transpose(1, 2).reshape(B, N, C)
        x = x + a @ self.proj_weight.view(C, C).t() + self.proj_bias
        x = x + torch.tanh(x @ self.fc_weight.squeeze(-1).t())
        return self.head(x.mean(1))


class WindowConvNet(nn.Module):
    """EfficientViT-M-style convolutions on windows folded into the batch:
    a patch stem to (B, 16, 8, 8), then four 4x4 windows as (B*4, 16, 4, 4)
    rows with a sample's windows contiguous (batch outermost) for a
    pointwise qkv Conv, a depthwise 3x3 Conv and a ConvTranspose (2x2,
    stride 2) upsampling each window, and as (4*B, ...) rows interleaved
    (window outermost) for a grouped 3x3 Conv and a depthwise 3x3 Conv;
    then, pooled to 4x4, 2x2
    windows for layers wide enough for a ghost norm (pD > 2T² per sample):
    a pointwise Conv pw1 on contiguous windows, a pointwise Conv pw2 and a
    ConvTranspose up2 (2x2, stride 2) on interleaved ones. Every
    convolution has a bias. A sample's gradient is the sum over its rows."""

    def __init__(self, dim=16, num_classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 4, 4)
        self.qkv = nn.Conv2d(dim, 2 * dim, 1)
        self.dw = nn.Conv2d(2 * dim, 2 * dim, 3, padding=1, groups=2 * dim)
        self.up = nn.ConvTranspose2d(2 * dim, dim, 2, stride=2)
        self.mix = nn.Conv2d(dim, dim, 3, padding=1, groups=2)
        self.dw2 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.pw1 = nn.Conv2d(dim, 4 * dim, 1)
        self.pw2 = nn.Conv2d(4 * dim, 4 * dim, 1)
        self.up2 = nn.ConvTranspose2d(4 * dim, dim, 2, stride=2)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.stem(x)
        B, C = x.shape[0], x.shape[1]
        w = x.view(B, C, 2, 4, 2, 4).permute(0, 2, 4, 1, 3, 5).reshape(B * 4, C, 4, 4)
        w = self.up(torch.relu(self.dw(self.qkv(w))))  # (B*4, C, 8, 8)
        w = w.view(B, 4, C, 8, 8).transpose(0, 1).reshape(4 * B, C, 8, 8)  # window outermost
        w = self.dw2(torch.tanh(self.mix(w)))
        x = w.view(2, 2, B, C, 8, 8).permute(2, 3, 0, 4, 1, 5).reshape(B, C, 16, 16)
        x = F.avg_pool2d(x, 4)  # (B, C, 4, 4)
        w = x.view(B, C, 2, 2, 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(B * 4, C, 2, 2)
        w = torch.tanh(self.pw1(w))  # (B*4, 4C, 2, 2)
        w = w.view(B, 4, 4 * C, 2, 2).transpose(0, 1).reshape(4 * B, 4 * C, 2, 2)
        w = self.up2(torch.tanh(self.pw2(w)))  # (4*B, C, 4, 4)
        return self.head(w.view(4, B, C, 16).mean((0, 3)))


@torch.no_grad()
def perturb_constant_params(model, gen):
    """Parameters that are initialised to a constant (LayerNorm 1/0, zero
    biases, zero class tokens, layer-scale, zero ViT head ...) get N(0, 0.1)
    noise added: goldens become non-trivial and the value-based ONNX mapping
    unambiguous."""
    for _, p in model.named_parameters():
        if p.numel() == 1 or bool((p == p.reshape(-1)[0]).all()):
            p.add_(0.1 * torch.randn(p.shape, generator=gen))


@torch.no_grad()
def kaiming_convs(model):
    """torchvision's VGG / MobileNetV2 conv init (kaiming normal, fan_out):
    PyTorch's default conv init shrinks the signal and leaves near-constant logits."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


@torch.no_grad()
def randomize_bn(model, gen, gamma=(0.5, 1.5)):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.weight.copy_(gamma[0] + (gamma[1] - gamma[0]) * torch.rand(c, generator=gen))
            m.bias.copy_(0.1 * torch.randn(c, generator=gen))
            m.running_mean.copy_(0.1 * torch.randn(c, generator=gen))
            m.running_var.copy_(0.5 + torch.rand(c, generator=gen))


def fuse_all_conv_bn(model):
    """Replace every (Conv2d, BatchNorm2d) pair that sits consecutively in an
    nn.Sequential, or as conv/bn attribute pairs of a BasicBlock / the ResNet
    stem, by the fused Conv2d (with bias) followed by nn.Identity()."""
    model.eval()
    for mod in list(model.modules()):
        if isinstance(mod, nn.Sequential):
            names = list(mod._modules.keys())
            for a, b in zip(names, names[1:]):
                ca, cb = mod._modules[a], mod._modules[b]
                if isinstance(ca, nn.Conv2d) and isinstance(cb, nn.BatchNorm2d):
                    mod._modules[a] = fuse_conv_bn_eval(ca, cb)
                    mod._modules[b] = nn.Identity()
        for cname, bname in (("conv1", "bn1"), ("conv2", "bn2")):
            ca, cb = getattr(mod, cname, None), getattr(mod, bname, None)
            if isinstance(ca, nn.Conv2d) and isinstance(cb, nn.BatchNorm2d):
                setattr(mod, cname, fuse_conv_bn_eval(ca, cb))
                setattr(mod, bname, nn.Identity())
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules()), "unfused BatchNorm left"
    return model


# ---------------------------------------------------------------------------
# fixture definitions
# ---------------------------------------------------------------------------


def build(name):
    """Returns (model, input_shape, num_classes, mode, notes)."""
    torch.manual_seed(WEIGHT_SEED)
    gen = torch.Generator().manual_seed(PERTURB_SEED)
    notes = []
    if name == "cnn":
        m = TramerBonehCNN()
        shape = (1, 28, 28)
    elif name in ("resnet_eval", "resnet_train"):
        m = NarrowResNet()
        randomize_bn(m, gen)
        shape = (3, 32, 32)
        if name == "resnet_eval":
            fuse_all_conv_bn(m)
            notes.append("BatchNorm fused into the preceding conv in PyTorch (fuse_conv_bn_eval) before "
                         "export; the goldens are computed on the fused model, so conv weights/biases equal "
                         "the ONNX initializers.")
    elif name == "vgg":
        m = NarrowVGG()
        kaiming_convs(m)
        shape = (3, 32, 32)
        notes.append("Dropout is inactive in eval mode and is not exported.")
        notes.append("AvgPool2d(3, stride 1, padding 1) exports as Pad(pads 1, constant 0) + AveragePool "
                     "(no pads): torch 1.13 emits an explicit Pad for every avg_pool2d at opset >= 11. "
                     "AdaptiveAvgPool2d((2,2)) on 8x8 exports as AveragePool(kernel 4, stride 4).")
    elif name == "mobilenet":
        m = TinyMobileNetV2()
        kaiming_convs(m)
        randomize_bn(m, gen, gamma=(1.0, 4.0))  # large enough that some ReLU6 outputs hit the upper clip
        fuse_all_conv_bn(m)
        shape = (3, 32, 32)
        notes.append("BatchNorm fused into the preceding conv in PyTorch before export. ReLU6 exports as Clip(0,6).")
    elif name == "vit":
        m = torchvision.models.vision_transformer.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
            num_classes=10, dropout=0.0, attention_dropout=0.0)
        shape = (3, 32, 32)
        notes.append("nn.MultiheadAttention: in_proj_weight (3D x D) is one MatMul operand (transposed initializer "
                     "onnx::MatMul_*), in_proj_bias an Add; out_proj runs on the (B*T, D) reshaped tokens and "
                     "exports as Gemm(transB=1) with the original weight. class_token reaches the graph through "
                     "Expand (batch), pos_embedding through Add. Export must run with autograd enabled: under "
                     "torch.no_grad() MHA takes its fast path and aten::_native_multi_head_attention is not exportable.")
    elif name in ("vit_nofold", "vit17"):
        m = torchvision.models.vision_transformer.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
            num_classes=10, dropout=0.0, attention_dropout=0.0)
        shape = (3, 32, 32)
        if name == "vit_nofold":
            notes.append("The vit fixture's model exported with do_constant_folding=False: every token Linear "
                         "weight (and in_proj_weight) reaches its MatMul through a Transpose of the original "
                         "parameter, as in training-mode exports.")
        else:
            notes.append("The vit fixture's model exported at opset 17: LayerNorm is the native "
                         "LayerNormalization node, whose scale and bias are trainable elementwise parameters.")
    elif name == "packedqkv":
        m = PackedQKVNet()
        shape = (3, 32, 32)
        notes.append(PackedQKVNet.__doc__.replace("\n    ", " ").strip())
    elif name == "beit":
        m = TinyBeit()
        shape = (3, 32, 32)
        notes.append("Linear on tokens -> MatMul with transposed initializer (onnx::MatMul_*); qkv bias = "
                     "Concat(q_bias, ConstantOfShape(zeros), v_bias) -> Add; relative_position_bias_table -> Gather "
                     "(indices: Reshape(Slice(relative_position_index)) -> Reshape -> Transpose -> Unsqueeze -> Add "
                     "on the attention logits; gamma_1/gamma_2 -> Mul; cls_token -> Expand -> Concat.")
        notes.append("q_bias/v_bias/relative_position_bias_table are kept as initializers by deriving the zero "
                     "k-bias block and the relative_position_index slice from runtime shapes (see "
                     "BeitAttention.forward); a timm-style static export constant-folds them away.")
    elif name == "windowconv":
        m = WindowConvNet()
        shape = (3, 32, 32)
        notes.append(WindowConvNet.__doc__.replace("\n    ", " ").strip())
    elif name == "crossvit":
        m = TinyCrossViT()
        shape = (3, 32, 32)
        notes.append("Every nn.Linear runs on (B, T, D) tokens (class-token projections on (B, 1, D)) and exports "
                     "as MatMul with a transposed initializer + Add bias; the two heads act on (B, D) class tokens "
                     "and export as Gemm. Token sequences are split/joined with Slice/Concat.")
    else:
        raise ValueError(name)
    perturb_constant_params(m, gen)
    mode = "train" if name == "resnet_train" else "eval"
    m.train(mode == "train")
    for p in m.parameters():
        p.requires_grad_(True)
    return m, shape, 10, mode, notes


FIXTURES = ["cnn", "resnet_eval", "resnet_train", "vgg", "mobilenet", "vit", "beit", "crossvit",
            "vit_nofold", "vit17", "packedqkv", "windowconv"]

# Export settings that differ from the default (opset OPSET, constant folding).
EXPORT = {
    "vit_nofold": {"opset": 14, "fold": False},
    "vit17": {"opset": 17, "fold": True},
    "packedqkv": {"opset": 14, "fold": False},
}


def make_batch(shape, num_classes, n=BATCH):
    g = torch.Generator().manual_seed(INPUT_SEED)
    x = torch.randn((n,) + tuple(shape), generator=g, dtype=torch.float32)
    y = torch.randint(0, num_classes, (n,), generator=g, dtype=torch.int64)
    return x, y


# ---------------------------------------------------------------------------
# export + mapping
# ---------------------------------------------------------------------------


def export_onnx(model, x, path, training=False, opset=OPSET, fold=True):
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    # Export with autograd enabled and parameters requiring grad: otherwise
    # nn.MultiheadAttention (torchvision ViT) takes its inference fast path and
    # the export fails with "Exporting the operator
    # 'aten::_native_multi_head_attention' to ONNX opset version 14 is not supported".
    assert all(p.requires_grad for p in model.parameters())
    with warnings.catch_warnings(), torch.enable_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (x,), path, export_params=True, opset_version=opset, do_constant_folding=fold,
            input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, training=mode)
    m = onnx.load(path)
    onnx.checker.check_model(m)
    return m


def op_histogram(m):
    c = collections.Counter(n.op_type for n in m.graph.node)
    return dict(sorted(c.items()))


def swap_last2(a):
    return np.swapaxes(a, -1, -2)


def map_parameters(model, om):
    """Map each trainable torch parameter to exactly one ONNX initializer by
    value (identity, or transpose of the last two dims). Fails loudly unless
    the mapping is one-to-one."""
    inits = collections.OrderedDict((i.name, numpy_helper.to_array(i)) for i in om.graph.initializer)
    mapping = collections.OrderedDict()  # onnx name -> (torch name, how)
    unmapped = []
    for tname, p in model.named_parameters():
        if not p.requires_grad:
            continue
        a = p.detach().cpu().numpy()
        cands = []
        for iname, v in inits.items():
            if v.dtype != a.dtype:
                continue
            if v.shape == a.shape and np.array_equal(v, a):
                cands.append((iname, "identity"))
            elif a.ndim >= 2 and v.shape == swap_last2(a).shape and np.array_equal(v, swap_last2(a)):
                cands.append((iname, "transpose"))
        if len(cands) == 0:
            unmapped.append(tname)
            continue
        if len(cands) > 1:
            raise AssertionError(f"parameter {tname} matches several initializers: {cands}")
        iname, how = cands[0]
        if iname in mapping:
            raise AssertionError(f"initializer {iname} matched by {mapping[iname][0]} and {tname}")
        mapping[iname] = (tname, how)
    if unmapped:
        raise AssertionError(f"parameters with no ONNX initializer (folded by the exporter?): {unmapped}")
    # consumers of each mapped initializer
    consumers = collections.defaultdict(list)
    for n in om.graph.node:
        for inp in n.input:
            if inp in mapping:
                consumers[inp].append(n.op_type)
    other = []
    for iname, v in inits.items():
        if iname in mapping:
            continue
        other.append({"name": iname, "dtype": str(v.dtype), "shape": list(v.shape)})
    return mapping, consumers, other


def to_onnx_layout(t, how):
    a = t.detach().cpu().numpy()
    return np.ascontiguousarray(swap_last2(a)) if how == "transpose" else a


# ---------------------------------------------------------------------------
# goldens
# ---------------------------------------------------------------------------


def forward_loss(model, x, y):
    logits = model(x)
    return logits, F.cross_entropy(logits, y, reduction="none")


def compute_goldens(model, x, y, per_sample):
    params = collections.OrderedDict((n, p) for n, p in model.named_parameters() if p.requires_grad)
    model.zero_grad(set_to_none=True)
    logits, loss = forward_loss(model, x, y)
    loss.sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in params.items()}
    out = {"logits": logits.detach().clone(), "loss": loss.detach().clone(), "grads": grads}
    if not per_sample:
        return out
    assert not model.training
    n = x.shape[0]
    norms = {k: np.zeros(n, dtype=np.float64) for k in params}
    total = np.zeros(n, dtype=np.float64)
    gsum = {k: torch.zeros_like(p) for k, p in params.items()}
    for i in range(n):
        model.zero_grad(set_to_none=True)
        li_logits, li = forward_loss(model, x[i:i + 1], y[i:i + 1])
        li.sum().backward()
        assert torch.allclose(li_logits[0], logits[i], rtol=1e-4, atol=1e-5), "batch-of-1 logits differ"
        for k, p in params.items():
            g = p.grad.detach().double()
            sq = float((g * g).sum())
            norms[k][i] = math.sqrt(sq)
            total[i] += sq
            gsum[k] += p.grad.detach()
    for k in params:
        assert norms[k].min() > 0, f"zero per-sample gradient for {k}"
        assert torch.allclose(gsum[k], grads[k], rtol=1e-3, atol=1e-5), f"sum of per-sample grads != batch grad: {k}"
    out["norms"] = norms
    out["norm_total"] = np.sqrt(total)
    model.zero_grad(set_to_none=True)
    return out


def save_npz(path, arrays):
    """Deterministic .npz (np.savez_compressed stamps the current time into
    the zip entries): fixed timestamps, sorted keys, deflate."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for k in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asanyarray(arrays[k]), allow_pickle=False)
            zi = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            zf.writestr(zi, buf.getvalue())


def make_fixture(name, out_dir):
    t0 = time.time()
    model, shape, k, mode, notes = build(name)
    x, y = make_batch(shape, k)
    training = mode == "train"
    onnx_path = os.path.join(out_dir, "models", name + ".onnx")

    # Export a deep copy: a TRAINING-mode export runs a traced forward in
    # train mode, which updates BatchNorm running statistics in place.
    exp_model = copy.deepcopy(model)
    exp = EXPORT.get(name, {"opset": OPSET, "fold": True})
    om = export_onnx(exp_model, x, onnx_path, training=training, **exp)
    buffers_changed = [n for (n, b0), (_, b1) in zip(model.named_buffers(), exp_model.named_buffers())
                       if not torch.equal(b0, b1) and not n.endswith("num_batches_tracked")]
    if training:
        # use the exported (post-trace) state so running stats equal the ONNX initializers
        model = exp_model
    else:
        assert not buffers_changed, buffers_changed
    mapping, consumers, other_inits = map_parameters(model, om)
    n_params = sum(1 for _, p in model.named_parameters() if p.requires_grad)
    assert len(mapping) == n_params

    # goldens
    golden_model = copy.deepcopy(model)
    g = compute_goldens(golden_model, x, y, per_sample=not training)
    # determinism: a fresh forward gives bit-identical logits
    logits2, _ = forward_loss(copy.deepcopy(model), x, y)
    assert torch.equal(logits2.detach(), g["logits"]), "PyTorch logits are not deterministic"

    arrays = {
        "input": x.numpy().astype(np.float32),
        "labels": y.numpy().astype(np.int64),
        "logits": g["logits"].numpy().astype(np.float32),
        "loss": g["loss"].numpy().astype(np.float32),
    }
    params_info = []
    for iname, (tname, how) in mapping.items():
        arrays["grad/" + iname] = to_onnx_layout(g["grads"][tname], how).astype(np.float32)
        if "norms" in g:
            arrays["norm/" + iname] = g["norms"][tname].astype(np.float64)
        params_info.append({
            "onnx_name": iname, "torch_name": tname, "mapping": how,
            "shape": list(arrays["grad/" + iname].shape), "consumers": consumers[iname]})
    if "norm_total" in g:
        arrays["norm_total"] = g["norm_total"].astype(np.float64)

    extra = {}
    if training:
        em = copy.deepcopy(model).eval()
        with torch.no_grad():
            arrays["logits_eval"] = em(x).numpy().astype(np.float32)

    # independent check of the exported graph: numpy reference evaluator
    ref = onnx_ref.run(om, {"input": arrays["input"]})["logits"]
    diff = float(np.abs(ref - arrays["logits"]).max())
    extra["onnx_ref_max_abs_diff_vs_logits"] = diff
    if training:
        diff_eval = float(np.abs(ref - arrays["logits_eval"]).max())
        extra["onnx_ref_max_abs_diff_vs_logits_eval"] = diff_eval
        assert diff < 1e-4 < diff_eval, (diff, diff_eval)
        notes.append("The ONNX graph (BatchNormalization training_mode=1) computes batch statistics: "
                     "it reproduces 'logits' (max abs diff %.1e), not 'logits_eval' (max abs diff %.1e)."
                     % (diff, diff_eval))
    else:
        assert diff < 1e-4, f"ONNX reference evaluation differs from PyTorch: {diff}"

    npz_path = os.path.join(out_dir, "golden", name + ".npz")
    save_npz(npz_path, arrays)

    if training:
        notes.append("Per-sample gradient norms are not defined for batch-statistic BatchNorm (samples interact "
                     "through the batch mean/variance): norm/* and norm_total are omitted. logits/loss/grad/* "
                     "are computed in train mode on the batch of 8.")
        if buffers_changed:
            notes.append("The traced TRAINING-mode export forward updated BatchNorm running_mean/running_var once "
                         "(momentum 0.1) before the initializers were written; the ONNX initializers and "
                         "logits_eval use those post-trace values (%d buffers changed)." % len(buffers_changed))
        notes.append("The 2nd/3rd BatchNormalization outputs (updated running mean/var) are not graph outputs.")
    else:
        notes.append("Per-sample norms by brute force: batch of 1, eval mode, fresh zero grads, float32 "
                     "gradients, norm accumulated in float64.")
    init_names = {i.name for i in om.graph.initializer}
    for n in om.graph.node:
        if n.op_type == "Identity" and n.input[0] in init_names:
            notes.append("The exporter de-duplicated equal-valued initializers: %s = Identity(%s)."
                         % (n.output[0], n.input[0]))
    bn_nodes = [n for n in om.graph.node if n.op_type == "BatchNormalization"]
    if bn_nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in bn_nodes[0].attribute}
        notes.append("BatchNormalization nodes: %d, each with %d outputs, attributes %s."
                     % (len(bn_nodes), len(bn_nodes[0].output), json.dumps(attrs, sort_keys=True)))
    manifest = {
        "onnx": "models/%s.onnx" % name,
        "golden": "golden/%s.npz" % name,
        "input_shape": [BATCH] + list(shape),
        "num_classes": k,
        "mode": mode,
        "onnx_opset": exp["opset"],
        "constant_folding": exp["fold"],
        "trainable": params_info,
        "unmapped_torch_parameters": [],
        "non_parameter_initializers": other_inits,
        "num_trainable_scalars": int(sum(int(np.prod(p["shape"])) for p in params_info)),
        "op_histogram": op_histogram(om),
        "per_sample_norms": not training,
        "notes": notes,
    }
    manifest.update(extra)
    print("%-13s %6.1fs  params=%d  ops=%d  ref_diff=%.2e" % (
        name, time.time() - t0, len(params_info), len(om.graph.node), diff), flush=True)
    return manifest


# ---------------------------------------------------------------------------
# full-size models (not committed)
# ---------------------------------------------------------------------------


def make_full(out_dir, names, check=True):
    """Full-size torchvision models, random init, eval mode, for import /
    inference tests. Not committed (hundreds of MB)."""
    os.makedirs(out_dir, exist_ok=True)
    info = {}
    for name in names:
        t0 = time.time()
        torch.manual_seed(WEIGHT_SEED)
        # "<model>_train" exports in training mode: BatchNormalization nodes
        # stay (eval export folds them into Conv under new names), so the
        # parameter count equals torchvision's (11,689,512 for resnet18).
        training = name.endswith("_train")
        arch = name[:-len("_train")] if training else name
        m = getattr(torchvision.models, arch)(weights=None).eval()
        if name.startswith("vit"):
            # torchvision zero-initialises the ViT head: logits would be all zero.
            perturb_constant_params(m, torch.Generator().manual_seed(PERTURB_SEED))
        x = torch.randn((2, 3, 224, 224), generator=torch.Generator().manual_seed(INPUT_SEED))
        with torch.no_grad():
            logits = m(x)
            assert torch.equal(logits, m(x)), "PyTorch logits are not deterministic"
        path = os.path.join(out_dir, name + ".onnx")
        om = export_onnx(m, x, path, training=training)
        if training:
            # Training-mode graphs normalize with batch statistics: the
            # eval-mode logits above do not apply, so check only the import.
            check_this = False
        else:
            check_this = check
        save_npz(os.path.join(out_dir, name + ".npz"), {"input": x.numpy(), "logits": logits.numpy()})
        entry = {"onnx": name + ".onnx", "bytes": os.path.getsize(path), "input_shape": [2, 3, 224, 224],
                 "num_classes": int(logits.shape[1]), "op_histogram": op_histogram(om)}
        if check_this:
            ref = onnx_ref.run(om, {"input": x.numpy()})["logits"]
            entry["onnx_ref_max_abs_diff_vs_logits"] = float(np.abs(ref - logits.numpy()).max())
            assert entry["onnx_ref_max_abs_diff_vs_logits"] < 1e-4, entry
        del om
        info[name] = entry
        print("%-9s %6.1fs  %s  %d bytes" % (name, time.time() - t0, path, entry["bytes"]), flush=True)
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="testdata", help="testdata directory (default: testdata)")
    ap.add_argument("--only", default="", help="comma-separated subset of fixtures")
    ap.add_argument("--full", default="", metavar="DIR",
                    help="also export full-size resnet18, vgg11, vit_b_16 (random init) to DIR")
    ap.add_argument("--full-only", action="store_true", help="with --full: skip the small fixtures")
    ap.add_argument("--full-models", default="resnet18,vgg11,vit_b_16")
    ap.add_argument("--no-full-check", action="store_true",
                    help="with --full: skip the numpy re-evaluation of the exported full-size graphs (~30 s)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)

    if not args.full_only:
        names = [n for n in args.only.split(",") if n] or FIXTURES
        os.makedirs(os.path.join(args.out, "models"), exist_ok=True)
        os.makedirs(os.path.join(args.out, "golden"), exist_ok=True)
        man_path = os.path.join(args.out, "golden", "manifest.json")
        manifest = {}
        if args.only and os.path.exists(man_path):
            with open(man_path) as f:
                manifest = json.load(f).get("fixtures", {})
        for n in names:
            manifest[n] = make_fixture(n, args.out)
        doc = {
            "generator": "testdata/gen/make_fixtures.py",
            "torch": torch.__version__, "torchvision": torchvision.__version__, "onnx": onnx.__version__,
            "seeds": {"weights": WEIGHT_SEED, "input": INPUT_SEED, "perturb": PERTURB_SEED},
            "fixtures": {k: manifest[k] for k in sorted(manifest)},
        }
        with open(man_path, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.full:
        make_full(args.full, [n for n in args.full_models.split(",") if n], check=not args.no_full_check)


if __name__ == "__main__":
    main()
