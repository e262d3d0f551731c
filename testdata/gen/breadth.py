#!/usr/bin/python3
"""torchvision breadth exports for cmd/dpfinetune's breadth test.

Builds reduced versions of torchvision's classification architectures
(seeded random init; the reductions are in MODELS below), exports each at the
requested opsets in the requested forms, and writes PyTorch's reference
values:

    DIR/<model>_<form>_op<opset>.onnx
    DIR/<model>_<form>_op<opset>_sd.pt  the module's state dict as that
                       export holds it (torch.save), for `weights`
    DIR/<model>.npz    input (4, 3, S, S) float32 — (4, 3, T, H, W) clips for
                         the video models —, labels (4,) int64,
                       logits_eval: model.eval()(input),
                       logits_train: training mode with Dropout off (what a
                         TrainingMode.TRAINING export computes: BatchNorm
                         with batch statistics),
                       logits_eval64, logits_train64: the same in float64
                         (BatchNorm over a batch of 4 at 1×1 spatial size is
                         ill-conditioned: PyTorch's own float32 result is off
                         by ~7e-4 relative on inception_v3),
                       norms: per-sample gradient norms of the per-sample
                         cross-entropy, all parameters, by brute force
                         (one backward per sample, eval mode), only for
                         models without BatchNorm
    DIR/manifest.json  per model: input size (an image's side; a clip's
                       height), shape (a sample's: [3, S, S] or
                       [3, T, H, W]), has_bn, export errors

Forms: "eval" (model.eval(), constant folding on: BatchNorm folded into Conv)
and "train" (TrainingMode.TRAINING, do_constant_folding=False: BatchNorm kept).
Stochastic depth is off (its training-mode export has no ONNX form).

    /usr/bin/python3 testdata/gen/breadth.py --out DIR [--models a,b] [--opsets 14,17] [--forms eval,train]
"""

import argparse
import copy
import functools
import importlib
import inspect
import json
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_dropout import tiny_efficientnet, tiny_googlenet  # noqa: E402
from make_fixtures import save_npz  # noqa: E402


def tv(name):
    return importlib.import_module("torchvision.models." + name)


def resnet_like(**kw):
    r = tv("resnet")
    block = r.Bottleneck if kw.pop("bottleneck", False) else r.BasicBlock
    return r.ResNet(block, [1, 1, 1, 1], num_classes=10, **kw)


def regnet():
    r = tv("regnet")
    bp = r.BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
    return r.RegNet(bp, num_classes=10, stem_width=8)


def convnext():
    c = tv("convnext")
    cfg = [c.CNBlockConfig(8, 16, 1), c.CNBlockConfig(16, 32, 1), c.CNBlockConfig(32, None, 1)]
    return c.ConvNeXt(cfg, num_classes=10)


def alexnet():
    m = torchvision.models.alexnet(num_classes=10)
    m.classifier[1] = nn.Linear(256 * 6 * 6, 64)
    m.classifier[4] = nn.Linear(64, 64)
    m.classifier[6] = nn.Linear(64, 10)
    return m


def vgg():
    v = tv("vgg")
    m = v.VGG(v.make_layers([8, "M", 16, "M", 32, "M"], batch_norm=False), num_classes=10, init_weights=True)
    m.avgpool = nn.AdaptiveAvgPool2d((2, 2))
    m.classifier = nn.Sequential(nn.Linear(32 * 4, 32), nn.ReLU(True), nn.Dropout(), nn.Linear(32, 10))
    return m


def vgg_bn():
    v = tv("vgg")
    m = v.VGG(v.make_layers([8, "M", 16, "M", 32, "M"], batch_norm=True), num_classes=10, init_weights=True)
    m.avgpool = nn.AdaptiveAvgPool2d((2, 2))
    m.classifier = nn.Sequential(nn.Linear(32 * 4, 32), nn.ReLU(True), nn.Dropout(), nn.Linear(32, 10))
    return m


