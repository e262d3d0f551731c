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
    buf = io.BytesIO()
    torch.onnx.export(m, x, buf, opset_version=14, input_names=["input"], output_names=["y"],
                      dynamic_axes={"input": {0: "batch"}, "y": {0: "batch"}})
    om = onnx.load_from_string(buf.getvalue())
    inits = {i.name: numpy_helper.to_array(i) for i in om.graph.initializer}
    names = {}
    for n, p in m.named_parameters():
        # by value: the exporter folds the slope's Unsqueeze into (C, 1, 1)
        hits = [k for k, v in inits.items() if v.size == p.numel() and np.array_equal(v.ravel(), p.detach().numpy().ravel())]
        assert len(hits) == 1, (n, hits)
        names[n] = hits[0]
    extra = {"labels": labels.numpy()}
    total = np.zeros(6)
    for i in range(6):
        m.zero_grad()
        torch.nn.functional.cross_entropy(m(x[i:i + 1]), labels[i:i + 1]).backward()
        for n, p in m.named_parameters():
            sq = float((p.grad.double() ** 2).sum())
            extra.setdefault("norm/" + names[n], np.zeros(6))[i] = sq ** 0.5
            total[i] += sq
    extra["norm_total"] = np.sqrt(total)
    with torch.no_grad():
        y = m(x)
    return om, {"input": x.numpy()}, y.numpy(), extra


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
