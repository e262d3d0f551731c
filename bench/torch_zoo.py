"""PyTorch models for the zoo rows of docs/BENCHMARKS.md's DP tables
(bench/dp_modes.sh, bench/dp_zoo.sh) that the benchmark suite lacks. They
are the zoo's own PyTorch references (zoo/testdata/torch_ref.py, which
zoo/zoo_torch_test.go checks against our Go builders: names, shapes and
logits), at the tables' sizes:

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
import os
import sys

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


# name: reference module in zoo/testdata/torch_ref.py and its kwargs (the
# same as zoo/zoo_torch_test.go's references()).
REFS = {
    "cifar_resnet34": ("kl_resnet34", {}),
    "cifar_resnet50": ("kl_resnet50", {}),
    "cifar_vgg16": ("kl_vgg16", {}),
    "cifar_vgg19": ("kl_vgg19", {}),
    "cifar_mobilenet_v2": ("kl_mobilenet_v2", {}),
    "vit_small_patch16_224": ("timm_vit", {"embed_dim": 384, "num_heads": 6, "depth": 12}),
}


def build(name):
    """Builds zoo model name with BatchNorm2d (not yet GroupNorm)."""
    _, _, classes = ZOO[name]
    key, kwargs = REFS[name]
    # Imported here: torch_ref also needs python3-onnx, which the suite
    # models do not.
    ref_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zoo", "testdata")
    if ref_dir not in sys.path:
        sys.path.insert(0, ref_dir)
    import torch_ref
    return torch_ref.reference(key, {**kwargs, "num_classes": classes})
