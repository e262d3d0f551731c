#!/usr/bin/python3
"""Models exported as users export them, for the loader and the rewrite.

Exports with a fixed batch: torch.onnx.export without dynamic_axes fixes the
example input's batch size
in the model's input and output shapes, and constant folding bakes it into
the targets of Reshapes and into broadcasts. These are such exports of
reduced torchvision models (breadth.py's MODELS, seeded random init), at
opset 17, eval mode:

    OUT/vit_b1.onnx        ViT at batch 1: the patch Reshape [1, 32, 16], the
                           class token expanded to one sample, the attention's
                           (T, B·H, d) Reshapes of nn.MultiheadAttention
    OUT/shufflenet_b2.onnx ShuffleNetV2 at batch 2: the channel shuffle's
                           [2, 2, 8, 8, 8] and [2, -1, 8, 8]
    OUT/swin_t_b1.onnx     Swin at batch 1: window partitions and merges
    OUT/mixer_b1.onnx      a model that subtracts the batch mean: its samples
                           interact, so its batch cannot be released
    OUT/bnfirst_b1.onnx    BatchNorm before each convolution (DenseNet's order,
                           not foldable) with PyTorch's initial statistics,
                           which the exporter stores once behind Identity
                           nodes
    OUT/first_b1.onnx      a model that adds the batch's first sample to each
                           (x + x[:1]): the batch is lost in a Slice, so only
                           the outputs at two batch sizes show the samples
                           interacting

Exports in half precision (what torch.onnx.export writes for model.half()
on a GPU: float16 weights, inputs, outputs and constants; made here from a
float32 export, as PyTorch 1.13 has no float16 convolution on the CPU):

    OUT/half_cnn.onnx      a small CNN in float16, with a scalar Constant
    OUT/half_cnn_ref.onnx  the same model in float32, its weights rounded
                           through float16: what half_cnn computes, widened
    OUT/half_mixed.onnx    a CNN with a BatchNorm (training-mode export) in
                           float16 but for a LayerNorm that Casts keep in
                           float32

An export that takes uint8 pixels and normalizes them itself:

    OUT/pixels_cnn.onnx      x.float() / 255, normalized, a small CNN; uint8 input
    OUT/pixels_cnn_ref.onnx  the same model taking the pixel values as float32

An export with more outputs than the loss reads (dynamic batch):

    OUT/aux_heads.onnx     a trunk with a main and an auxiliary head, as
                           Inception and GoogLeNet export in training mode
                           (logits, aux): the auxiliary head gets no gradient
                           from the loss on the first output

A video classifier (Conv3d, the samples (C, T, H, W)), dynamic batch:

    OUT/clip3d.onnx        a (1,3,3) spatial and a (3,1,1) temporal convolution
                           (R(2+1)D's factorisation), a residual block of 3×3×3
                           convolutions, a (1,2,2) MaxPool3d, pooled over time
                           and space, a linear head; no BatchNorm, so that its
                           parameters are PyTorch's
    OUT/clip3d_train.onnx  the same with BatchNorm3d, exported in training mode
                           (kept in the graph for --bn)
    OUT/clip3d_ref.npz     x: 3 clips (3, 4, 16, 16); y: their labels; logits:
                           clip3d's; norms: each clip's gradient norm of the
                           summed cross-entropy over every parameter of clip3d,
                           one backward pass a clip (float64 sums)

Video transformers (torchvision's MViT reduced: 32×32 clips of 4 frames,
three blocks of 16 and 32 channels), dynamic batch. The TorchScript exporter
writes their tensor_split as Loops over sequences and their squeeze(1) as
Ifs on a dimension's size, which the loader unrolls and inlines; MViT-v2's
relative positions as a ScatterND into the attention:

    OUT/mvit_v1.onnx       MViT-v1 (position embedding of temporal and spatial
                           tables added)
    OUT/mvit_v2.onnx       MViT-v2 (pooled residuals, relative positions)
    OUT/mvit_v1_ref.npz,
    OUT/mvit_v2_ref.npz    x, y, logits and norms as clip3d_ref.npz, every
                           parameter's (MViT-v2's rel_pos_t tables too, a
                           stack of MatMul weights, one a frame)

Slice assignments in place (h[:, :, 1:, 1:] = …, h[:, :2] = …, h[:, :, 2:4]
= …, h[:, :, :, ::2] = …), which the TorchScript exporter writes as ScatterNDs
over index grids computed from the shape, dynamic batch:

    OUT/slice_assign.onnx  a convolution, the four assignments (a parameter
                           in the first), a linear head
    OUT/slice_assign_ref.npz
                           x, y, logits and norms as clip3d_ref.npz

A convolution with weight standardization (timm's StdConv2d: F.batch_norm of
the weight in training mode), dynamic batch:

    OUT/ws_conv.onnx       the standardized convolution, GroupNorm, a linear head
    OUT/ws_conv_ref.npz    x, y, logits and norms as clip3d_ref.npz

Parameters computed before they meet the batch, dynamic batch:

    OUT/transforms.onnx    NFNet's scaled weight standardization (a gain),
                           Swin V2's window attention (position-bias MLP,
                           clipped exponentiated logit scale), a linear head
    OUT/transforms_ref.npz x, y, logits and norms as clip3d_ref.npz
    OUT/pos_interp.onnx    a position embedding interpolated bicubically to
                           the input's grid of patches (Resize of a parameter)
    OUT/pos_interp_ref.npz x, y, logits and norms as clip3d_ref.npz

    /usr/bin/python3 testdata/gen/make_exports.py --out testdata/exports
"""