def swin_v2():
    s = tv("swin_transformer")
    # torch 1.13 cannot export the in-place zero_() by which Swin V2 keeps
    # its key bias at 0 (aten::zero); the same as a slice assignment (which
    # the exporter writes as a ScatterND over an index grid) it can.
    src = inspect.getsource(s.shifted_window_attention)
    fixed = src.replace("qkv_bias[length : 2 * length].zero_()", "qkv_bias[length : 2 * length] = 0.0")
    if fixed != src:
        ns = {}
        exec(compile(fixed, s.__file__, "exec"), s.__dict__, ns)
        s.shifted_window_attention = ns["shifted_window_attention"]
    return s.SwinTransformer([4, 4], 16, [2, 2], [1, 2], [4, 4], stochastic_depth_prob=0.0, num_classes=10,
                             block=s.SwinTransformerBlockV2, downsample_layer=s.PatchMergingV2)


def efficientnet_v2():
    e = tv("efficientnet")
    setting = [e.FusedMBConvConfig(1, 3, 1, 8, 8, 1), e.FusedMBConvConfig(4, 3, 2, 8, 16, 1),
               e.MBConvConfig(4, 3, 2, 16, 24, 1), e.MBConvConfig(6, 3, 1, 24, 32, 1)]
    return e.EfficientNet(setting, 0.2, stochastic_depth_prob=0.0, num_classes=10, last_channel=64,
                          norm_layer=functools.partial(nn.BatchNorm2d, eps=1e-03))


def video_resnet(convs, stem):
    """torchvision's VideoResNet (r3d_18, mc3_18, r2plus1d_18: widths 64 to
    512, which its constructor fixes) with one BasicBlock a stage instead of
    two; convs are each stage's convolution, stem the stem's name."""
    r = tv("video.resnet")
    return r.VideoResNet(r.BasicBlock, [getattr(r, c) for c in convs], [1, 1, 1, 1], getattr(r, stem), num_classes=10)


def s3d():
    """torchvision's S3D at full width (its constructor has no width or
    depth to reduce), its final (2, 7, 7) average pool, which needs clips of
    at least 16×224×224, replaced by a (1, 2, 2) one with stride 1, so that
    8×64×64 clips (1×2×2 features) export."""
    m = tv("video.s3d").S3D(num_classes=10)
    m.avgpool = nn.AvgPool3d(kernel_size=(1, 2, 2), stride=1)
    return m


