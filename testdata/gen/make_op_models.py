#!/usr/bin/env python3
"""Small single-operator ONNX models with PyTorch / numpy reference outputs.

Writes testdata/ops/<case>.onnx and testdata/ops/<case>.npz (one array per
graph input, by name, and "y", the expected first output). Two kinds of case:

- torch cases: a small torch.nn.Module exported with torch.onnx.export, the
  form users' exports take; "y" is the module's output in PyTorch.
- node cases: one ONNX node built with onnx.helper, for attribute forms and
  opsets PyTorch does not write; "y" is computed with numpy or PyTorch
  functions, independently of the ONNX graph.

runtime/opmodels_test.go runs every model and compares with "y".

Usage (from the repository root, ~5 s):
    /usr/bin/python3 testdata/gen/make_op_models.py --out testdata/ops
"""

import argparse
import io
import os
import sys
import warnings
import zipfile

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

warnings.filterwarnings("ignore")
torch.set_num_threads(1)

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def rng(seed):
    return np.random.default_rng(seed)


def randn(seed, *shape):
    return rng(seed).standard_normal(shape).astype(np.float32)


def torch_case(module, inputs, opset=14):
    """Exports module on inputs (numpy arrays); returns model, feeds, y."""
    module.eval()
    names = [f"x{i}" for i in range(len(inputs))]
    ts = tuple(torch.from_numpy(a) for a in inputs)
    buf = io.BytesIO()
    torch.onnx.export(module, ts, buf, opset_version=opset, input_names=names, output_names=["y"],
                      do_constant_folding=False)
    with torch.no_grad():
        y = module(*ts)
    m = onnx.load_from_string(buf.getvalue())
    return m, dict(zip(names, inputs)), y.numpy()


def node_case(op, inputs, y, opset=14, consts=None, n_out=1, **attrs):
    """One node reading graph inputs (float32 arrays, by name) then consts
    (initializers, any numpy dtype, by name) in the order given by the
    "order" attribute if present."""
    consts = consts or {}
    order = attrs.pop("order", list(inputs) + list(consts))
    outs = ["y"] + [f"y{i}" for i in range(1, n_out)]
    node = helper.make_node(op, order, outs, **attrs)
    g = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, np.shape(y))],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return m, dict(inputs), np.asarray(y, dtype=np.float32)


# --- ScatterND ---

class IndexPut(torch.nn.Module):
    def forward(self, x, u):
        y = x * 1.0
        y[:, 1:3] = u * 2.0
        return y


@case
def scatternd_torch():
    return torch_case(IndexPut(), [randn(1, 2, 4, 3), randn(2, 2, 2, 3)])


def scatternd_ref(data, idx, upd, reduction="none"):
    out = data.copy()
    k = idx.shape[-1]
    for t in np.ndindex(idx.shape[:-1]):
        sl = tuple(idx[t])
        if reduction == "none":
            out[sl] = upd[t]
        elif reduction == "add":
            out[sl] += upd[t]
        elif reduction == "mul":
            out[sl] *= upd[t]
        elif reduction == "max":
            out[sl] = np.maximum(out[sl], upd[t])
        elif reduction == "min":
            out[sl] = np.minimum(out[sl], upd[t])
    return out


@case
def scatternd_add_opset16():
    d, u = randn(2, 4, 4, 3), randn(3, 3, 4, 3)
    idx = np.array([[1], [3], [1]], dtype=np.int64)  # duplicates add up
    return node_case("ScatterND", {"data": d, "updates": u}, scatternd_ref(d, idx, u, "add"), opset=16,
                     consts={"indices": idx}, order=["data", "indices", "updates"], reduction="add")


@case
def scatternd_max_opset18():
    d, u = randn(4, 3, 4, 2), randn(5, 3, 2)
    idx = np.array([[0, 1], [2, -1], [1, 0]], dtype=np.int64)
    return node_case("ScatterND", {"data": d, "updates": u}, scatternd_ref(d, idx % [3, 4], u, "max"),
                     opset=18, consts={"indices": idx}, order=["data", "indices", "updates"], reduction="max")


# --- Einsum ---

class Einsum(torch.nn.Module):
    def __init__(self, eq, weight=None):
        super().__init__()
        self.eq = eq
        self.w = None if weight is None else torch.nn.Parameter(torch.from_numpy(weight))

    def forward(self, *xs):
        if self.w is not None:
            xs = xs + (self.w,)
        return torch.einsum(self.eq, *xs)


@case
def einsum_maxvit_qk():
    return torch_case(Einsum("bghid,bghjd->bghij"), [randn(3, 2, 2, 3, 5, 4), randn(4, 2, 2, 3, 6, 4)])


@case
def einsum_maxvit_av():
    return torch_case(Einsum("bghij,bghjd->bghid"), [randn(5, 2, 2, 3, 5, 6), randn(6, 2, 2, 3, 6, 4)])


@case
def einsum_weight():
    return torch_case(Einsum("btd,ed->bte", randn(8, 5, 4)), [randn(7, 2, 3, 4)])


@case
def einsum_ellipsis_transposed_out():
    return torch_case(Einsum("...ij,jk->k...i"), [randn(9, 2, 3, 4, 5), randn(10, 5, 3)])


def einsum_node(eq, *arrays, opset=12):
    names = [f"x{i}" for i in range(len(arrays))]
    return node_case("Einsum", dict(zip(names, arrays)), np.einsum(eq, *[a.astype(np.float64) for a in arrays]),
                     opset=opset, equation=eq)


@case
def einsum_implicit():
    return einsum_node("ij,jk", randn(11, 3, 4), randn(12, 4, 2))


@case
def einsum_diag_sum():
    # diagonal of the first operand, a label of the second summed away
    return einsum_node("bii,bjk->bij", randn(13, 2, 3, 3), randn(14, 2, 4, 5))


@case
def einsum_unary_trace_transpose():
    return einsum_node("aijj->ja", randn(15, 2, 3, 4, 4))


@case
def einsum_broadcast_ellipsis():
    return einsum_node("...ij,...jk->...ik", randn(16, 2, 1, 3, 4), randn(17, 3, 4, 2))


