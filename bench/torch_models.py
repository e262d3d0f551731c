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

build also knows the zoo models of the DP tables (bench/torch_zoo.py, ZOO):
those are not exported (our side builds them with `dpfinetune zoo export`);
build returns them with every BatchNorm replaced by GroupNorm as our default
rewrite does. For every model build knows (suite or zoo):

    /usr/bin/python3 bench/torch_models.py --count a,b    # {"model", "params"} per line
    /usr/bin/python3 bench/torch_models.py --forward NAME --onnx R.onnx [--dpfinetune BIN]

--forward loads the weights of R.onnx (our `dpfinetune zoo export NAME
--batchnorm`, rewritten by `dpfinetune plan --out`) into the PyTorch model,
by parameter name, and compares the logits with `dpfinetune predict` on
R.onnx (needs the onnx and numpy packages). bench/zoo_vs_torch.sh runs both.
"""
import argparse
import json
import os
import sys
import warnings

import torch
import torch.nn as nn
import torchvision

import torch_zoo
from torch_zoo import ZOO

SUITE = {
    # name: (input shape without batch, batch)
    "cnn-fmnist": ((1, 28, 28), 256),
    "resnet18-cifar": ((3, 32, 32), 32),
    "vgg11-cifar": ((3, 32, 32), 16),
    "vit-tiny-cifar": ((3, 32, 32), 32),
}

# Every model build knows: name -> (input shape without batch, batch, classes).
MODELS = {**{k: (v[0], v[1], 10) for k, v in SUITE.items()}, **ZOO}


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
    """Replaces every BatchNorm2d by GroupNorm(g, C), g the largest divisor
    of C not above groups: our rewrite's default (rewrite.DefaultGroups,
    rule "divisor"), with the same eps (1e-5) and affine init (1, 0)."""
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
    elif name in ZOO:
        m = bn_to_gn(torch_zoo.build(name))
    elif name == "vit-tiny-cifar":
        m = torchvision.models.vision_transformer.VisionTransformer(
            image_size=32, patch_size=4, num_layers=4, num_heads=3, hidden_dim=192, mlp_dim=768,
            num_classes=10, dropout=0.0, attention_dropout=0.0)
    else:
        raise SystemExit("unknown model %r (want one of %s)" % (name, ", ".join(MODELS)))
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


def count(name):
    """PyTorch's parameter count of the model as build returns it."""
    return sum(p.numel() for p in build(name).parameters())


def forward_check(name, path, dpfinetune, n=2):
    """Loads the initializers of our GroupNorm-rewritten zoo model (path,
    from `dpfinetune plan --out`) into build(name), runs both forwards on the
    same n random samples (ours through `dpfinetune predict`) and returns
    the largest absolute difference of the logits and the largest logit.
    Equal logits mean the same network: layers, order, GroupNorm groups.
    Parameters initialised to zero (biases, zero-init heads such as
    torchvision's ViT head, which would make every logit 0) are first
    replaced by seeded N(0, 0.02) values on both sides."""
    import subprocess
    import tempfile

    import numpy as np
    import onnx
    from onnx import numpy_helper
    m = build(name).eval()
    params = dict(m.named_parameters())
    proto = onnx.load(path)
    rng = np.random.default_rng(3)
    with torch.no_grad():
        for t in proto.graph.initializer:
            pn = t.name[:-2] if t.name.endswith(".T") else t.name
            if pn not in params:
                continue
            a = numpy_helper.to_array(t)
            if not a.any():
                a = (0.02 * rng.standard_normal(a.shape)).astype(a.dtype)
                t.CopyFrom(numpy_helper.from_array(a, t.name))
            a = torch.from_numpy(a.copy())
            if t.name.endswith(".T"):
                a = a.t()
            p = params.pop(pn)
            p.copy_(a.reshape(p.shape))
    if params:
        raise SystemExit("forward check %s: parameters not in %s: %s" % (name, path, ", ".join(sorted(params))))
    shape = MODELS[name][0]
    x = torch.randn(n, *shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = m(x).numpy()
    with tempfile.TemporaryDirectory() as d:
        mp, xp, yp = os.path.join(d, "m.onnx"), os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
        onnx.save(proto, mp)
        np.save(xp, x.numpy())
        subprocess.run([dpfinetune, "predict", "--model", mp, "--input", xp, "--out", yp, "--batch", str(n)],
                       check=True, stdout=subprocess.DEVNULL)
        got = np.load(yp)
    return float(np.abs(got - want).max()), float(np.abs(want).max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="export the suite models here")
    ap.add_argument("--models", default=",".join(SUITE))
    ap.add_argument("--count", help="print the parameter count of these models (comma-separated) as JSON lines")
    ap.add_argument("--onnx", help="with --forward: our zoo export rewritten by `dpfinetune plan --out`")
    ap.add_argument("--forward", help="compare this model's logits with ours on --onnx (needs --dpfinetune)")
    ap.add_argument("--dpfinetune", default="bin/dpfinetune")
    a = ap.parse_args()
    if a.count:
        for name in a.count.split(","):
            print(json.dumps({"model": name, "params": count(name)}))
        return
    if a.forward:
        if not a.onnx:
            ap.error("--forward needs --onnx")
        diff, scale = forward_check(a.forward, a.onnx, a.dpfinetune)
        ok = scale > 0 and diff <= 1e-3 * max(scale, 1)
        print(json.dumps({"model": a.forward, "logits_max_abs_diff": diff, "logits_max_abs": scale, "ok": ok}))
        sys.exit(0 if ok else 1)
    if not a.out:
        ap.error("--out, --count or --forward is required")
    os.makedirs(a.out, exist_ok=True)
    for name in a.models.split(","):
        if name not in SUITE:
            raise SystemExit("%s is not a suite model: its ONNX comes from `dpfinetune zoo export`" % name)
        path = os.path.join(a.out, name + ".onnx")
        if os.path.exists(path):
            continue
        export(name, path)
        print("exported", path)


if __name__ == "__main__":
    main()
