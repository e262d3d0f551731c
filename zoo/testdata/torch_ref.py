"""PyTorch references for the zoo tests (zoo/zoo_torch_test.go).

Usage: /usr/bin/python3 torch_ref.py JOB.json OUT.json

Needs the Debian python3-torch (1.13), python3-torchvision (0.14),
python3-onnx (1.12) and numpy. The job (written by the Go test) asks for:

  state_dicts  {zoo name: reference}: parameter and buffer names and shapes
               of the reference PyTorch module (num_batches_tracked left out);
  exports      {"dir": DIR, "models": [...]}: torch.onnx.export of reference
               modules at opset 14, eval mode (or TrainingMode.TRAINING),
               constant folding on, dynamic batch, optionally without
               parameters (export_params=False: cheap for big models);
  numeric      [...]: load a zoo ONNX file's initializers (perturbed, so that
               zero- and one-initialized tensors are not trivial) into the
               reference module by name, run both (the ONNX graph with the
               numpy evaluator testdata/gen/onnx_ref.py) on one random batch
               and report the largest difference; with "folded", also run the
               BatchNorm-folded export of the same seed and compare it with
               the unperturbed BatchNorm graph.

References: "tv:NAME" is torchvision.models.NAME(**kwargs), "tv_vit" is
torchvision's VisionTransformer(**kwargs); the others are written below from
the source they name (kuangliu/pytorch-cifar, the fixture CNN, timm 0.5/0.6
VisionTransformer, Beit and CrossVit), since those packages are not
installed. Module construction skips weight init (torch.nn.init is stubbed):
only names, shapes and loaded values matter here.
"""

import json
import math
import os
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from onnx import load as onnx_load, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------
# kuangliu/pytorch-cifar (models/resnet.py, vgg.py, mobilenetv2.py,
# mobilenet.py), num_classes as a parameter.


class KLBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        return F.relu(out)


class KLBottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, self.expansion * planes, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(self.expansion * planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += self.shortcut(x)
        return F.relu(out)


class KLResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10):
        super().__init__()
        self.in_planes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._make_layer(block, 64, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 128, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 256, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 512, num_blocks[3], stride=2)
        self.linear = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        layers = []
        for s in [stride] + [1] * (num_blocks - 1):
            layers.append(block(self.in_planes, planes, s))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.avg_pool2d(out, 4)
        return self.linear(out.view(out.size(0), -1))


KL_VGG = {
    "VGG11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "VGG13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "VGG16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "VGG19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class KLVGG(nn.Module):
    def __init__(self, vgg_name, num_classes=10):
        super().__init__()
        layers, c = [], 3
        for x in KL_VGG[vgg_name]:
            if x == "M":
                layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                layers += [nn.Conv2d(c, x, kernel_size=3, padding=1), nn.BatchNorm2d(x), nn.ReLU(inplace=True)]
                c = x
        layers += [nn.AvgPool2d(kernel_size=1, stride=1)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x):
        out = self.features(x)
        return self.classifier(out.view(out.size(0), -1))


class KLMBv2Block(nn.Module):
    def __init__(self, in_planes, out_planes, expansion, stride):
        super().__init__()
        self.stride = stride
        planes = expansion * in_planes
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, stride=1, padding=0, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, groups=planes, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.shortcut = nn.Sequential()
        if stride == 1 and in_planes != out_planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False),
                nn.BatchNorm2d(out_planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return out + self.shortcut(x) if self.stride == 1 else out


class KLMobileNetV2(nn.Module):
    cfg = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        layers, in_planes = [], 32
        for expansion, out_planes, num_blocks, stride in self.cfg:
            for s in [stride] + [1] * (num_blocks - 1):
                layers.append(KLMBv2Block(in_planes, out_planes, expansion, s))
                in_planes = out_planes
        self.layers = nn.Sequential(*layers)
        self.conv2 = nn.Conv2d(320, 1280, kernel_size=1, stride=1, padding=0, bias=False)
        self.bn2 = nn.BatchNorm2d(1280)
        self.linear = nn.Linear(1280, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.relu(self.bn2(self.conv2(out)))
        out = F.avg_pool2d(out, 4)
        return self.linear(out.view(out.size(0), -1))


class KLMBBlock(nn.Module):
    def __init__(self, in_planes, out_planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, in_planes, kernel_size=3, stride=stride, padding=1, groups=in_planes, bias=False)
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv2 = nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=1, padding=0, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)))


