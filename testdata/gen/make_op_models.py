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
def einsum_outer():
    return einsum_node("i,j->ji", randn(18, 3), randn(19, 4))


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
        m, feeds, y = fn()
        onnx.checker.check_model(m)
        m.producer_name = "dpfinetune make_op_models.py"
        with open(os.path.join(args.out, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())
        arrays = dict(feeds)
        arrays["y"] = np.ascontiguousarray(y, dtype=np.float32)
        save_npz(os.path.join(args.out, name + ".npz"), arrays)
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{name}: opset {m.opset_import[0].version}, ops {ops}, y {y.shape}")


if __name__ == "__main__":
    sys.exit(main())
