#!/usr/bin/python3
"""ONNX backend conformance cases for the operators the runtime supports
(testdata/conformance/).

Runs the node and simple-model case generators that Debian's python3-onnx
(1.12) ships in onnx.backend.test.case (the same cases as onnx/onnx
onnx/backend/test/data/node and .../simple; the real-model cases are
download links), adds with --onnx-data the stored pytorch-converted,
pytorch-operator and light cases of an onnx/onnx checkout (not in the
Debian package; the light models' input is arange(n)/n, which the Go test
makes itself, marked by an empty input_arange file), and keeps every case
whose operators are all in
docs/OPERATORS.md (generated from the runtime's tables: kernels and
load-time-only operators). Each kept case is written as

    testdata/conformance/<kind>/<case>/model.onnx
    testdata/conformance/<kind>/<case>/input_<i>.pb, output_<i>.pb

the ONNX test-data layout without the test_data_set_0 level. A float64
case of a single node whose attributes name no dtype is written in float32
(inputs, outputs and expected values rounded; listed under
"float64_as_float32" in the manifest). Inputs the
runtime takes only as constants (int64, int32 and bool: shapes, axes,
indices, conditions) are moved into the model as initializers, so that the
model's remaining inputs are float32 tensors, as a model given to predict
has; output_<i>.pb are ONNX's expected outputs.

Cases of a supported operator that are not kept are listed, with the
reason, in testdata/conformance/manifest.json ("excluded"): outputs or
inputs of another dtype (float64, float16, strings, sequences, ...), no
float32 input at all, or a case larger than --max-bytes. The Go test
(runtime/conformance_test.go) runs every kept case and lists the ones the
runtime refuses, with the reason.

Run from the repository root; regenerate after docs/OPERATORS.md changes
(the committed suite used onnx/onnx at the commit in manifest.json's
"onnx_data"):

    go run ./internal/opsdoc > docs/OPERATORS.md
    git clone https://github.com/onnx/onnx /tmp/onnx
    /usr/bin/python3 testdata/gen/make_conformance.py --out testdata/conformance \
        --onnx-data /tmp/onnx/onnx/backend/test/data --onnx-data-rev $(git -C /tmp/onnx rev-parse HEAD)

Two runs give byte-identical files.
"""

import argparse
import json
import os
import re
import shutil
import sys
import warnings

import numpy as np

# onnx 1.12's case generators use the aliases numpy 1.24 removed.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for _alias, _typ in (("float", float), ("int", int), ("bool", bool), ("object", object)):
        if not hasattr(np, _alias):
            setattr(np, _alias, _typ)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx.backend.test.case import model as model_cases  # noqa: E402
from onnx.backend.test.case import node as node_cases  # noqa: E402

CONST_DTYPES = {np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.bool_)}


def supported_ops(doc):
    """Operators in docs/OPERATORS.md: table rows and the load-time list."""
    text = open(doc).read()
    ops = set(re.findall(r"^\| ([A-Za-z]+) \| \d+–\d+ \|$", text, re.M))
    tail = text.split("## Operators evaluated at load time only", 1)[1].split("\n## ", 1)[0]
    last = [ln for ln in tail.strip().splitlines() if ln.strip()][-1]
    ops |= {s.strip() for s in last.split(",")}
    return ops


def graph_ops(g):
    ops = set()
    for n in g.node:
        ops.add(n.op_type if n.domain in ("", "ai.onnx") else n.domain + "." + n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops |= graph_ops(a.g)
    return ops


def collect():
    """All node and simple-model cases, as (kind, case)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nodes = node_cases.collect_testcases(None)
        models = model_cases.collect_testcases()
    # A few generators emit one name twice; the later case wins, as with
    # onnx's own generate-data, which writes both to the same directory.
    out = {("node", c.name): c for c in nodes}
    out.update({("simple", c.name): c for c in models if c.model is not None and c.url is None})
    return [(kind, c) for (kind, _), c in sorted(out.items())]


class DataCase:
    """A case read from onnx/onnx's stored test data (same fields as the
    generators' TestCase that convert uses)."""

    def __init__(self, name, model, inputs, outputs, arange):
        self.name, self.model, self.data_sets, self.arange = name, model, [(inputs, outputs)], arange


def arange_input(vi):
    """The input onnx's runner feeds the light models: arange(n)/n in the
    declared shape (unknown dims 1), float32."""
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def collect_data(root):
    """onnx/onnx's onnx/backend/test/data: pytorch-converted and
    pytorch-operator (case/model.onnx, case/test_data_set_0/*.pb) and light
    (light_<m>.onnx and light_<m>_output_0.pb, input arange(n)/n)."""
    out = []
    for kind in ("pytorch-converted", "pytorch-operator"):
        d = os.path.join(root, kind)
        for name in sorted(os.listdir(d)):
            ds = os.path.join(d, name, "test_data_set_0")
            if not os.path.isdir(ds):
                continue
            files = sorted(os.listdir(ds))
            ins = [read_pb(os.path.join(ds, f)) for f in files if f.startswith("input_")]
            outs = [read_pb(os.path.join(ds, f)) for f in files if f.startswith("output_")]
            out.append((kind, DataCase(name, onnx.load(os.path.join(d, name, "model.onnx")), ins, outs, False)))
    d = os.path.join(root, "light")
    for f in sorted(os.listdir(d)):
        if not (f.startswith("light_") and f.endswith(".onnx")):
            continue
        name = f[:-len(".onnx")]
        m = onnx.load(os.path.join(d, f))
        inits = {i.name for i in m.graph.initializer}
        ins = [arange_input(vi) for vi in m.graph.input if vi.name not in inits]
        outs = [read_pb(os.path.join(d, name + "_output_0.pb"))]
        out.append(("light", DataCase(name, m, ins, outs, True)))
    return out


def is_f32(a):
    return isinstance(a, (np.ndarray, np.generic)) and a.dtype == np.float32


def to_float32(model, inputs, outputs):
    """A float64 case of one node whose attributes name no dtype becomes
    the same case in float32 (Einsum's cases are all float64); None if the
    case is not of that kind."""
    g = model.graph
    arrays = list(inputs) + list(outputs)
    if len(g.node) != 1 or any(a.name in ("to", "dtype") for a in g.node[0].attribute):
        return None
    if not arrays or not all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays):
        return None
    if any(np.abs(a).max(initial=0) > np.finfo(np.float32).max for a in arrays):
        return None  # values beyond float32: left out as float64
    for vi in list(g.input) + list(g.output):
        vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return [a.astype(np.float32) for a in inputs], [a.astype(np.float32) for a in outputs]