import argparse
import os
import sys
import warnings

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import breadth  # noqa: E402


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 8 * 8, 10)

    def forward(self, x):
        x = x - x.mean(dim=0, keepdim=True)
        return self.fc(x.flatten(1))


class BNFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 4, 3, padding=1),
                                  nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1),
                                  nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.body(x))


class First(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 8 * 8, 10)

    def forward(self, x):
        return self.fc((x + x[:1]).flatten(1))


class AuxHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.fc = nn.Linear(16, 10)
        self.aux = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 10))

    def forward(self, x):
        h = self.trunk(x)
        return self.fc(h), self.aux(h)


class HalfCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6 * 4 * 4, 10)

    def forward(self, x):
        h = torch.relu(self.conv(x * 0.5))
        return self.fc(nn.functional.adaptive_avg_pool2d(h, 4).flatten(1))


class HalfMixed(nn.Module):
    """Written in float16 but for its LayerNorm, kept in float32 between
    Casts (half_mixed), with a BatchNorm a training-mode export keeps."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.norm = nn.LayerNorm(8 * 4 * 4)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        h = nn.functional.adaptive_avg_pool2d(h, 4).flatten(1)
        return self.fc(self.norm(h))


def half_mixed(out):
    """Exports HalfMixed in training mode and rewrites it in float16 but
    for the LayerNorm, which Casts keep in float32 (as model.half() with
    the norm's .float() and x.float() … .half() around it would export,
    which PyTorch cannot run on the CPU to trace)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    torch.manual_seed(0)
    tmp = os.path.join(out, "half_mixed.f32.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(HalfMixed().train(), (torch.randn(2, 3, 8, 8),), tmp, opset_version=17,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    m = onnx.load(tmp)
    os.remove(tmp)
    g = m.graph
    ln = [n for n in g.node if n.op_type == "LayerNormalization"][0]
    keep = set(ln.input[1:])
    for i, t in enumerate(g.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32 and t.name not in keep:
            g.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.float16), t.name))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    for v in list(g.input) + list(g.output):
        v.type.tensor_type.elem_type = TensorProto.FLOAT16
    x, y = ln.input[0], ln.output[0]
    ln.input[0], ln.output[0] = x + "_f32", y + "_f32"
    at = list(g.node).index(ln)
    g.node.insert(at, helper.make_node("Cast", [x], [x + "_f32"], name="norm_in_f32", to=TensorProto.FLOAT))
    g.node.insert(at + 2, helper.make_node("Cast", [y + "_f32"], [y], name="norm_out_f16", to=TensorProto.FLOAT16))
    del g.value_info[:]
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out, "half_mixed.onnx"))


class PixelsCNN(nn.Module):
    def __init__(self, cast=True):
        super().__init__()
        self.cast = cast
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6 * 4 * 4, 10)

    def forward(self, x):
        if self.cast:
            x = x.float()
        x = (x / 255.0 - 0.5) / 0.25
        h = torch.relu(self.conv(x))
        return self.fc(nn.functional.adaptive_avg_pool2d(h, 4).flatten(1))