class KLMobileNet(nn.Module):
    cfg = [64, (128, 2), 128, (256, 2), 256, (512, 2), 512, 512, 512, 512, 512, (1024, 2), 1024]

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        layers, in_planes = [], 32
        for x in self.cfg:
            out_planes = x if isinstance(x, int) else x[0]
            stride = 1 if isinstance(x, int) else x[1]
            layers.append(KLMBBlock(in_planes, out_planes, stride))
            in_planes = out_planes
        self.layers = nn.Sequential(*layers)
        self.linear = nn.Linear(1024, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.avg_pool2d(out, 2)
        return self.linear(out.view(out.size(0), -1))


class TramerBonehCNN(nn.Module):
    """As testdata/gen/make_fixtures.py defines it."""

    def __init__(self, num_classes=10, flat=512):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 8, stride=2, padding=2), nn.Tanh(), nn.MaxPool2d(2, 1),
            nn.Conv2d(16, 32, 4, stride=2), nn.Tanh(), nn.MaxPool2d(2, 1))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(flat, 32), nn.Tanh(), nn.Linear(32, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


# ---------------------------------------------------------------------------
# timm 0.5/0.6: vision_transformer (Attention with qkv[0], qkv[1], qkv[2]),
# beit, crossvit.


class TMlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TAttention(nn.Module):
    def __init__(self, dim, num_heads, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class TBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = TAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = TMlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TPatchEmbed(nn.Module):
    def __init__(self, in_chans, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class TimmViT(nn.Module):
    def __init__(self, img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, num_classes=1000):
        super().__init__()
        n = (img_size // patch_size) ** 2
        self.patch_embed = TPatchEmbed(3, patch_size, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, embed_dim))
        self.blocks = nn.Sequential(*[TBlock(embed_dim, num_heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


class BAttention(nn.Module):
    """timm beit.Attention with qkv_bias and a relative position bias table."""

    def __init__(self, dim, num_heads, window_size):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.v_bias = nn.Parameter(torch.zeros(dim))
        self.window_size = window_size
        self.num_relative_distance = (2 * window_size[0] - 1) * (2 * window_size[1] - 1) + 3
        self.relative_position_bias_table = nn.Parameter(torch.zeros(self.num_relative_distance, num_heads))
        coords_h = torch.arange(window_size[0])
        coords_w = torch.arange(window_size[1])
        coords = torch.stack(torch.meshgrid([coords_h, coords_w], indexing="ij"))  # 2, Wh, Ww
        coords_flatten = torch.flatten(coords, 1)
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()
        relative_coords[:, :, 0] += window_size[0] - 1
        relative_coords[:, :, 1] += window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * window_size[1] - 1
        relative_position_index = torch.zeros(size=(window_size[0] * window_size[1] + 1,) * 2, dtype=relative_coords.dtype)
        relative_position_index[1:, 1:] = relative_coords.sum(-1)
        relative_position_index[0, 0:] = self.num_relative_distance - 3
        relative_position_index[0:, 0] = self.num_relative_distance - 2
        relative_position_index[0, 0] = self.num_relative_distance - 1
        self.register_buffer("relative_position_index", relative_position_index)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv_bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias, requires_grad=False), self.v_bias))
        qkv = F.linear(input=x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        ws = self.window_size
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            ws[0] * ws[1] + 1, ws[0] * ws[1] + 1, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
        return self.proj(x)


class BBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio, window_size, init_values):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = BAttention(dim, num_heads, window_size)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = TMlp(dim, int(dim * mlp_ratio))
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        x = x + self.gamma_1 * self.attn(self.norm1(x))
        return x + self.gamma_2 * self.mlp(self.norm2(x))


class TimmBeit(nn.Module):
    def __init__(self, img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0,
                 init_values=0.1, num_classes=1000):
        super().__init__()
        g = img_size // patch_size
        self.patch_embed = TPatchEmbed(3, patch_size, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.blocks = nn.ModuleList([BBlock(embed_dim, num_heads, mlp_ratio, (g, g), init_values) for _ in range(depth)])
        self.fc_norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.fc_norm(x[:, 1:, :].mean(1)))


class CrossAttention(nn.Module):
    def __init__(self, dim, num_heads, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.wq = nn.Linear(dim, dim, bias=qkv_bias)
        self.wk = nn.Linear(dim, dim, bias=qkv_bias)
        self.wv = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q = self.wq(x[:, 0:1, ...]).reshape(B, 1, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        k = self.wk(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        v = self.wv(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, 1, C)
        return self.proj(x)


class CrossAttentionBlock(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = CrossAttention(dim, num_heads)

    def forward(self, x):
        return x[:, 0:1, ...] + self.attn(self.norm1(x))


class MultiScaleBlock(nn.Module):
    def __init__(self, dim, depth, num_heads, mlp_ratio):
        super().__init__()
        nb = len(dim)
        self.num_branches = nb
        self.blocks = nn.ModuleList()
        for d in range(nb):
            tmp = [TBlock(dim[d], num_heads[d], mlp_ratio[d]) for _ in range(depth[d])]
            if tmp:
                self.blocks.append(nn.Sequential(*tmp))
        self.projs = nn.ModuleList([nn.Sequential(nn.LayerNorm(dim[d], eps=1e-6), nn.GELU(), nn.Linear(dim[d], dim[(d + 1) % nb]))
                                    for d in range(nb)])
        assert depth[-1] == 0
        self.fusion = nn.ModuleList([CrossAttentionBlock(dim[(d + 1) % nb], num_heads[(d + 1) % nb]) for d in range(nb)])
        self.revert_projs = nn.ModuleList([nn.Sequential(nn.LayerNorm(dim[(d + 1) % nb], eps=1e-6), nn.GELU(),
                                                         nn.Linear(dim[(d + 1) % nb], dim[d])) for d in range(nb)])

    def forward(self, x):
        outs_b = [block(x[i]) for i, block in enumerate(self.blocks)]
        proj_cls_token = [proj(outs_b[i][:, 0:1, ...]) for i, proj in enumerate(self.projs)]
        outs = []
        for i, (fusion, revert_proj) in enumerate(zip(self.fusion, self.revert_projs)):
            tmp = torch.cat((proj_cls_token[i], outs_b[(i + 1) % self.num_branches][:, 1:, ...]), dim=1)
            tmp = fusion(tmp)
            reverted = revert_proj(tmp[:, 0:1, ...])
            outs.append(torch.cat((reverted, outs_b[i][:, 1:, ...]), dim=1))
        return outs


class TimmCrossViT(nn.Module):
    def __init__(self, img_size=240, img_scale=(1.0, 224 / 240), patch_size=(12, 16), embed_dim=(96, 192),
                 depth=((1, 4, 0),) * 3, num_heads=(3, 3), mlp_ratio=(4, 4, 1), num_classes=1000):
        super().__init__()
        self.img_size_scaled = [int(img_size * s) for s in img_scale]
        num_patches = [(s // p) ** 2 for s, p in zip(self.img_size_scaled, patch_size)]
        for i in range(2):
            setattr(self, "pos_embed_%d" % i, nn.Parameter(torch.zeros(1, 1 + num_patches[i], embed_dim[i])))
            setattr(self, "cls_token_%d" % i, nn.Parameter(torch.zeros(1, 1, embed_dim[i])))
        self.patch_embed = nn.ModuleList([TPatchEmbed(3, p, d) for p, d in zip(patch_size, embed_dim)])
        self.blocks = nn.ModuleList([MultiScaleBlock(embed_dim, cfg, num_heads, mlp_ratio) for cfg in depth])
        self.norm = nn.ModuleList([nn.LayerNorm(embed_dim[i], eps=1e-6) for i in range(2)])
        self.head = nn.ModuleList([nn.Linear(embed_dim[i], num_classes) for i in range(2)])

    def forward(self, x):
        B = x.shape[0]
        xs = []
        for i, pe in enumerate(self.patch_embed):
            ss = self.img_size_scaled[i]
            x_ = x
            if x.shape[-2] != ss or x.shape[-1] != ss:
                x_ = F.interpolate(x, size=(ss, ss), mode="bicubic", align_corners=False)
            x_ = pe(x_)
            cls = getattr(self, "cls_token_%d" % i).expand(B, -1, -1)
            xs.append(torch.cat((cls, x_), dim=1) + getattr(self, "pos_embed_%d" % i))
        for blk in self.blocks:
            xs = blk(xs)
        xs = [norm(xs[i]) for i, norm in enumerate(self.norm)]
        return torch.mean(torch.stack([head(xs[i][:, 0]) for i, head in enumerate(self.head)], dim=0), dim=0)


class TinyAdaptive(nn.Module):
    """Adaptive average pooling to 6x6 whatever the input: the zoo writes the
    cases torch cannot export (output not dividing the input) as MatMuls or
    an Expand."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.pool = nn.AdaptiveAvgPool2d((6, 6))
        self.fc = nn.Linear(4 * 36, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.conv(x)), 1))


def reference(key, kwargs):
    kw = dict(kwargs or {})
    if key.startswith("tv:"):
        return getattr(torchvision.models, key[3:])(weights=None, **kw)
    if key == "tv_vit":
        return torchvision.models.vision_transformer.VisionTransformer(**kw)
    if key.startswith("kl_resnet"):
        blocks = {"18": (KLBasicBlock, [2, 2, 2, 2]), "34": (KLBasicBlock, [3, 4, 6, 3]), "50": (KLBottleneck, [3, 4, 6, 3]),
                  "101": (KLBottleneck, [3, 4, 23, 3]), "152": (KLBottleneck, [3, 8, 36, 3])}[key[len("kl_resnet"):]]
        return KLResNet(*blocks, **kw)
    if key.startswith("kl_vgg"):
        return KLVGG("VGG" + key[len("kl_vgg"):], **kw)
    if key == "kl_mobilenet_v2":
        return KLMobileNetV2(**kw)
    if key == "kl_mobilenet":
        return KLMobileNet(**kw)
    if key == "tiny_adaptive":
        return TinyAdaptive(**kw)
    if key == "tbcnn":
        return TramerBonehCNN(**kw)
    if key == "timm_vit":
        return TimmViT(**kw)
    if key == "timm_beit":
        return TimmBeit(**kw)
    if key == "timm_crossvit":
        kw = dict(kw)
        for k in ("patch_size", "embed_dim", "num_heads", "mlp_ratio", "img_scale"):
            if k in kw:
                kw[k] = tuple(kw[k])
        if "depth" in kw:
            kw["depth"] = tuple(tuple(d) for d in kw["depth"])
        return TimmCrossViT(**kw)
    raise ValueError(key)


class no_init:
    """Stub torch.nn.init so that building big modules costs nothing."""

    names = ["normal_", "uniform_", "kaiming_normal_", "kaiming_uniform_", "xavier_uniform_", "xavier_normal_",
             "trunc_normal_", "constant_", "zeros_", "ones_"]

    def __enter__(self):
        self.saved = {n: getattr(nn.init, n) for n in self.names}
        for n in self.names:
            setattr(nn.init, n, lambda t, *a, **k: t)

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(nn.init, n, f)


def state_dict_shapes(key, kwargs):
    with no_init():
        m = reference(key, kwargs)
    return {k: list(v.shape) for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked")}


def export(spec, out_dir):
    with no_init():
        m = reference(spec["ref"], spec.get("kwargs"))
    if spec.get("params", True):
        with torch.no_grad():  # distinct values: fewer de-duplicated initializers
            for p in m.parameters():
                p.copy_(torch.randn(p.shape) * 0.01)
    train = spec.get("train", False)
    m.train(train)
    for p in m.parameters():
        p.requires_grad_(True)  # else nn.MultiheadAttention takes its unexportable fast path
    x = torch.randn((1,) + tuple(spec["input"]))
    with warnings.catch_warnings(), torch.enable_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            m, (x,), os.path.join(out_dir, spec["file"]), export_params=spec.get("params", True), opset_version=14,
            do_constant_folding=True, input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            training=torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL)


def numeric(spec, onnx_ref):
    t0 = time.time()
    rng = np.random.default_rng(0)
    om = onnx_load(spec["onnx"])
    sd = {}
    for init in om.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype != np.float32:
            continue  # index buffers: the reference computes its own
        if init.name.endswith("running_var"):
            a = rng.uniform(0.5, 1.5, a.shape)
        else:
            a = a + rng.normal(0, spec.get("noise", 0.02), a.shape)
        a = a.astype(np.float32)
        init.CopyFrom(numpy_helper.from_array(a, init.name))
        if init.name.endswith(".T"):
            sd[init.name[:-2]] = torch.from_numpy(np.ascontiguousarray(a.T))
        else:
            sd[init.name] = torch.from_numpy(a)
    with no_init():
        m = reference(spec["ref"], spec.get("kwargs"))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked") and not k.endswith("relative_position_index")]
    x = rng.normal(0, 1, (2,) + tuple(spec["input"])).astype(np.float32)
    m.eval()
    with torch.no_grad():
        want = m(torch.from_numpy(x)).numpy()
    got = onnx_ref.run(om, {"input": x})["logits"]
    res = {"missing": missing, "unexpected": list(unexpected), "scale": float(np.abs(want).max()),
           "max_abs_diff": float(np.abs(got - want).max()), "shape": list(got.shape)}
    if spec.get("folded"):
        plain = onnx_ref.run(onnx_load(spec["onnx"]), {"input": x})["logits"]
        folded = onnx_ref.run(onnx_load(spec["folded"]), {"input": x})["logits"]
        res["folded_scale"] = float(np.abs(plain).max())
        res["folded_max_abs_diff"] = float(np.abs(folded - plain).max())
    res["seconds"] = time.time() - t0
    return res


def patch_onnx_ref(onnx_ref):
    """onnx_ref has no MaxPool ceil_mode (SqueezeNet): run that one with
    torch, in float64."""
    node = onnx_ref._node

    def _node(op, ins, a, n_out):
        if op == "MaxPool" and a.get("ceil_mode", 0):
            p = list(a.get("pads", [0, 0, 0, 0]))
            assert p[:2] == p[2:], "asymmetric pads"
            y = F.max_pool2d(torch.from_numpy(np.ascontiguousarray(ins[0])), a["kernel_shape"], a["strides"], p[:2],
                             ceil_mode=True)
            return [y.numpy()]
        return node(op, ins, a, n_out)

    onnx_ref._node = _node


def main():
    job = json.load(open(sys.argv[1]))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    out = {"versions": {"torch": torch.__version__, "torchvision": torchvision.__version__}, "timing": {}}
    t = time.time()
    out["state_dicts"] = {name: state_dict_shapes(r["ref"], r.get("kwargs")) for name, r in job.get("state_dicts", {}).items()}
    out["timing"]["state_dicts"] = time.time() - t
    t = time.time()
    ex = job.get("exports")
    if ex:
        for spec in ex["models"]:
            export(spec, ex["dir"])
    out["timing"]["exports"] = time.time() - t
    t = time.time()
    if job.get("numeric"):
        sys.path.insert(0, os.path.join(HERE, "..", "..", "testdata", "gen"))
        import onnx_ref
        patch_onnx_ref(onnx_ref)
        out["numeric"] = {spec["name"]: numeric(spec, onnx_ref) for spec in job["numeric"]}
    out["timing"]["numeric"] = time.time() - t
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
