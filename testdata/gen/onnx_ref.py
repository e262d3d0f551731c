"""Minimal numpy reference evaluator for the ONNX ops the fixtures use.

onnxruntime is not installed where the fixtures are generated, and onnx 1.12
has no onnx.reference, so make_fixtures.py runs every exported graph through
this evaluator (float64 internally) as an independent check that the ONNX file
computes what the PyTorch model computes. Only the attributes the PyTorch 1.13
exporter emits at opset 14 are supported; anything else raises.
"""

import math

import numpy as np
from onnx import helper, numpy_helper

try:  # torch is present wherever make_fixtures.py runs; erf is the only op borrowed from it
    import torch as _torch

    def _verf(x):
        return _torch.erf(_torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))).numpy()
except ImportError:  # pragma: no cover
    _verf = np.vectorize(math.erf, otypes=[np.float64])


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pads_4(pads, nd):
    pads = list(pads) if pads else [0] * (2 * nd)
    return pads[:nd], pads[nd:]


def _im2col(x, kshape, strides, dil, pads_b, pads_e, pad_value=0.0):
    n, c, h, w = x.shape
    kh, kw = kshape
    xp = np.pad(x, ((0, 0), (0, 0), (pads_b[0], pads_e[0]), (pads_b[1], pads_e[1])),
                constant_values=pad_value)
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            hi, wj = i * dil[0], j * dil[1]
            cols[:, :, i, j] = xp[:, :, hi:hi + strides[0] * (oh - 1) + 1:strides[0],
                                  wj:wj + strides[1] * (ow - 1) + 1:strides[1]]
    return cols, oh, ow


def _conv(x, w, b, a):
    assert x.ndim == 4, "only 2-D conv"
    group = a.get("group", 1)
    strides = a.get("strides", [1, 1])
    dil = a.get("dilations", [1, 1])
    assert a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
    pb, pe = _pads_4(a.get("pads"), 2)
    cols, oh, ow = _im2col(x, w.shape[2:], strides, dil, pb, pe)
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    out = np.empty((n, m, oh, ow), dtype=np.float64)
    for g in range(group):
        cg_cols = cols[:, g * cg:(g + 1) * cg].reshape(n, -1, oh * ow)
        wg = w[g * mg:(g + 1) * mg].reshape(mg, -1)
        out[:, g * mg:(g + 1) * mg] = np.einsum("kd,ndt->nkt", wg, cg_cols).reshape(n, mg, oh, ow)
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def _conv_transpose(x, w, b, a):
    """2-D ConvTranspose by scattering each input position's taps (no
    output_shape, output_padding or dilations other than the default)."""
    assert x.ndim == 4, "only 2-D conv transpose"
    assert not a.get("output_shape") and not any(a.get("output_padding", [0, 0]))
    assert list(a.get("dilations", [1, 1])) == [1, 1]
    group = a.get("group", 1)
    sh, sw = a.get("strides", [1, 1])
    pb, pe = _pads_4(a.get("pads"), 2)
    n, c, h, wd = x.shape
    cg, mg = c // group, w.shape[1]
    kh, kw = w.shape[2:]
    full = np.zeros((n, mg * group, (h - 1) * sh + kh, (wd - 1) * sw + kw), dtype=np.float64)
    for g in range(group):
        xg = x[:, g * cg:(g + 1) * cg].astype(np.float64)
        wg = w[g * cg:(g + 1) * cg].astype(np.float64)  # (cg, mg, kh, kw)
        for i in range(kh):
            for j in range(kw):
                full[:, g * mg:(g + 1) * mg, i:i + (h - 1) * sh + 1:sh, j:j + (wd - 1) * sw + 1:sw] += \
                    np.einsum("nchw,cm->nmhw", xg, wg[:, :, i, j])
    out = full[:, :, pb[0]:full.shape[2] - pe[0], pb[1]:full.shape[3] - pe[1]]
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out


def _pool(x, a, kind, count_include_pad=0):
    k = a["kernel_shape"]
    strides = a.get("strides", [1] * len(k))
    dil = a.get("dilations", [1] * len(k))
    assert not a.get("ceil_mode", 0), "ceil_mode unsupported"
    pb, pe = _pads_4(a.get("pads"), 2)
    if kind == "max":
        cols, oh, ow = _im2col(x, k, strides, dil, pb, pe, pad_value=-np.inf)
        return cols.max(axis=(2, 3))
    cols, oh, ow = _im2col(x, k, strides, dil, pb, pe, pad_value=0.0)
    s = cols.sum(axis=(2, 3))
    if count_include_pad:
        return s / (k[0] * k[1])
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    cnt, _, _ = _im2col(ones, k, strides, dil, pb, pe, pad_value=0.0)
    return s / cnt.sum(axis=(2, 3))