# name -> (constructor, input size, what was reduced). The input size is an
# image's side S (samples (3, S, S)) or a clip's whole shape (3, T, H, W).
MODELS = {
    "resnet18": (lambda: resnet_like(), 64, "BasicBlock [1,1,1,1] (resnet18 has [2,2,2,2]), widths as torchvision"),
    "wide_resnet": (lambda: resnet_like(bottleneck=True, width_per_group=128), 64, "Bottleneck [1,1,1,1], width_per_group 128 (wide_resnet50_2's)"),
    "resnext": (lambda: resnet_like(bottleneck=True, groups=32, width_per_group=4), 64, "Bottleneck [1,1,1,1], 32 groups × 4 (resnext50_32x4d's)"),
    "densenet": (lambda: tv("densenet").DenseNet(8, (2, 2, 2, 2), 16, num_classes=10), 64, "growth 8, blocks (2,2,2,2), 16 initial features"),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.25), 64, "width 0.25"),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10, width_mult=0.25), 64, "width 0.25"),
    "mobilenet_v3_large": (lambda: torchvision.models.mobilenet_v3_large(num_classes=10, width_mult=0.25), 64, "width 0.25"),
    "efficientnet": (tiny_efficientnet, 64, "b0 blocks 1–4 at width 0.25, depth 0.25"),
    "regnet": (regnet, 64, "RegNetY-style: depth 4, w0 8, wa 8, wm 2, group width 8, SE 0.25, stem 8"),
    "shufflenet_v2": (lambda: tv("shufflenetv2").ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 128], num_classes=10), 64, "repeats [1,1,1], channels [8,16,32,64,128]"),
    "mnasnet": (lambda: tv("mnasnet").MNASNet(0.1, num_classes=10), 64, "alpha 0.1"),
    "googlenet": (tiny_googlenet, 64, "every channel count ÷ 8, no aux heads"),
    "inception_v3": (lambda: torchvision.models.inception_v3(num_classes=10, aux_logits=False, init_weights=True), 75, "full width (27 M parameters), 75×75, no aux head"),
    "squeezenet": (lambda: torchvision.models.squeezenet1_1(num_classes=10), 64, "squeezenet1_1, full width"),
    "alexnet": (alexnet, 224, "classifier 9216→64→64→10 (features full width); 224×224: smaller inputs leave fewer than 6×6 pixels, whose adaptive pool torch 1.13 cannot export"),
    "vgg": (vgg, 32, "VGG features [8,M,16,M,32,M], 2×2 pool, classifier 128→32→10"),
    "vgg_bn": (vgg_bn, 32, "as vgg, with BatchNorm"),
    "convnext": (convnext, 32, "3 stages 8/16/32, one block each"),
    "swin_t": (lambda: tv("swin_transformer").SwinTransformer([4, 4], 16, [2, 2], [1, 2], [4, 4], stochastic_depth_prob=0.0, num_classes=10), 32, "embed 16, depths [2,2], heads [1,2], window 4 (shifted windows in the 2nd block)"),
    "vit": (lambda: tv("vision_transformer").VisionTransformer(32, 8, 2, 2, 32, 64, num_classes=10), 32, "image 32, patch 8, 2 layers, 2 heads, dim 32, mlp 64"),
    "swin_v2": (swin_v2, 32, "Swin V2 (cosine attention, log-spaced continuous position bias, res-post-norm; its key bias zeroed by a slice assignment, which torch 1.13 exports, instead of zero_(), which it cannot): embed 16, depths [2,2], heads [1,2], window 4"),
    "efficientnet_v2": (efficientnet_v2, 64, "FusedMBConv 1×8→8, 4×8→16, MBConv 4×16→24, 6×24→32, one layer each, last channel 64"),
    "maxvit": (lambda: tv("maxvit").MaxVit((64, 64), 8, 2, [8, 16], [1, 1], 4, 0.0, num_classes=10), 64, "stem 8, blocks [8,16] × 1, partition 2, head dim 4"),
    "r3d_18": (lambda: video_resnet(["Conv3DSimple"] * 4, "BasicStem"), (3, 4, 32, 32), "BasicBlock [1,1,1,1] (r3d_18 has [2,2,2,2]), 3×3×3 convolutions, widths as torchvision (fixed by VideoResNet); clips 3×4×32×32"),
    "mc3_18": (lambda: video_resnet(["Conv3DSimple"] + ["Conv3DNoTemporal"] * 3, "BasicStem"), (3, 4, 32, 32), "BasicBlock [1,1,1,1] (mc3_18 has [2,2,2,2]), 3×3×3 convolutions in the first stage, 1×3×3 after, widths as torchvision; clips 3×4×32×32"),
    "r2plus1d_18": (lambda: video_resnet(["Conv2Plus1D"] * 4, "R2Plus1dStem"), (3, 4, 32, 32), "BasicBlock [1,1,1,1] (r2plus1d_18 has [2,2,2,2]), (2+1)D convolutions and stem, widths as torchvision; clips 3×4×32×32"),
    "s3d": (s3d, (3, 8, 64, 64), "full width and depth (S3D's constructor has neither to reduce); final average pool (2,7,7) → (1,2,2), stride 1, so that 3×8×64×64 clips export"),
}