def convert(case):
    """Returns (model, inputs, outputs, float32ed) with constant-only inputs
    moved into initializers, or a reason string when the case cannot be
    kept."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    inputs, outputs = case.data_sets[0]
    conv = to_float32(model, inputs, outputs)
    if conv is not None:
        inputs, outputs = conv
    g = model.graph
    inits = {i.name for i in g.initializer}
    real = [vi for vi in g.input if vi.name not in inits]
    if len(real) != len(g.input):  # old IR: initializers listed as inputs
        del g.input[:]
        g.input.extend(real)
    if len(inputs) != len(g.input):
        return "optional inputs left out by position"
    for o in outputs:
        if not is_f32(o):
            return "output dtype %s" % (getattr(o, "dtype", type(o).__name__))
    keep_in, keep_vals = [], []
    for vi, val in zip(list(g.input), inputs):
        if is_f32(val):
            keep_in.append(vi)
            keep_vals.append(np.asarray(val))
        elif isinstance(val, (np.ndarray, np.generic)) and val.dtype in CONST_DTYPES:
            g.initializer.append(numpy_helper.from_array(np.asarray(val), vi.name))
        else:
            return "input dtype %s" % (getattr(val, "dtype", type(val).__name__))
    if not keep_in:
        return "no float32 input"
    del g.input[:]
    g.input.extend(keep_in)
    return model, keep_vals, list(outputs), conv is not None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (testdata/conformance)")
    ap.add_argument("--doc", default="docs/OPERATORS.md", help="supported operators (generated)")
    ap.add_argument("--max-bytes", type=int, default=192 << 10, help="largest case kept")
    ap.add_argument("--onnx-data", help="also onnx/onnx's onnx/backend/test/data (a checkout of onnx/onnx): "
                    "pytorch-converted, pytorch-operator and light cases")
    ap.add_argument("--onnx-data-rev", default="", help="the onnx/onnx commit of --onnx-data, for the manifest")
    args = ap.parse_args()
    ops = supported_ops(args.doc)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    kept, excluded, converted, total = [], {}, [], 0
    cases = collect()
    if args.onnx_data:
        cases += collect_data(args.onnx_data)
    for kind, case in cases:
        used = graph_ops(case.model.graph)
        if not used <= ops:
            continue
        r = convert(case)
        if isinstance(r, str):
            excluded[case.name] = r
            continue
        model, ins, outs, f32 = r
        blobs = {"model.onnx": model.SerializeToString()}
        if getattr(case, "arange", False):
            # The test feeds arange(n)/n itself: light models' inputs are
            # images, too large to store.
            blobs["input_arange"] = b""
            ins = []
        for i, a in enumerate(ins):
            blobs["input_%d.pb" % i] = numpy_helper.from_array(a).SerializeToString()
        for i, (a, vi) in enumerate(zip(outs, model.graph.output)):
            blobs["output_%d.pb" % i] = numpy_helper.from_array(np.asarray(a), vi.name).SerializeToString()
        size = sum(len(b) for b in blobs.values())
        if size > (args.max_bytes if kind != "light" else 2 * args.max_bytes):
            excluded[case.name] = "%d bytes, over --max-bytes %d" % (size, args.max_bytes)
            continue
        d = os.path.join(args.out, kind, case.name)
        os.makedirs(d)
        for name, b in blobs.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(b)
        kept.append(kind + "/" + case.name)
        if f32:
            converted.append(case.name)
        total += size
    manifest = {
        "onnx": onnx.__version__,
        "generator": "testdata/gen/make_conformance.py",
        "operators": sorted(ops),
        "onnx_data": "onnx/onnx@" + args.onnx_data_rev if args.onnx_data else None,
        "cases": kept,
        "excluded": dict(sorted(excluded.items())),
        "float64_as_float32": converted,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print("%d cases kept (%d bytes), %d excluded" % (len(kept), total, len(excluded)), file=sys.stderr)


if __name__ == "__main__":
    main()