def _slice(x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else [int(v) for v in axes]
    steps = [1] * len(starts) if steps is None else [int(v) for v in steps]
    sl = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        s, e = int(s), int(e)
        dim = x.shape[ax]
        e = max(min(e, dim), -dim - 1) if st < 0 else min(e, dim)
        sl[ax] = slice(s, e, st)
    return x[tuple(sl)]


def _reshape(x, shape):
    shape = [int(v) for v in shape]
    shape = [x.shape[i] if v == 0 else v for i, v in enumerate(shape)]
    return x.reshape(shape)


def _bn(x, scale, b, mean, var, a):
    eps = a.get("epsilon", 1e-5)
    mom = a.get("momentum", 0.9)
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    if a.get("training_mode", 0):
        axes = (0,) + tuple(range(2, x.ndim))
        bm = x.mean(axis=axes)
        bv = x.var(axis=axes)
        y = (x - bm.reshape(bshape)) / np.sqrt(bv.reshape(bshape) + eps) * scale.reshape(bshape) + b.reshape(bshape)
        n = x.size / x.shape[1]
        return [y, mean * mom + bm * (1 - mom), var * mom + bv * n / (n - 1) * (1 - mom)]
    y = (x - mean.reshape(bshape)) / np.sqrt(var.reshape(bshape) + eps) * scale.reshape(bshape) + b.reshape(bshape)
    return [y]


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _node(op, ins, a, n_out):
    if op == "Conv":
        return [_conv(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a)]
    if op == "ConvTranspose":
        return [_conv_transpose(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a)]
    if op == "MaxPool":
        return [_pool(ins[0], a, "max")]
    if op == "AveragePool":
        return [_pool(ins[0], a, "avg", a.get("count_include_pad", 0))]
    if op == "GlobalAveragePool":
        return [ins[0].mean(axis=tuple(range(2, ins[0].ndim)), keepdims=True)]
    if op == "BatchNormalization":
        return _bn(*ins, a)[:n_out]
    if op == "Gemm":
        A, B = ins[0], ins[1]
        if a.get("transA", 0):
            A = A.T
        if a.get("transB", 0):
            B = B.T
        y = a.get("alpha", 1.0) * (A @ B)
        if len(ins) > 2 and ins[2] is not None:
            y = y + a.get("beta", 1.0) * ins[2]
        return [y]
    if op == "MatMul":
        return [np.matmul(ins[0], ins[1])]
    if op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater"):
        f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
             "Equal": np.equal, "Less": np.less, "Greater": np.greater}[op]
        if op == "Div" and ins[0].dtype.kind == "i":
            return [ins[0] // ins[1]]
        return [f(ins[0], ins[1])]
    if op == "Pad":
        assert a.get("mode", b"constant") in (b"constant", "constant")
        x = ins[0]
        pads = [int(v) for v in ins[1]]
        nd = x.ndim
        assert min(pads) >= 0, "negative pads unsupported"
        val = float(ins[2]) if len(ins) > 2 and ins[2] is not None else 0.0
        return [np.pad(x, list(zip(pads[:nd], pads[nd:])), constant_values=val)]
    if op == "Where":
        return [np.where(ins[0], ins[1], ins[2])]
    if op == "Relu":
        return [np.maximum(ins[0], 0)]
    if op == "Tanh":
        return [np.tanh(ins[0])]
    if op == "Sigmoid":
        return [1 / (1 + np.exp(-ins[0]))]
    if op == "Erf":
        return [_verf(ins[0])]
    if op == "Sqrt":
        return [np.sqrt(ins[0])]
    if op == "Neg":
        return [-ins[0]]
    if op == "Exp":
        return [np.exp(ins[0])]
    if op == "Clip":
        lo = ins[1] if len(ins) > 1 and ins[1] is not None else -np.inf
        hi = ins[2] if len(ins) > 2 and ins[2] is not None else np.inf
        return [np.clip(ins[0], lo, hi)]
    if op == "Softmax":
        return [_softmax(ins[0], a.get("axis", -1))]
    if op in ("ReduceMean", "ReduceSum"):
        x = ins[0]
        if op == "ReduceSum":
            axes = ins[1] if len(ins) > 1 and ins[1] is not None else None
        else:
            axes = a.get("axes")
        axes = tuple(int(v) for v in axes) if axes is not None else None
        f = np.mean if op == "ReduceMean" else np.sum
        return [f(x, axis=axes, keepdims=bool(a.get("keepdims", 1)))]
    if op == "Flatten":
        ax = a.get("axis", 1)
        x = ins[0]
        return [x.reshape(int(np.prod(x.shape[:ax])), -1)]
    if op == "Reshape":
        return [_reshape(ins[0], ins[1])]
    if op == "Transpose":
        return [np.transpose(ins[0], a.get("perm"))]
    if op == "Unsqueeze":
        x = ins[0]
        axes = sorted(int(v) % (x.ndim + len(ins[1])) for v in ins[1])
        for ax in axes:
            x = np.expand_dims(x, ax)
        return [x]
    if op == "Squeeze":
        x = ins[0]
        if len(ins) > 1:
            return [np.squeeze(x, axis=tuple(int(v) for v in ins[1]))]
        return [np.squeeze(x)]
    if op == "Concat":
        return [np.concatenate(ins, axis=a["axis"])]
    if op == "Split":
        x = ins[0]
        ax = a.get("axis", 0)
        split = ins[1] if len(ins) > 1 else None
        if split is None:
            return np.split(x, n_out, axis=ax)
        idx = np.cumsum([int(s) for s in split])[:-1]
        return np.split(x, idx, axis=ax)
    if op == "Slice":
        return [_slice(ins[0], ins[1], ins[2], ins[3] if len(ins) > 3 else None, ins[4] if len(ins) > 4 else None)]
    if op == "Gather":
        return [np.take(ins[0], ins[1].astype(np.int64), axis=a.get("axis", 0))]
    if op == "Shape":
        return [np.array(ins[0].shape, dtype=np.int64)]
    if op == "ConstantOfShape":
        v = a.get("value")
        val = numpy_helper.to_array(v) if v is not None else np.zeros(1, np.float32)
        return [np.full([int(s) for s in ins[0]], val.reshape(-1)[0], dtype=val.dtype)]
    if op == "Expand":
        x = ins[0]
        shape = np.broadcast_shapes(x.shape, tuple(int(v) for v in ins[1]))
        return [np.broadcast_to(x, shape).copy()]
    if op == "Constant":
        return [numpy_helper.to_array(a["value"])]
    if op == "Cast":
        to = a["to"]
        dt = helper.tensor_dtype_to_np_dtype(to) if hasattr(helper, "tensor_dtype_to_np_dtype") else None
        if dt is None:
            from onnx import mapping
            dt = mapping.TENSOR_TYPE_TO_NP_TYPE[to]
        if dt == np.float32:
            dt = np.float64
        return [ins[0].astype(dt)]
    if op in ("Identity", "Dropout"):
        return [ins[0]] + ([np.ones(ins[0].shape, bool)] if n_out > 1 else [])
    if op == "LayerNormalization":
        x, scale = ins[0], ins[1]
        ax = a.get("axis", -1) % x.ndim
        axes = tuple(range(ax, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        y = (x - mean) / np.sqrt(var + a.get("epsilon", 1e-5)) * scale
        if len(ins) > 2 and ins[2] is not None:
            y = y + ins[2]
        return [y]
    if op == "Range":
        return [np.arange(ins[0], ins[1], ins[2])]
    raise NotImplementedError("onnx_ref: op %s" % op)


def run(model, feeds):
    """Evaluate model.graph on feeds (name -> np.ndarray). Floats are
    computed in float64 and returned as float32."""
    env = {}
    for init in model.graph.initializer:
        v = numpy_helper.to_array(init)
        env[init.name] = v.astype(np.float64) if v.dtype == np.float32 else v
    for k, v in feeds.items():
        env[k] = v.astype(np.float64) if v.dtype == np.float32 else v
    for node in model.graph.node:
        ins = [env[i] if i else None for i in node.input]
        outs = _node(node.op_type, ins, _attrs(node), len(node.output))
        for name, val in zip(node.output, outs):
            if name:
                env[name] = np.asarray(val)
    res = {}
    for o in model.graph.output:
        v = env[o.name]
        res[o.name] = v.astype(np.float32) if v.dtype == np.float64 else v
    return res