def build(name):
    torch.manual_seed(0)
    m = MODELS[name][0]()
    for mod in m.modules():
        if type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    # Non-trivial BatchNorm statistics and affines, so that folding is tested.
    g = torch.Generator().manual_seed(3)
    for mod in m.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
                if mod.affine:
                    mod.weight.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
                    mod.bias.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            # A training-form export runs the forward in training mode,
            # which would move the statistics toward the dummy input's
            # batch (README, "Export"): the exports keep the module's.
            mod.momentum = 0.0
    return m


def has_bn(m):
    return any(isinstance(x, nn.modules.batchnorm._BatchNorm) for x in m.modules())


def brute_norms(m, x, y):
    """Only for models without BatchNorm (whose statistics the training-mode
    reference forward has updated)."""
    m.eval()
    params = [p for p in m.parameters() if p.requires_grad]
    out = []
    for i in range(x.shape[0]):
        m.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(m(x[i:i + 1]), y[i:i + 1], reduction="sum")
        loss.backward()
        out.append(float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None))))
    m.zero_grad(set_to_none=True)
    return np.array(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--opsets", default="14,17")
    ap.add_argument("--forms", default="eval,train")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    man = {}
    for name in args.models.split(","):
        ctor, size, reduced = MODELS[name]
        shape = (3, size, size) if isinstance(size, int) else tuple(size)
        m = build(name)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn((4,) + shape, generator=gen)
        y = torch.randint(0, 10, (4,), generator=gen)
        ref = {"input": x.numpy(), "labels": y.numpy()}
        with torch.no_grad():
            ref["logits_eval"] = m.eval()(x).numpy()
            ref["logits_eval64"] = copy.deepcopy(m).double()(x.double()).numpy()
            m.train()
            for mod in m.modules():
                if isinstance(mod, nn.Dropout):
                    mod.eval()
            ref["logits_train"] = m(x).numpy()
            ref["logits_train64"] = copy.deepcopy(m).double()(x.double()).numpy()
        bn = has_bn(m)
        if not bn:
            ref["norms"] = brute_norms(m, x, y)
        entry = {"size": shape[-2], "shape": list(shape), "has_bn": bn, "reduced": reduced,
                 "parameters": sum(p.numel() for p in m.parameters()), "errors": {},
                 # Floating-point buffers: initializers of the export that
                 # PyTorch does not train (Swin V2's coordinate tables).
                 "buffers": sorted(n for n, b in m.named_buffers() if b.is_floating_point())}
        for form in args.forms.split(","):
            for opset in [int(o) for o in args.opsets.split(",")]:
                path = os.path.join(args.out, "%s_%s_op%d.onnx" % (name, form, opset))
                mm = build(name)
                mode = torch.onnx.TrainingMode.TRAINING if form == "train" else torch.onnx.TrainingMode.EVAL
                try:
                    with warnings.catch_warnings(), torch.enable_grad():
                        warnings.simplefilter("ignore")
                        torch.onnx.export(mm if form == "train" else mm.eval(), (x,), path, opset_version=opset,
                                          training=mode, do_constant_folding=(form == "eval"),
                                          input_names=["input"], output_names=["logits"],
                                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
                except Exception as e:  # recorded, the test reports it
                    entry["errors"]["%s_op%d" % (form, opset)] = str(e).splitlines()[0][:300]
                    continue
                # The module's state dict as the export holds it (a
                # training-form export's forward has moved the running
                # statistics): what `dpfinetune weights` must give back.
                torch.save(mm.state_dict(), path[:-len(".onnx")] + "_sd.pt")
        save_npz(os.path.join(args.out, name + ".npz"), ref)
        man[name] = entry
        print(name, "ok" if not entry["errors"] else entry["errors"], file=sys.stderr)
    old = {}
    mp = os.path.join(args.out, "manifest.json")
    if os.path.exists(mp):
        old = json.load(open(mp))
    old.update(man)
    with open(mp, "w") as f:
        json.dump(old, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