@case
def einsum_transposed_operands():
    # both operands read in place by a transposing GEMM
    return einsum_node("bdi,bjd->bij", randn(35, 2, 5, 3), randn(36, 2, 4, 5))


@case
def einsum_chain_three():
    return einsum_node("ij,jk,kl->il", randn(37, 3, 4), randn(38, 4, 5), randn(39, 5, 2))


@case
def einsum_four_operands_broadcast_diag():
    return einsum_node("...ii,...ij,j,kj->k...i", randn(87, 2, 1, 3, 3), randn(88, 4, 3, 2), randn(89, 2), randn(92, 5, 2))


@case
def einsum_outer():
    return einsum_node("i,j->ji", randn(18, 3), randn(19, 4))


# --- elementwise ---

class Fn(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


class PReLUNet(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.act = torch.nn.PReLU(c)
        with torch.no_grad():
            self.act.weight.copy_(torch.linspace(-0.5, 1.5, c))

    def forward(self, x):
        return self.act(x)


@case
def prelu_torch_per_channel():
    return torch_case(PReLUNet(3), [randn(20, 2, 3, 4, 5)])


@case
def prelu_torch_shared():
    return torch_case(PReLUNet(1), [randn(21, 2, 3, 4)])


@case
def prelu_opset6_per_channel():
    x, s = randn(22, 2, 3, 4), np.array([0.1, -0.2, 0.3], dtype=np.float32)
    y = np.where(x > 0, x, x * s.reshape(3, 1))
    return node_case("PRelu", {"x": x}, y, opset=6, consts={"slope": s})


@case
def prelu_opset9_broadcast():
    x, s = randn(23, 2, 3, 4), randn(24, 4)
    return node_case("PRelu", {"x": x}, np.where(x > 0, x, x * s), opset=9, consts={"slope": s})


@case
def selu_torch():
    return torch_case(torch.nn.SELU(), [randn(25, 3, 4) * 2])


@case
def selu_attrs():
    x = randn(26, 3, 4) * 2
    y = 1.5 * np.where(x > 0, x, 0.7 * (np.exp(x) - 1))
    return node_case("Selu", {"x": x}, y, alpha=0.7, gamma=1.5)


@case
def celu_torch():
    return torch_case(torch.nn.CELU(0.8), [randn(27, 3, 4) * 2], opset=14)


@case
def sign_torch():
    x = randn(28, 3, 4)
    x[0, 0] = 0
    return torch_case(Fn(torch.sign), [x])


def shrink_ref(x, lambd, bias):
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


@case
def shrink_hard():
    # PyTorch's Hardshrink and Softshrink export as Where chains, not Shrink
    x = randn(29, 3, 4)
    return node_case("Shrink", {"x": x}, shrink_ref(x, 0.6, 0), opset=9, lambd=0.6)


@case
def shrink_soft():
    x = randn(30, 3, 4)
    return node_case("Shrink", {"x": x}, shrink_ref(x, 0.4, 0.4), opset=9, lambd=0.4, bias=0.4)


@case
def softsign_node():
    x = randn(31, 3, 4) * 3
    return node_case("Softsign", {"x": x}, x / (1 + np.abs(x)))


@case
def thresholdedrelu_node():
    x = randn(32, 3, 4)
    return node_case("ThresholdedRelu", {"x": x}, np.where(x > 0.3, x, 0), opset=10, alpha=0.3)


def variadic_node(op, f, *shapes, opset=13):
    xs = [randn(40 + i, *sh) for i, sh in enumerate(shapes)]
    y = xs[0].astype(np.float64)
    for x in xs[1:]:
        y = f(y, x)
    if op == "Mean":
        y = y / len(xs)
    return node_case(op, {f"x{i}": x for i, x in enumerate(xs)}, y, opset=opset)


@case
def sum_three_broadcast():
    return variadic_node("Sum", np.add, (2, 3, 4), (4,), (3, 1))


@case
def sum_one():
    return variadic_node("Sum", np.add, (2, 3))


@case
def mean_two_broadcast():
    return variadic_node("Mean", np.add, (1, 3), (2, 1))


@case
def max_three_broadcast():
    return variadic_node("Max", np.maximum, (2, 3, 4), (3, 4), (2, 1, 4))


@case
def min_two():
    return variadic_node("Min", np.minimum, (3, 4), (3, 4))


@case
def max_torch():
    return torch_case(Fn(torch.maximum), [randn(33, 3, 4), randn(34, 4)])


# --- ConvTranspose ---

def convt(cls, cin, cout, k, **kw):
    torch.manual_seed(3)
    m = cls(cin, cout, k, **kw)
    with torch.no_grad():
        if m.bias is not None:
            m.bias.normal_()
    return m


@case
def convtranspose2d_torch():
    return torch_case(convt(torch.nn.ConvTranspose2d, 4, 6, (3, 2), stride=(2, 1), padding=(1, 0),
                            output_padding=(1, 0), groups=2, dilation=(1, 2)), [randn(50, 2, 4, 5, 4)])


@case
def convtranspose1d_torch():
    return torch_case(convt(torch.nn.ConvTranspose1d, 3, 2, 4, stride=3, padding=2, bias=False), [randn(51, 2, 3, 7)])


@case
def convtranspose2d_depthwise_torch():
    return torch_case(convt(torch.nn.ConvTranspose2d, 3, 3, 3, stride=2, padding=1, output_padding=1, groups=3),
                      [randn(52, 2, 3, 4, 4)])


def convt_full(x, w, b, strides, dil, out_pad, group):
    """conv_transpose with zero padding (PyTorch), for cropping."""
    f = torch.nn.functional.conv_transpose2d if x.ndim == 4 else torch.nn.functional.conv_transpose1d
    return f(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
             None if b is None else torch.from_numpy(b).double(), stride=strides,
             output_padding=out_pad, groups=group, dilation=dil).numpy()


@case
def convtranspose_output_shape():
    x, w, b = randn(53, 1, 2, 3, 3), randn(54, 2, 3, 3, 3), randn(55, 3)
    full = convt_full(x, w, b, (2, 2), (1, 1), (1, 1), 1)  # 8×8
    # output_shape 6×7: total pads 2 and 1, the odd unit at the start
    # (the spec's rule for auto_pad other than SAME_UPPER)
    y = full[:, :, 1:7, 1:8]
    return node_case("ConvTranspose", {"x": x}, y, opset=11, consts={"w": w, "b": b},
                     strides=[2, 2], output_padding=[1, 1], output_shape=[6, 7])


@case
def convtranspose_output_shape_beyond():
    # the spec's example: output_shape 10×8 exceeds what the input gives
    # (9×7); the extra units come at the end, as with output_padding 1
    x, w = randn(62, 1, 1, 3, 3), randn(63, 1, 2, 3, 3)
    y = convt_full(x, w, None, (3, 2), (1, 1), (1, 1), 1)
    return node_case("ConvTranspose", {"x": x}, y, opset=11, consts={"w": w}, strides=[3, 2], output_shape=[10, 8])


@case
def convtranspose_same_upper():
    x, w = randn(56, 1, 2, 3, 4), randn(57, 2, 1, 4, 3)
    full = convt_full(x, w, None, (2, 3), (1, 1), (0, 0), 1)  # (2·2+4)=8 × (3·3+3)=12
    # output = input·stride = 6×12: total 2 and 0
    y = full[:, :, 1:7, 0:12]
    return node_case("ConvTranspose", {"x": x}, y, opset=11, consts={"w": w}, strides=[2, 3], auto_pad="SAME_UPPER")


@case
def convtranspose_same_lower_odd():
    x, w = randn(58, 1, 2, 5), randn(59, 2, 2, 4)
    full = convt_full(x, w, None, (2,), (1,), (0,), 1)  # 2·4+4 = 12
    # output 10: total 2... with kernel 4 odd total needs another case: use stride 2, k 5 → 13, total 3
    return node_case("ConvTranspose", {"x": x}, full[:, :, 1:11], opset=11, consts={"w": w}, strides=[2],
                     auto_pad="SAME_LOWER")


@case
def convtranspose_same_lower_odd_total():
    x, w = randn(60, 1, 2, 5), randn(61, 2, 2, 5)
    full = convt_full(x, w, None, (2,), (1,), (0,), 1)  # 2·4+5 = 13, output 10: total 3, 2 at the start
    return node_case("ConvTranspose", {"x": x}, full[:, :, 2:12], opset=11, consts={"w": w}, strides=[2],
                     auto_pad="SAME_LOWER")


# --- LRN ---

@case
def lrn_odd_size():
    # PyTorch exports LocalResponseNorm as a chain with an If, not LRN;
    # its functional form is the reference here
    x = randn(70, 2, 5, 3, 4) * 2
    y = torch.nn.functional.local_response_norm(torch.from_numpy(x).double(), 3, alpha=0.2, beta=0.6, k=1.5)
    return node_case("LRN", {"x": x}, y.numpy(), opset=13, size=3, alpha=0.2, beta=0.6, bias=1.5)


@case
def lrn_even_size():
    x = randn(71, 2, 6, 3) * 2
    size, alpha, beta, bias = 4, 0.3, 0.75, 2.0
    sq = np.zeros_like(x, dtype=np.float64)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + size // 2)
        sq[:, c] = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
    y = x / (bias + alpha / size * sq) ** beta
    return node_case("LRN", {"x": x}, y, opset=13, size=size, alpha=alpha, beta=beta, bias=bias)


# --- legacy broadcasting (opset 6) ---

@case
def add_opset6_broadcast():
    a, b = randn(80, 2, 3, 4), randn(81, 3, 4)
    return node_case("Add", {"a": a, "b": b}, a + b, opset=6, broadcast=1)


@case
def mul_opset6_broadcast_axis():
    # axis given, B aligned with A's last axes: numpy's rule
    a, b = randn(82, 2, 3, 4), randn(83, 4)
    return node_case("Mul", {"a": a, "b": b}, a * b, opset=6, broadcast=1, axis=2)


@case
def gemm_opset6_broadcast_c():
    a, b, c = randn(84, 3, 4), randn(85, 5, 4), randn(86, 5)
    return node_case("Gemm", {"a": a}, 0.5 * a @ b.T + 2 * c, opset=6, consts={"b": b, "c": c},
                     transB=1, alpha=0.5, beta=2.0, broadcast=1)


# --- per-sample norms (the DP engine's rules for these operators) ---

class ConvTPReLUNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.p1 = torch.nn.PReLU(4)
        self.t = torch.nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.p2 = torch.nn.PReLU()
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(self.p2(self.t(self.p1(self.c(x)))).flatten(1))


@case
def norms_convtranspose_prelu():
    """Per-sample gradient norms of Conv, PReLU (per-channel and shared),
    ConvTranspose (grouped, strided, output_padding) and Linear parameters,
    by batch-of-1 loops in PyTorch (float64 sums of float32 gradients)."""
    torch.manual_seed(4)
    m = ConvTPReLUNet().eval()
    with torch.no_grad():
        m.p1.weight.uniform_(-0.5, 0.5)
        m.p2.weight.fill_(0.3)
    x = torch.from_numpy(randn(90, 6, 3, 4, 4))
    labels = torch.from_numpy(rng(91).integers(0, 5, 6))
    return norms_case(m, x, labels, 14)


def norms_case(m, x, labels, opset, grads=False, output="y"):
    """Exports m (input "input", dynamic batch) and returns the model, its
    feeds, PyTorch's output and the extras: labels, the per-sample norms
    norm/<onnx initializer> and norm_total (batch-of-1 loops, float64 sums
    of float32 gradients; parameters matched to initializers by value, as
    the exporter may fold a parameter's reshape) and, with grads, grad/<onnx
    initializer>, the gradient of the summed cross-entropy of the batch."""
    buf = io.BytesIO()
    torch.onnx.export(m, x, buf, opset_version=opset, input_names=["input"], output_names=[output],
                      dynamic_axes={"input": {0: "batch"}, output: {0: "batch"}})
    om = onnx.load_from_string(buf.getvalue())
    inits = {i.name: numpy_helper.to_array(i) for i in om.graph.initializer}
    names = {}
    for n, p in m.named_parameters():
        hits = [k for k, v in inits.items() if v.size == p.numel() and np.array_equal(v.ravel(), p.detach().numpy().ravel())]
        assert len(hits) == 1, (n, hits)
        names[n] = hits[0]
    extra = {"labels": labels.numpy()}
    B = x.shape[0]
    total = np.zeros(B)
    for i in range(B):
        m.zero_grad()
        torch.nn.functional.cross_entropy(m(x[i:i + 1]), labels[i:i + 1]).backward()
        for n, p in m.named_parameters():
            sq = float((p.grad.double() ** 2).sum())
            extra.setdefault("norm/" + names[n], np.zeros(B))[i] = sq ** 0.5
            total[i] += sq
    extra["norm_total"] = np.sqrt(total)
    if grads:
        m.zero_grad()
        torch.nn.functional.cross_entropy(m(x), labels, reduction="sum").backward()
        for n, p in m.named_parameters():
            extra["grad/" + names[n]] = p.grad.numpy().reshape(inits[names[n]].shape)
    with torch.no_grad():
        y = m(x)
    return om, {"input": x.numpy()}, y.numpy(), extra


# --- Resize and Upsample ---
#
# torch cases: F.interpolate / nn.Upsample as torch 1.13 exports them
# (nearest: asymmetric + floor; bilinear and bicubic: half_pixel or
# align_corners, cubic_coeff_a -0.75; sizes computed from Shape, folded
# once the input shape is fixed; opset 9 writes Upsample). torch 1.13
# cannot export antialias=True (aten::_upsample_bilinear2d_aa), so the
# antialias cases are node cases. node cases: attribute forms torch does
# not write, with y from resize_ref below, a reading of the ONNX
# specification written here (checked against onnx 1.12's own reference,
# onnx.backend.test.case.node.resize.interpolate_nd, on the forms that
# version has).

def resize_axis(n_in, n_out, scale, mode, coord, nearest="round_prefer_floor", a=-0.75, exclude=False,
                antialias=False, roi=(0.0, 1.0)):
    """The spec's interpolation along one axis as an (n_out, n_in) matrix
    and the mask of extrapolated outputs. Kernels are evaluated at the
    distance of every input index from the source coordinate, edge-clamped;
    antialiasing stretches them by 1/scale when downsampling."""
    R = np.zeros((n_out, n_in))
    out_mask = np.zeros(n_out, bool)
    width = scale * n_in
    for o in range(n_out):
        if coord == "half_pixel":
            x = (o + 0.5) / scale - 0.5
        elif coord == "half_pixel_symmetric":
            x = n_in / 2 * (1 - n_out / width) + (o + 0.5) / scale - 0.5
        elif coord == "pytorch_half_pixel":
            x = (o + 0.5) / scale - 0.5 if width > 1 else 0.0
        elif coord == "align_corners":
            x = o * (n_in - 1) / (width - 1) if width != 1 else 0.0
        elif coord == "asymmetric":
            x = o / scale
        elif coord == "tf_half_pixel_for_nn":
            x = (o + 0.5) / scale
        elif coord == "tf_crop_and_resize":
            s0, s1 = roi
            x = s0 * (n_in - 1) + (o * (s1 - s0) * (n_in - 1) / (width - 1) if width != 1 else (s1 - s0) * (n_in - 1) / 2)
            if x < 0 or x > n_in - 1:
                out_mask[o] = True
                continue
        else:
            raise ValueError(coord)
        if mode == "nearest":
            if x == np.floor(x):
                k = int(x)
            elif nearest == "round_prefer_floor":
                k = int(np.ceil(x - 0.5))
            elif nearest == "round_prefer_ceil":
                k = int(np.floor(x + 0.5))
            elif nearest == "floor":
                k = int(np.floor(x))
            else:
                k = int(np.ceil(x))
            R[o, min(max(k, 0), n_in - 1)] = 1
            continue
        stretch = 1 / min(scale, 1) if antialias else 1.0
        support = (1 if mode == "linear" else 2) * stretch
        w = {}
        for j in range(int(np.floor(x - support)) - 1, int(np.ceil(x + support)) + 2):
            d = abs(j - x) / stretch
            if mode == "linear":
                v = max(0.0, 1 - d)
            elif d <= 1:
                v = (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
            elif d < 2:
                v = a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
            else:
                v = 0.0
            if v != 0:
                w[j] = v
        if exclude:
            w = {j: v for j, v in w.items() if 0 <= j < n_in}
        total = sum(w.values()) if (antialias or exclude) else 1.0
        for j, v in w.items():
            R[o, min(max(j, 0), n_in - 1)] += v / total
    return R, out_mask


def resize_ref(x, out, scales, extrapolation=0.0, **kw):
    """x resized axis by axis to shape out with the per-axis scales;
    outputs where any axis extrapolates take the extrapolation value."""
    y = x.astype(np.float64)
    scales = [float(v) for v in scales]  # the spec's arithmetic, in float64
    mask = np.zeros(out, bool)
    rois = kw.pop("rois", None)
    for d in range(x.ndim):
        if x.shape[d] == out[d] and scales[d] == 1 and rois is None:
            continue
        akw = dict(kw)
        if rois is not None:
            akw["roi"] = rois[d]
        R, m = resize_axis(x.shape[d], out[d], scales[d], **akw)
        y = np.moveaxis(np.tensordot(R, np.moveaxis(y, d, 0), axes=1), 0, d)
        shape = [1] * x.ndim
        shape[d] = out[d]
        mask = mask | m.reshape(shape)
    return np.where(mask, extrapolation, y)


def resize_onnx12(x, coeffs, **kw):
    """onnx 1.12's reference resize (its numpy test-case generator) with
    the coefficient function coeffs(ratio)."""
    for k, v in (("float", float), ("int", int), ("bool", bool), ("object", object)):
        if not hasattr(np, k):
            setattr(np, k, v)
    from onnx.backend.test.case.node import resize as onnx_resize
    return onnx_resize.interpolate_nd(x, coeffs, **kw)


def onnx12_coeffs(kind, **kw):
    from onnx.backend.test.case.node import resize as onnx_resize
    f = getattr(onnx_resize, kind + "_coeffs")
    return lambda r: f(r, **kw)


def check_onnx12(y, x, kind, coeff_kw=None, **kw):
    """Holds resize_ref's y to onnx 1.12's reference on a form it has."""
    want = resize_onnx12(x, onnx12_coeffs(kind, **(coeff_kw or {})), **kw)
    d = np.abs(y - want).max()
    assert d <= 1e-5 * max(1, np.abs(want).max()), d
    return y


def interp(**kw):
    return Fn(lambda x: torch.nn.functional.interpolate(x, **kw))


@case
def resize_nearest_up_torch():
    return torch_case(interp(scale_factor=2, mode="nearest"), [randn(100, 2, 3, 3, 5)], opset=13)


@case
def resize_nearest_down_torch():
    return torch_case(interp(size=(3, 4), mode="nearest"), [randn(101, 2, 2, 5, 8)], opset=13)


@case
def resize_bilinear_torch():
    return torch_case(interp(size=(5, 7), mode="bilinear", align_corners=False), [randn(102, 2, 3, 3, 4)], opset=13)


@case
def resize_bilinear_down_torch():
    return torch_case(interp(size=(3, 2), mode="bilinear", align_corners=False), [randn(103, 2, 2, 7, 5)], opset=14)


@case
def resize_bilinear_align_corners_opset11_torch():
    return torch_case(interp(size=(5, 7), mode="bilinear", align_corners=True), [randn(104, 2, 3, 3, 4)], opset=11)


@case
def resize_bicubic_torch():
    return torch_case(interp(size=(5, 7), mode="bicubic", align_corners=False), [randn(105, 2, 3, 3, 4)], opset=17)


@case
def resize_bicubic_down_torch():
    # CrossViT's resize (240 → 224) in small: 20 → 16
    return torch_case(interp(size=(16, 16), mode="bicubic", align_corners=False), [randn(106, 1, 3, 20, 20)], opset=17)


@case
def resize_bicubic_align_corners_torch():
    return torch_case(interp(size=(4, 6), mode="bicubic", align_corners=True), [randn(107, 2, 2, 9, 4)], opset=17)


@case
def resize_trilinear_torch():
    return torch_case(interp(size=(3, 5, 2), mode="trilinear", align_corners=False), [randn(108, 1, 2, 2, 3, 4)], opset=13)


@case
def upsample_nearest_opset9_torch():
    return torch_case(torch.nn.Upsample(scale_factor=2), [randn(109, 2, 3, 3, 4)], opset=9)


def resize_node(x, y, opset, scales=None, sizes=None, roi=None, **attrs):
    """A Resize node on graph input x with constant roi/scales/sizes (the
    absent ones left out by name)."""
    consts, order = {}, ["x", "", "", ""]
    for i, (k, v) in enumerate((("roi", roi), ("scales", scales), ("sizes", sizes))):
        if v is not None:
            consts[k] = v
            order[i + 1] = k
    while order[-1] == "":
        order.pop()
    return node_case("Resize", {"x": x}, y, opset=opset, consts=consts, order=order, **attrs)


def f32(*v):
    return np.array(v, np.float32)


def i64(*v):
    return np.array(v, np.int64)


@case
def resize_cubic_a05_exclude_outside():
    x, sc = randn(110, 1, 2, 5, 6), f32(1, 1, 0.8, 1.4)
    y = resize_ref(x, [1, 2, 4, 8], sc, mode="cubic", coord="half_pixel", a=-0.5, exclude=True)
    check_onnx12(y, x, "cubic", {"A": -0.5}, scale_factors=sc, exclude_outside=True)
    return resize_node(x, y, 13, scales=sc, mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)


def nearest_sizes_case(seed, sizes, nearest, coord):
    x = randn(seed, 1, 1, 4, 5)
    sc = sizes / np.array(x.shape)
    y = resize_ref(x, sizes, sc, mode="nearest", coord=coord, nearest=nearest)
    check_onnx12(y, x, "nearest", {"mode": nearest}, output_size=sizes, coordinate_transformation_mode=coord)
    return resize_node(x, y, 13, sizes=sizes, mode="nearest", nearest_mode=nearest, coordinate_transformation_mode=coord)


@case
def resize_nearest_ceil_half_pixel():
    return nearest_sizes_case(111, i64(1, 1, 7, 8), "ceil", "half_pixel")


@case
def resize_nearest_round_prefer_ceil_asymmetric():
    return nearest_sizes_case(112, i64(1, 1, 7, 9), "round_prefer_ceil", "asymmetric")


@case
def resize_nearest_floor_align_corners():
    return nearest_sizes_case(113, i64(1, 1, 7, 3), "floor", "align_corners")


@case
def resize_nearest_round_prefer_floor_down():
    x, sc = randn(114, 1, 2, 5, 7), f32(1, 1, 0.6, 0.5)
    y = resize_ref(x, [1, 2, 3, 3], sc, mode="nearest", coord="half_pixel")
    check_onnx12(y, x, "nearest", scale_factors=sc)
    return resize_node(x, y, 13, scales=sc)


@case
def resize_linear_pytorch_half_pixel_to_one():
    # an axis resized to length 1, where pytorch_half_pixel has its own rule
    x, sizes = randn(115, 1, 2, 4, 5), i64(1, 2, 3, 1)
    y = resize_ref(x, sizes, sizes / np.array(x.shape), mode="linear", coord="pytorch_half_pixel")
    check_onnx12(y, x, "linear", output_size=sizes, coordinate_transformation_mode="pytorch_half_pixel")
    return resize_node(x, y, 13, sizes=sizes, mode="linear", coordinate_transformation_mode="pytorch_half_pixel")


def crop_case(seed, mode, extrapolation, roi, sizes=None, scales=None):
    x = randn(seed, 1, 1, 4, 5)
    r = x.ndim
    rois = [(roi[d], roi[r + d]) for d in range(r)]
    if sizes is not None:
        out, sc = sizes, sizes / np.array(x.shape)
    else:
        out, sc = (np.array(x.shape) * scales).astype(np.int64), scales
    y = resize_ref(x, out, sc, extrapolation, mode=mode, coord="tf_crop_and_resize", rois=rois)
    check_onnx12(y, x, mode, output_size=sizes, scale_factors=scales, roi=roi,
                 coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=extrapolation)
    return resize_node(x, y, 13, sizes=sizes, scales=scales, roi=roi, mode=mode,
                       coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=extrapolation)


@case
def resize_tf_crop_and_resize_extrapolation():
    return crop_case(116, "linear", 10.0, f32(0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7), sizes=i64(1, 1, 3, 3))


@case
def resize_tf_crop_and_resize_nearest():
    return crop_case(117, "nearest", -3.0, f32(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3), scales=f32(1, 1, 1.5, 0.8))


@case
def resize_tf_crop_and_resize_cubic_inside():
    return crop_case(118, "cubic", 0.0, f32(0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8), sizes=i64(1, 1, 5, 3))


@case
def resize_tf_half_pixel_for_nn_opset11():
    # opsets 11–12 only; Resize-11 takes roi and scales as (empty) inputs
    x, sizes = randn(119, 1, 1, 4, 5), i64(1, 1, 7, 3)
    y = resize_ref(x, sizes, sizes / np.array(x.shape), mode="nearest", coord="tf_half_pixel_for_nn")
    return node_case("Resize", {"x": x}, y, opset=11, consts={"roi": f32(), "scales": f32(), "sizes": sizes},
                     coordinate_transformation_mode="tf_half_pixel_for_nn")


@case
def resize10_linear_down():
    # Resize-10: scales only, asymmetric coordinates
    x, sc = randn(120, 1, 2, 5, 6), f32(1, 1, 0.6, 0.8)
    y = resize_ref(x, [1, 2, 3, 4], sc, mode="linear", coord="asymmetric")
    return node_case("Resize", {"x": x}, y, opset=10, consts={"scales": sc}, mode="linear")


@case
def resize10_nearest_up():
    # nearest upsampling repeats each element, as Upsample's
    x, sc = randn(121, 1, 2, 2, 3), f32(1, 1, 2, 3)
    y = resize_ref(x, [1, 2, 4, 9], sc, mode="nearest", coord="asymmetric", nearest="floor")
    assert np.array_equal(y, np.repeat(np.repeat(x, 2, axis=2), 3, axis=3))
    return node_case("Resize", {"x": x}, y, opset=10, consts={"scales": sc})


@case
def resize_linear_antialias_opset18():
    x, sc = randn(122, 1, 2, 7, 9), f32(1, 1, 0.6, 0.4)
    y = resize_ref(x, [1, 2, 4, 3], sc, mode="linear", coord="half_pixel", antialias=True)
    return resize_node(x, y, 18, scales=sc, mode="linear", antialias=1)


@case
def resize_cubic_antialias_opset18():
    x, sizes = randn(123, 1, 2, 7, 9), i64(1, 2, 3, 4)
    y = resize_ref(x, sizes, sizes / np.array(x.shape), mode="cubic", coord="half_pixel", antialias=True)
    return resize_node(x, y, 18, sizes=sizes, mode="cubic", antialias=1)


@case
def resize_cubic_antialias_exclude_outside_opset18():
    # antialias with exclude_outside drops the taps beyond the edges, as
    # PyTorch's antialiased interpolate does (its values are checked here)
    x, sizes = randn(124, 1, 2, 8, 10), i64(1, 2, 3, 4)
    y = resize_ref(x, sizes, sizes / np.array(x.shape), mode="cubic", coord="half_pixel", antialias=True, exclude=True, a=-0.5)
    return resize_node(x, y, 18, sizes=sizes, mode="cubic", antialias=1, exclude_outside=1, cubic_coeff_a=-0.5)


@case
def resize_axes_not_larger_opset18():
    x = randn(125, 1, 2, 4, 5)
    sizes = i64(7, 8)  # scale min(7/4, 8/5) = 1.6: (6.4 → 6, 8)
    y = resize_ref(x, [1, 2, 6, 8], [1, 1, 1.6, 1.6], mode="linear", coord="half_pixel")
    return resize_node(x, y, 18, sizes=sizes, mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_larger")


@case
def resize_axes_not_smaller_opset18():
    x = randn(126, 1, 2, 5, 4)
    # axes out of order (negative axes are graph.TestResizeSpec's: onnxruntime
    # 1.30 ignores them): W 4 → 3, H 5 → 2; scale max(3/4, 2/5) = 0.75,
    # so (3.75 → 4, 3)
    sizes = i64(3, 2)
    y = resize_ref(x, [1, 2, 4, 3], [1, 1, 0.75, 0.75], mode="nearest", coord="half_pixel")
    return resize_node(x, y, 18, sizes=sizes, axes=[3, 2], keep_aspect_ratio_policy="not_smaller")


@case
def resize_axes_tf_crop_opset18():
    x = randn(127, 1, 2, 4, 5)
    rois = [(0, 1), (0, 1), (0, 1), (0.2, 0.9)]
    y = resize_ref(x, [1, 2, 4, 3], [1, 1, 1, 0.6], 0.0, mode="linear", coord="tf_crop_and_resize", rois=rois)
    return resize_node(x, y, 18, sizes=i64(3), roi=f32(0.2, 0.9), mode="linear", axes=[3],
                       coordinate_transformation_mode="tf_crop_and_resize")


@case
def resize_half_pixel_symmetric_opset19():
    # floor(5·0.7) = 3 < 3.5 and floor(4·1.7) = 6 < 6.8: the output is
    # centred on the region the scale covers
    x, sc = randn(128, 1, 2, 5, 4), f32(1, 1, 0.7, 1.7)
    y = resize_ref(x, [1, 2, 3, 6], sc, mode="linear", coord="half_pixel_symmetric")
    return resize_node(x, y, 19, scales=sc, mode="linear", coordinate_transformation_mode="half_pixel_symmetric")


@case
def resize_rank3_middle_axis():
    # a middle axis (neither of the last two) and the last
    x, sc = randn(129, 3, 4, 5), f32(1, 1.5, 0.6)
    y = resize_ref(x, [3, 6, 3], sc, mode="cubic", coord="half_pixel")
    check_onnx12(y, x, "cubic", scale_factors=sc)
    return resize_node(x, y, 13, scales=sc, mode="cubic")


@case
def upsample_linear_opset7():
    x = randn(130, 1, 2, 3, 4)
    sc = [1.0, 1.0, 2.0, 1.5]
    y = resize_ref(x, [1, 2, 6, 6], sc, mode="linear", coord="asymmetric")
    return node_case("Upsample", {"x": x}, y, opset=7, mode="linear", scales=sc)


@case
def upsample_nearest_opset9():
    x, sc = randn(131, 1, 2, 2, 3), f32(1, 1, 2, 3)
    return node_case("Upsample", {"x": x}, np.repeat(np.repeat(x, 2, axis=2), 3, axis=3), opset=9, consts={"scales": sc})


# Resize inside small networks, trainable convolutions before and after:
# PyTorch's output, summed gradients and per-sample norms.

class ResizeNet(torch.nn.Module):
    def __init__(self, first, second, hw, classes=5):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.first, self.second = first, second
        self.c2 = torch.nn.Conv2d(4, 3, 3, padding=1)
        self.fc = torch.nn.Linear(3 * hw[0] * hw[1], classes)

    def forward(self, x):
        x = torch.tanh(self.first(self.c1(x)))
        return self.fc(self.second(self.c2(x)).flatten(1))


def resize_norms_case(seed, first, second, hw, opset, input_hw=(4, 4)):
    torch.manual_seed(seed)
    m = ResizeNet(first, second, hw).eval()
    x = torch.from_numpy(randn(seed + 1, 6, 3, *input_hw))
    labels = torch.from_numpy(rng(seed + 2).integers(0, 5, 6))
    return norms_case(m, x, labels, opset, grads=True)


@case
def norms_upsample_nearest_opset9():
    return resize_norms_case(140, torch.nn.Upsample(scale_factor=2), torch.nn.Identity(), (8, 8), 9)


@case
def norms_resize_nearest_bilinear():
    return resize_norms_case(150, interp(scale_factor=2, mode="nearest"),
                             interp(size=(5, 3), mode="bilinear", align_corners=True), (5, 3), 13)


@case
def norms_resize_bilinear():
    return resize_norms_case(160, interp(size=(7, 6), mode="bilinear", align_corners=False),
                             interp(size=(4, 5), mode="bilinear", align_corners=False), (4, 5), 14)


@case
def norms_resize_bicubic():
    return resize_norms_case(170, interp(size=(6, 7), mode="bicubic", align_corners=False),
                             interp(size=(3, 4), mode="bicubic", align_corners=True), (3, 4), 17, input_hw=(5, 5))


class CrossResize(torch.nn.Module):
    """CrossViT's two branches in small: one embeds 5×5 patches of the
    20×20 input, the other resizes the input to 16×16 (bicubic, as
    CrossViT's 240 → 224) and embeds 4×4 patches; each adds a class token
    and position embeddings, normalizes, pools the class token into its
    head; the heads are averaged."""

    def __init__(self, classes=10, dim=8):
        super().__init__()
        self.patch = torch.nn.ModuleList([torch.nn.Conv2d(3, dim, 5, 5), torch.nn.Conv2d(3, dim, 4, 4)])
        self.cls = torch.nn.ParameterList([torch.nn.Parameter(0.1 * torch.randn(1, 1, dim)) for _ in range(2)])
        self.pos = torch.nn.ParameterList([torch.nn.Parameter(0.1 * torch.randn(1, 17, dim)) for _ in range(2)])
        self.norm = torch.nn.ModuleList([torch.nn.LayerNorm(dim) for _ in range(2)])
        self.head = torch.nn.ModuleList([torch.nn.Linear(dim, classes) for _ in range(2)])
        with torch.no_grad():
            for n in self.norm:
                n.weight.add_(0.1 * torch.randn(dim))
                n.bias.add_(0.1 * torch.randn(dim))

    def forward(self, x):
        outs = []
        for i in range(2):
            xi = x if i == 0 else torch.nn.functional.interpolate(x, size=(16, 16), mode="bicubic", align_corners=False)
            t = self.patch[i](xi).flatten(2).transpose(1, 2)
            t = torch.cat([self.cls[i].expand(t.shape[0], -1, -1), t], dim=1) + self.pos[i]
            t = torch.nn.functional.gelu(self.norm[i](t))
            outs.append(self.head[i](t[:, 0]))
        return (outs[0] + outs[1]) / 2


@case
def crossvit_resize():
    """The CrossViT-like model the CLI trains (cmd/dpfinetune): opset 17,
    input (batch, 3, 20, 20), output y (batch, 10)."""
    torch.manual_seed(180)
    m = CrossResize().eval()
    x = torch.from_numpy(randn(181, 6, 3, 20, 20))
    labels = torch.from_numpy(rng(182).integers(0, 10, 6))
    return norms_case(m, x, labels, 17, grads=True)


# --- opsets 19-27: the versions whose meaning changed after 18 ---

@case
def pad_opset19_wrap():
    """Pad-19's wrap mode (numpy's periodic pad), with a crop on one side."""
    x = randn(190, 2, 3, 4, 5)
    pads = np.array([0, 1, 2, 3, 0, 0, 1, 4], dtype=np.int64)
    y = np.pad(x, [(0, 0), (1, 0), (2, 1), (3, 4)], mode="wrap")
    return node_case("Pad", {"x": x}, y, opset=19, consts={"pads": pads}, mode="wrap")


@case
def pad_opset19_wrap_wider_than_axis():
    """A wrap pad wider than its axis repeats the axis again (numpy's
    rule; the ONNX reference pads with numpy)."""
    x = randn(191, 1, 2, 3)
    pads = np.array([0, 0, 4, 0, 0, 5], dtype=np.int64)
    y = np.pad(x, [(0, 0), (0, 0), (4, 5)], mode="wrap")
    return node_case("Pad", {"x": x}, y, opset=19, consts={"pads": pads}, mode="wrap")


def avgpool_dilated_ref(x, kernel, strides, dilations, pads, include_pad, ceil):
    """AveragePool over a dilated window, by the definition: the taps of
    each window that fall in the input are averaged, divided by their
    count, or with count_include_pad by the taps inside the padded input."""
    n, c = x.shape[:2]
    ins = x.shape[2:]
    r = len(ins)
    outs = []
    for i in range(r):
        span = dilations[i] * (kernel[i] - 1) + 1
        num = ins[i] + pads[i] + pads[r + i] - span
        o = (-(-num // strides[i]) if ceil else num // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= ins[i] + pads[i]:
            o -= 1
        outs.append(o)
    y = np.zeros((n, c) + tuple(outs), dtype=np.float64)
    for idx in np.ndindex(*outs):
        taps = []
        for i in range(r):
            start = idx[i] * strides[i] - pads[i]
            taps.append([start + k * dilations[i] for k in range(kernel[i])])
        total, inside, padded = 0.0, 0, 0
        acc = np.zeros((n, c))
        for t in np.ndindex(*kernel):
            pos = [taps[i][t[i]] for i in range(r)]
            if all(0 <= pos[i] < ins[i] for i in range(r)):
                acc += x[(slice(None), slice(None)) + tuple(pos)]
                inside += 1
            if all(-pads[i] <= pos[i] < ins[i] + pads[r + i] for i in range(r)):
                padded += 1
        d = padded if include_pad else inside
        y[(slice(None), slice(None)) + idx] = acc / d if d else 0
    return y.astype(np.float32)


@case
def averagepool_opset19_dilations():
    """AveragePool-19's dilations (new in 19), pads, strides."""
    x = randn(192, 2, 3, 9, 8)
    kw = dict(kernel=[3, 2], strides=[1, 2], dilations=[2, 3], pads=[1, 0, 2, 1])
    y = avgpool_dilated_ref(x, include_pad=False, ceil=False, **kw)
    return node_case("AveragePool", {"x": x}, y, opset=19, kernel_shape=kw["kernel"], strides=kw["strides"],
                     dilations=kw["dilations"], pads=kw["pads"])


@case
def averagepool_opset19_dilations_include_pad_ceil():
    """Dilated AveragePool counting padding, with ceil_mode."""
    x = randn(193, 1, 2, 8, 7)
    kw = dict(kernel=[2, 3], strides=[3, 2], dilations=[3, 2], pads=[1, 2, 1, 1])
    y = avgpool_dilated_ref(x, include_pad=True, ceil=True, **kw)
    return node_case("AveragePool", {"x": x}, y, opset=19, kernel_shape=kw["kernel"], strides=kw["strides"],
                     dilations=kw["dilations"], pads=kw["pads"], count_include_pad=1, ceil_mode=1)


def group_norm_ref(x, groups, eps):
    n, c = x.shape[:2]
    xr = x.reshape(n, groups, -1).astype(np.float64)
    mu = xr.mean(axis=2, keepdims=True)
    var = ((xr - mu) ** 2).mean(axis=2, keepdims=True)
    return ((xr - mu) / np.sqrt(var + eps)).reshape(x.shape)


@case
def groupnorm_opset18_per_group():
    """GroupNormalization-18: scale and bias per group."""
    x = randn(194, 2, 6, 3, 4)
    scale, bias = randn(195, 3), randn(196, 3)
    xn = group_norm_ref(x, 3, 1e-4)
    y = xn * np.repeat(scale, 2)[None, :, None, None] + np.repeat(bias, 2)[None, :, None, None]
    return node_case("GroupNormalization", {"x": x}, y, opset=18, consts={"scale": scale, "bias": bias},
                     num_groups=3, epsilon=1e-4)


@case
def groupnorm_opset21_per_channel():
    """GroupNormalization-21: scale and bias per channel, as PyTorch's
    GroupNorm (the reference is torch.nn.functional.group_norm)."""
    x = randn(197, 2, 6, 3, 4)
    scale, bias = randn(198, 6), randn(199, 6)
    y = torch.nn.functional.group_norm(torch.from_numpy(x), 3, torch.from_numpy(scale), torch.from_numpy(bias),
                                       eps=1e-5).numpy()
    return node_case("GroupNormalization", {"x": x}, y, opset=21, consts={"scale": scale, "bias": bias},
                     num_groups=3)


# --- GatherND: PyTorch's dynamo exporter writes advanced indexing so ---

@case
def gathernd_index_table():
    """table[index] as onnxscript's aten_index writes it: GatherND of the
    table by a constant index with a last axis of 1 (Swin's relative
    position bias); the reference is numpy's fancy indexing."""
    table = randn(200, 7, 3)
    idx = rng(201).integers(-7, 7, (4, 5, 1)).astype(np.int64)
    return node_case("GatherND", {"x": table}, table[idx[..., 0]], opset=18, consts={"indices": idx})


def save_npz(path, arrays):
    """Deterministic .npz: fixed timestamps, sorted keys."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for k in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asanyarray(arrays[k]), allow_pickle=False)
            zi = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            zf.writestr(zi, buf.getvalue())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/ops")
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    for name, fn in CASES.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        out = fn()
        m, feeds, y = out[:3]
        extra = out[3] if len(out) > 3 else {}
        if m.opset_import[0].version <= 17:  # onnx 1.12's checker knows opsets up to 17
            onnx.checker.check_model(m)
        m.producer_name = "dpfinetune make_op_models.py"
        with open(os.path.join(args.out, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())
        arrays = dict(feeds)
        arrays["y"] = np.ascontiguousarray(y, dtype=np.float32)
        arrays.update(extra)
        save_npz(os.path.join(args.out, name + ".npz"), arrays)
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{name}: opset {m.opset_import[0].version}, ops {ops}, y {y.shape}")


if __name__ == "__main__":
    sys.exit(main())
