"""PyTorch definitions of the zoo models in docs/BENCHMARKS.md's DP tables
(bench/dp_modes.sh, bench/dp_zoo.sh) that the benchmark suite lacks,
written for this repository to match our Go zoo builders (zoo/cnn.go,
zoo/vit.go) layer for layer, with the same module and parameter names:

- cifar_resnet34, cifar_resnet50: the CIFAR ResNets of kuangliu/pytorch-cifar
  (3×3 stride-1 stem, no max pool, 1×1 conv + BN shortcuts, bottleneck stride
  on the 3×3 conv), global average pool, Linear.
- cifar_vgg16, cifar_vgg19: conv(bias) + BN + ReLU features with 2×2 max
  pools, a 1×1 average pool, one Linear(512, classes).
- cifar_mobilenet_v2: stride-1 stem and second stage, ReLU, 1×1-conv
  shortcut where a stride-1 block changes the width, 1280-wide head conv.
- vit_small_patch16_224: timm's ViT-S/16 (12 blocks, 6 heads, dim 384,
  MLP 1536, LayerNorm eps 1e-6, class-token head, qkv with bias).

The CNNs are built with BatchNorm2d, as the zoo keeps it for
`dpfinetune bench`; bench/torch_models.py then replaces every BatchNorm by
GroupNorm exactly as our default rewrite does (16 groups, or the largest
divisor of the channels below 16), so both sides train the same network.
Weights are PyTorch's default init (seeded by the caller), not our zoo's
bytes: the step time does not depend on them.
"""
import torch
import torch.nn as nn

CIFAR = (3, 32, 32)

# name: (input shape without batch, batch of the DP tables, classes)
ZOO = {
    "cifar_resnet34": (CIFAR, 32, 10),
    "cifar_resnet50": (CIFAR, 32, 10),
    "cifar_vgg16": (CIFAR, 32, 10),
    "cifar_vgg19": (CIFAR, 16, 10),  # dp_modes.sh's Table 6 run
    "cifar_mobilenet_v2": (CIFAR, 32, 10),
    "vit_small_patch16_224": ((3, 224, 224), 8, 10),  # dp_zoo.sh: --num-classes 10
}


# --- CIFAR ResNet ---

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = shortcut(cin, planes, stride)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.shortcut = shortcut(cin, out, stride)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + self.shortcut(x))


def shortcut(cin, cout, stride):
    """Identity, or 1×1 conv (no bias) + BN where the shape changes."""
    if stride == 1 and cin == cout:
        return nn.Sequential()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))


class CifarResNet(nn.Module):
    def __init__(self, block, blocks, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, n in enumerate(blocks):
            planes = 64 << i
            layer = []
            for j in range(n):
                layer.append(block(cin, planes, (2 if i > 0 else 1) if j == 0 else 1))
                cin = planes * block.expansion
            setattr(self, "layer%d" % (i + 1), nn.Sequential(*layer))
        self.pool = nn.AdaptiveAvgPool2d(1)  # kuangliu's avg_pool2d(4) on the 4×4 map
        self.linear = nn.Linear(cin, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.linear(torch.flatten(self.pool(x), 1))


# --- CIFAR VGG ---

VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
VGG19 = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


class CifarVGG(nn.Module):
    def __init__(self, cfg, classes):
        super().__init__()
        layers, cin = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU()]
                cin = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)  # kuangliu's AvgPool2d(1) on the 1×1 map
        self.classifier = nn.Linear(cin, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


# --- CIFAR MobileNetV2 ---

class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, expansion, stride):
        super().__init__()
        planes = expansion * cin
        self.stride = stride
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, groups=planes, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = shortcut(cin, cout, 1) if stride == 1 else None

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return y + self.shortcut(x) if self.stride == 1 else y


# (expansion, out channels, blocks, stride of the first block)
MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


class CifarMobileNetV2(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        layers, cin = [], 32
        for t, cout, n, s in MOBILENET_V2:
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, t, s if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.conv2 = nn.Conv2d(cin, 1280, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(1280)
        self.pool = nn.AdaptiveAvgPool2d(1)  # kuangliu's avg_pool2d(4) on the 4×4 map
        self.linear = nn.Linear(1280, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(self.layers(x))))
        return self.linear(torch.flatten(self.pool(x), 1))


# --- timm ViT ---

class PatchEmbed(nn.Module):
    def __init__(self, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, stride=patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N, D)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, D = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q @ k.transpose(-2, -1)) * self.scale
        o = att.softmax(dim=-1) @ v
        return self.proj(o.transpose(1, 2).reshape(B, N, D))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image, patch, depth, heads, dim, hidden, classes):
        super().__init__()
        self.patch_embed = PatchEmbed(patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + (image // patch) ** 2, dim))
        nn.init.normal_(self.cls_token, std=1e-6)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def build(name):
    """Builds zoo model name with BatchNorm2d (not yet GroupNorm)."""
    shape, _, classes = ZOO[name]
    if name == "cifar_resnet34":
        return CifarResNet(BasicBlock, [3, 4, 6, 3], classes)
    if name == "cifar_resnet50":
        return CifarResNet(Bottleneck, [3, 4, 6, 3], classes)
    if name == "cifar_vgg16":
        return CifarVGG(VGG16, classes)
    if name == "cifar_vgg19":
        return CifarVGG(VGG19, classes)
    if name == "cifar_mobilenet_v2":
        return CifarMobileNetV2(classes)
    if name == "vit_small_patch16_224":
        return ViT(shape[1], 16, 12, 6, 384, 1536, classes)
    raise KeyError(name)
