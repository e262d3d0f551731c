#!/usr/bin/python3
"""Builds the four models of the benchmark suite (docs/BENCHMARKS.md,
DESIGN.md §7) in PyTorch with seeded random init and exports each to ONNX.

    /usr/bin/python3 bench/torch_models.py --out DIR [--models a,b]

Every model is exported in eval mode at opset 14 with a dynamic batch axis
(input "input", output "logits"). resnet18-cifar replaces every BatchNorm2d
by GroupNorm(16, C) (the paper's 16 groups; 16 divides every resnet18 width),
which torch 1.13 exports as Reshape + InstanceNormalization + Reshape + Mul +
Add. The export runs with autograd enabled so that nn.MultiheadAttention
(vit-tiny-cifar) does not take its non-exportable inference fast path.
The same builder (build) is imported by torch_step.py, so both sides time
the same architecture; the weights are the same too because both seed 0.
"""
import argparse
import os
import warnings

import torch
import torch.nn as nn
import torchvision

SUITE = {
    # name: (input shape without batch, batch)
    "cnn-fmnist": ((1, 28, 28), 256),
    "resnet18-cifar": ((3, 32, 32), 32),
    "vgg11-cifar": ((3, 32, 32), 16),
    "vit-tiny-cifar": ((3, 32, 32), 32),
}


class TramerBonehCNN(nn.Module):
    """Tramèr & Boneh (2021) Fashion-MNIST CNN."""

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


def bn_to_gn(module, groups=16):
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            c = child.num_features
            g = max(d for d in range(1, groups + 1) if c % d == 0)
            setattr(module, name, nn.GroupNorm(g, c))
        else:
            bn_to_gn(child, groups)
    return module


def build(name):
    torch.manual_seed(0)
    if name == "cnn-fmnist":
        m = TramerBonehCNN()
    elif name == "resnet18-cifar":
        m = bn_to_gn(torchvision.models.resnet18(num_classes=10))
    elif name == "vgg11-cifar":
        m = torchvision.models.vgg11(num_classes=10)
    elif name == "vit-tiny-cifar":
        m = torchvision.models.vision_transformer.VisionTransformer(
            image_size=32, patch_size=4, num_layers=4, num_heads=3, hidden_dim=192, mlp_dim=768,
            num_classes=10, dropout=0.0, attention_dropout=0.0)
    else:
        raise SystemExit("unknown model %r (want one of %s)" % (name, ", ".join(SUITE)))
    return m


class Replicate(nn.Module):
    """AdaptiveAvgPool2d((7, 7)) on a 1×1 map (vgg11 at 32×32) replicates the
    pixel; torch 1.13 cannot export that pool (7 is not a factor of 1), so
    the export uses the equal Expand."""

    def forward(self, x):
        assert x.shape[-2:] == (1, 1)
        return x.expand(-1, -1, 7, 7)


def export(name, path):
    m = build(name).eval()
    if name == "vgg11-cifar":
        m.avgpool = Replicate()
    shape, batch = SUITE[name]
    x = torch.randn(2, *shape)
    with warnings.catch_warnings(), torch.enable_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            m, (x,), path, export_params=True, opset_version=14, do_constant_folding=True,
            input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(SUITE))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in a.models.split(","):
        path = os.path.join(a.out, name + ".onnx")
        if os.path.exists(path):
            continue
        export(name, path)
        print("exported", path)


if __name__ == "__main__":
    main()