class Clip3D(nn.Module):
    def __init__(self, bn):
        super().__init__()
        norm = (lambda c: nn.BatchNorm3d(c)) if bn else (lambda c: nn.Identity())
        self.stem = nn.Sequential(nn.Conv3d(3, 4, (1, 3, 3), (1, 2, 2), (0, 1, 1), bias=not bn), norm(4), nn.ReLU(),
                                  nn.Conv3d(4, 8, (3, 1, 1), 1, (1, 0, 0), bias=not bn), norm(8), nn.ReLU())
        self.block = nn.Sequential(nn.Conv3d(8, 8, 3, 1, 1, bias=not bn), norm(8), nn.ReLU(),
                                   nn.Conv3d(8, 8, 3, 1, 1, bias=not bn), norm(8))
        self.pool = nn.MaxPool3d((1, 2, 2))
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(nn.functional.adaptive_avg_pool3d(self.pool(x), 1).flatten(1))


def clips(out):
    import numpy as np
    torch.manual_seed(1)
    plain, bn = Clip3D(False).eval(), Clip3D(True)
    x = torch.randn(3, 3, 4, 16, 16)
    y = torch.tensor([4, 0, 2])
    dyn = {"input": {0: "batch"}, "logits": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(plain, (x,), os.path.join(out, "clip3d.onnx"), opset_version=17,
                          input_names=["input"], output_names=["logits"], dynamic_axes=dyn)
        torch.onnx.export(bn, (x,), os.path.join(out, "clip3d_train.onnx"), opset_version=14,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["input"], output_names=["logits"], dynamic_axes=dyn)
    with torch.no_grad():
        logits = plain(x).numpy()
    np.savez(os.path.join(out, "clip3d_ref.npz"), x=x.numpy(), y=y.numpy(), logits=logits,
             norms=breadth.brute_norms(plain, x, y))


def small_mvit(v2):
    from torchvision.models.video.mvit import MViT, MSBlockConfig
    blocks = [MSBlockConfig(num_heads=1, input_channels=16, output_channels=16, kernel_q=[3, 3, 3] if v2 else [],
                            kernel_kv=[3, 3, 3], stride_q=[1, 1, 1] if v2 else [], stride_kv=[1, 2, 2]),
              MSBlockConfig(num_heads=2, input_channels=16, output_channels=32, kernel_q=[3, 3, 3], kernel_kv=[3, 3, 3],
                            stride_q=[1, 2, 2], stride_kv=[1, 1, 1]),
              MSBlockConfig(num_heads=2, input_channels=32, output_channels=32, kernel_q=[3, 3, 3], kernel_kv=[3, 3, 3],
                            stride_q=[1, 1, 1], stride_kv=[1, 1, 1])]
    return MViT(spatial_size=(32, 32), temporal_size=4, block_setting=blocks, residual_pool=v2, residual_with_cls_embed=False,
                rel_pos_embed=v2, proj_after_attn=v2, dropout=0.0, num_classes=5)


def mvits(out):
    for name, v2 in (("mvit_v1", False), ("mvit_v2", True)):
        torch.manual_seed(0)
        export_with_ref(out, name, small_mvit(v2).eval(), (3, 4, 32, 32))


class SliceAssign(nn.Module):
    """Slice assignments in place: three runs of consecutive positions
    (read back as slices) and one of step 2 (kept a ScatterND)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.scale = nn.Parameter(torch.randn(4, 1, 1) * 0.5 + 1)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        h = self.conv(x)
        h[:, :, 1:, 1:] = h[:, :, 1:, 1:].clone() * self.scale + 0.5  # a copy: autograd keeps it
        h[:, :2] = torch.relu(h[:, :2])
        h[:, :, 2:4, :] = h[:, :, 2:4, :] * 2
        h[:, :, :, ::2] = -h[:, :, :, ::2]
        return self.fc(h.flatten(1))


def export_with_ref(out, name, m, sample, frozen=()):
    """Exports m (seeded just before it was built) at opset 17 with a
    dynamic batch as OUT/name.onnx and writes OUT/name_ref.npz: x (3
    samples of shape sample), y, logits, and PyTorch's per-sample norms of
    every parameter but those named in frozen."""
    import numpy as np
    x = torch.randn(3, *sample)
    y = torch.tensor([1, 4, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x,), os.path.join(out, name + ".onnx"), opset_version=17, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    with torch.no_grad():
        logits = m(x).numpy()
    for pname, p in m.named_parameters():
        p.requires_grad_(pname not in frozen)
    np.savez(os.path.join(out, name + "_ref.npz"), x=x.numpy(), y=y.numpy(), logits=logits,
             norms=breadth.brute_norms(m, x, y))


def slice_assigns(out):
    torch.manual_seed(0)
    export_with_ref(out, "slice_assign", SliceAssign().eval(), (3, 6, 6))


class StdConv2d(nn.Conv2d):
    """timm's StdConv2d: the weight standardized per output channel by
    F.batch_norm in training mode, before the convolution."""

    def forward(self, x):
        w = nn.functional.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True,
                                     momentum=0.0, eps=1e-6).reshape_as(self.weight)
        return nn.functional.conv2d(x, w, self.bias, self.stride, self.padding)


class WSConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = StdConv2d(3, 8, 3, padding=1)
        self.gn = nn.GroupNorm(4, 8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(nn.functional.adaptive_avg_pool2d(torch.relu(self.gn(self.conv(x))), 1).flatten(1))


def ws_conv(out):
    torch.manual_seed(0)
    export_with_ref(out, "ws_conv", WSConv().eval(), (3, 8, 8))


class ScaledStdConv2d(nn.Conv2d):
    """NFNet's scaled weight standardization (timm's ScaledStdConv2d): the
    weight standardized per output channel by F.batch_norm, whose scale is
    a learned gain, times 1/√fan-in. timm passes gain·scale as the scale,
    which the exporter folds into one tensor (trained as such, its
    gradient scale times gain's); multiplying after keeps the gain a
    parameter of its own, so that PyTorch's per-sample norms are those of
    the export's parameters."""

    def __init__(self, cin, cout, k, padding):
        super().__init__(cin, cout, k, padding=padding)
        self.gain = nn.Parameter(1 + 0.2 * torch.randn(cout, 1, 1, 1))
        self.scale = (cin * k * k) ** -0.5

    def forward(self, x):
        w = nn.functional.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None,
                                     weight=self.gain.view(-1), training=True, momentum=0.0,
                                     eps=1e-6).reshape_as(self.weight) * self.scale
        return nn.functional.conv2d(x, w, self.bias, self.stride, self.padding)


class CPBAttention(nn.Module):
    """Swin V2's window attention over a 3×3 window of tokens: cosine
    attention under a clipped, exponentiated logit scale, and a
    relative-position bias an MLP makes from the log-spaced relative
    coordinates, gathered and squashed by 16·sigmoid."""

    def __init__(self, dim=8, heads=2, window=3):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)) + 0.1 * torch.randn(heads, 1, 1))
        self.cpb = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, heads, bias=False))
        r = torch.arange(-(window - 1), window, dtype=torch.float32) / (window - 1) * 8
        table = torch.stack(torch.meshgrid(r, r, indexing="ij"), -1).reshape(-1, 2)
        self.table = torch.sign(table) * torch.log2(table.abs() + 1) / 3
        pos = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (pos[:, :, None] - pos[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.index = (rel[..., 0] * (2 * window - 1) + rel[..., 1]).reshape(-1)

    def forward(self, x):  # (B, N, C)
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = nn.functional.normalize(q, dim=-1) @ nn.functional.normalize(k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(self.logit_scale, max=4.6052).exp()
        bias = self.cpb(self.table)[self.index].reshape(n, n, -1).permute(2, 0, 1)
        attn = (attn + 16 * torch.sigmoid(bias)).softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class Transforms(nn.Module):
    """Parameters computed before they meet the batch: NFNet's scaled
    weight standardization, Swin V2's position-bias MLP and logit scale.
    (Weight normalization, w = g·v/‖v‖, the exporter folds into one
    weight: a plain linear head.)"""

    def __init__(self):
        super().__init__()
        self.conv = ScaledStdConv2d(3, 8, 3, padding=1)
        self.attn = CPBAttention()
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        h = torch.relu(self.conv(x))  # (B, 8, 3, 3)
        t = h.flatten(2).transpose(1, 2)  # (B, 9, 8)
        return self.head(self.attn(t).mean(1))


def transforms(out):
    torch.manual_seed(0)
    export_with_ref(out, "transforms", Transforms().eval(), (3, 3, 3))


class PosInterp(nn.Module):
    """A position embedding learned on a 2×2 grid of patches, interpolated
    bicubically to the input's 4×4 (a ViT fine-tuned at a higher
    resolution, timm's dynamic_img_size)."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 2, stride=2)
        self.pos = nn.Parameter(0.5 * torch.randn(1, 8, 2, 2))
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        h = self.patch(x)
        pos = nn.functional.interpolate(self.pos, size=h.shape[-2:], mode="bicubic", align_corners=False)
        return self.head(torch.tanh(h + pos).mean((2, 3)))


def pos_interp(out):
    torch.manual_seed(0)
    export_with_ref(out, "pos_interp", PosInterp().eval(), (3, 8, 8))


def to_half(path, out_half, out_ref):
    """Rewrites a float32 export as float16 (out_half) and as float32 with
    its weights rounded through float16 (out_ref)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper

    for out, half in ((out_half, True), (out_ref, False)):
        m = onnx.load(path)
        g = m.graph
        for i, t in enumerate(g.initializer):
            a = numpy_helper.to_array(t)
            if a.dtype == np.float32:
                r = a.astype(np.float16)
                g.initializer[i].CopyFrom(numpy_helper.from_array(r if half else r.astype(np.float32), t.name))
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                    v = numpy_helper.to_array(a.t).astype(np.float16)
                    a.t.CopyFrom(numpy_helper.from_array(v if half else v.astype(np.float32), a.t.name))
        if half:
            for v in list(g.input) + list(g.output):
                v.type.tensor_type.elem_type = TensorProto.FLOAT16
        onnx.save(m, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    jobs = [("vit_b1", breadth.build("vit"), 1, 32), ("shufflenet_b2", breadth.build("shufflenet_v2"), 2, 64),
            ("swin_t_b1", breadth.build("swin_t"), 1, 32), ("mixer_b1", Mixer(), 1, 8), ("first_b1", First(), 1, 8),
            ("bnfirst_b1", BNFirst(), 1, 8)]
    for name, m, batch, size in jobs:
        x = torch.randn(batch, 3, size, size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m.eval(), (x,), os.path.join(args.out, name + ".onnx"), opset_version=17,
                              input_names=["input"], output_names=["logits"])
        print("wrote", name)
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(AuxHeads().eval(), (x,), os.path.join(args.out, "aux_heads.onnx"), opset_version=17,
                          input_names=["input"], output_names=["logits", "aux"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}, "aux": {0: "batch"}})
    print("wrote aux_heads")
    tmp = os.path.join(args.out, "half_cnn.f32.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(HalfCNN().eval(), (torch.randn(2, 3, 8, 8),), tmp, opset_version=17,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    to_half(tmp, os.path.join(args.out, "half_cnn.onnx"), os.path.join(args.out, "half_cnn_ref.onnx"))
    os.remove(tmp)
    print("wrote half_cnn")
    half_mixed(args.out)
    print("wrote half_mixed")
    torch.manual_seed(0)
    pix = PixelsCNN()
    ref = PixelsCNN(cast=False)
    ref.load_state_dict(pix.state_dict())
    for m, name, x in ((pix, "pixels_cnn", torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)),
                       (ref, "pixels_cnn_ref", torch.rand(2, 3, 8, 8) * 255)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m.eval(), (x,), os.path.join(args.out, name + ".onnx"), opset_version=17,
                              input_names=["input"], output_names=["logits"],
                              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    print("wrote pixels_cnn")
    clips(args.out)
    print("wrote clip3d")
    mvits(args.out)
    print("wrote mvit_v1, mvit_v2")
    slice_assigns(args.out)
    print("wrote slice_assign")
    ws_conv(args.out)
    print("wrote ws_conv")
    transforms(args.out)
    print("wrote transforms")
    pos_interp(args.out)
    print("wrote pos_interp")


if __name__ == "__main__":
    main()
