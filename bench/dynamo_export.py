#!/usr/bin/env python3
"""Exports real vision models with PyTorch's default ONNX exporter (the
dynamo one, torch.export-based: the default of torch.onnx.export from
PyTorch 2.9, opset 18 unless asked) for scripts/gpu-check.sh's part
`dynamo`: do the exports users make today load, run and train in
dpfinetune, and do they compute what PyTorch computes?

    python3 bench/dynamo_export.py --out DIR [--models resnet18,timm:deit_tiny_patch16_224,...]
        [--opsets default,23] [--exporter dynamo|torchscript] [--fixed-batch] [--half] [--jobs N] [--timeout S] [--budget-s S]

Models: torchvision's by name (random weights, weights=None), timm's as
timm:NAME (pretrained=False); the machines have no network. Tensors the
initialisers leave all zero (ViT-B/16's head, so its logits) and
BatchNorm's running statistics get small random values too, so that the
logits compared mean something. A model the installed torchvision or timm
lacks is skipped, and said so. Each model is
exported in its own process (--jobs at a time; --timeout seconds for all
its opsets, then killed), eval mode, from an input of batch 2, with the
batch axis dynamic where the exporter takes it (dynamic_shapes; else
fixed at 2, and the line says which; --fixed-batch fixes it on purpose,
as an export without dynamic_axes or dynamic_shapes does; --half exports
model.half() from the GPU, as users who deploy in float16 do). Opsets: "default" passes no
opset_version (the exporter's own: 18 for dynamo), a number passes it
(23 turns scaled_dot_product_attention into the Attention operator).

Per model DIR/STEM-x.npy (two random samples of the model's input, the
export's example), DIR/STEM-y.npy (labels for them) and
DIR/STEM-logits.npy (PyTorch's float32 output for them, on the CPU); per
export DIR/STEM-oOPSET.onnx (and its .data beside it where the exporter
writes the weights apart) and DIR/STEM-oOPSET.nodata.onnx (the same graph
without the large weights' bytes, strip_weights: small, to read the graph
later and to run it with those filled in)
and one JSON line on stdout:

    {model, stem, order, opset_requested, opset, exporter, capture, batch,
     dynamic_error, ir_version, producer, ops, functions, function_ops,
     external_data, external_files, onnx, x, y, logits, input, params,
     randomized, torch, onnxscript, seconds, error}

opset is read back from the file's opset_import; ops is the sorted set of
the graph's operator types ("Op" in the default domain, "domain.Op"
elsewhere, CheckOps' spelling); functions counts model-local functions
(function_ops: their operators); capture is how the exporter got the
graph where it says (torch.export strict or not, or its fallbacks). Every
export's failure is its line's error, never the end of the run. Without
the dynamo exporter (PyTorch before 2.5, or no onnxscript) one line per
model says "skipped" and why, and the exit status is 0.

--exporter torchscript (dynamo=False, opset 17 for "default") exists for
the dry run on machines with an old PyTorch: the same files and lines, so
that the checks behind them run end to end anywhere.
"""
import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
import zlib

TORCHVISION = ["resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny",
               "regnet_y_400mf", "densenet121", "vit_b_16", "swin_t", "maxvit_t"]
TIMM = ["deit_tiny_patch16_224", "beit_base_patch16_224", "crossvit_tiny_240", "convnext_atto",
        "efficientvit_b0", "efficientvit_m0"]
DEFAULT_MODELS = ",".join(TORCHVISION + ["timm:" + n for n in TIMM])


class ExportFailed(Exception):
    """Both tries of an export failed; the message says how."""


def first_line(e, n=400):
    """The exception's first line; with its innermost cause's where it has
    one (the dynamo exporter's own first line names only the failed step)."""
    if isinstance(e, ExportFailed):
        return str(e)[:n]
    def one(x):
        s = str(x).strip()
        return "%s: %s" % (type(x).__name__, s.splitlines()[0] if s else "")
    def under(x):
        return x.__cause__ or (None if x.__suppress_context__ else x.__context__)
    inner, seen = e, set()
    while id(inner) not in seen and under(inner) is not None:
        seen.add(id(inner))
        inner = under(inner)
    s = one(e)
    if inner is not e:
        s = s[:200] + " | cause: " + one(inner)
    return s[:n]


def stem_of(model):
    return model.replace(":", "-").replace("/", "-")


def opset_tag(opset):
    return "default" if opset is None else "o%d" % opset


def parse_opsets(s):
    out = []
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        out.append(None if part == "default" else int(part))
    return out


def torch_version():
    import torch
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def dynamo_missing():
    """Why this Python cannot run the dynamo exporter, or None."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        return "no torch: %s" % e
    import torch
    if torch_version() < (2, 5):
        return "torch %s has no dynamo ONNX exporter (2.5 on; the default from 2.9)" % torch.__version__
    try:
        import onnxscript  # noqa: F401
    except ImportError as e:
        return "onnxscript missing (the dynamo exporter needs it): %s" % e
    return None


def build(model):
    """(module, input size C,H,W) for torchvision's NAME or timm:NAME, random weights."""
    if model.startswith("timm:"):
        try:
            import timm
        except ImportError as e:
            raise LookupError("timm not installed: %s" % e)
        name = model[len("timm:"):]
        if name not in timm.list_models():
            raise LookupError("timm %s has no %s" % (timm.__version__, name))
        m = timm.create_model(name, pretrained=False)
        size = tuple(m.default_cfg.get("input_size", (3, 224, 224)))
        return m, size
    import torchvision
    fn = getattr(torchvision.models, model, None)
    if fn is None or not callable(fn):
        raise LookupError("torchvision %s has no %s" % (torchvision.__version__, model))
    return fn(weights=None), (3, 224, 224)


def enliven(torch, model, seed):
    """The initialisers of torchvision and timm leave some tensors zero
    (ViT-B/16's head: its logits all zero, whatever the graph computes) and
    BatchNorm's running statistics at 0 and 1 (the identity): those get
    small random values, so that the logits compared say something."""
    g = torch.Generator().manual_seed(seed)
    zeros = bns = 0
    with torch.no_grad():
        for prm in model.parameters():
            if prm.is_floating_point() and prm.numel() and not bool(prm.any()):
                prm.normal_(0.0, 0.02, generator=g)
                zeros += 1
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.normal_(0.0, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
                bns += 1
    return {"zero_tensors": zeros, "batchnorms": bns}


def read_back(path):
    """What the written file says: opset, IR, operators, functions, external data."""
    info = {}
    try:
        import onnx
    except ImportError as e:
        info["readback_error"] = "no onnx: %s" % e
        return info, None
    m = onnx.load(path, load_external_data=False)
    info["ir_version"] = m.ir_version
    info["producer"] = (m.producer_name + " " + m.producer_version).strip()
    info["opset"] = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    info["opset_imports"] = {(o.domain or "ai.onnx"): o.version for o in m.opset_import}
    if len(m.graph.input):
        dims = m.graph.input[0].type.tensor_type.shape.dim
        info["input_shape"] = [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in dims]

    def name(n):
        return n.op_type if n.domain in ("", "ai.onnx") else n.domain + "." + n.op_type

    def walk(nodes, acc):
        for n in nodes:
            acc.add(name(n))
            for a in n.attribute:  # If/Loop/Scan bodies
                if a.g is not None and len(a.g.node):
                    walk(a.g.node, acc)
                for g in a.graphs:
                    walk(g.node, acc)
        return acc

    info["ops"] = sorted(walk(m.graph.node, set()))
    info["functions"] = len(m.functions)
    fops = set()
    for f in m.functions:
        walk(f.node, fops)
    info["function_ops"] = sorted(fops)
    files = set()
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for kv in t.external_data:
                if kv.key == "location":
                    files.add(kv.value)
    info["external_data"] = bool(files)
    info["external_files"] = sorted(files)
    return info, m


# Initializers strip_weights keeps: every non-floating one (shapes, axes,
# slice bounds, ScatterND's index tuples: what a graph's constant folding
# reads) and floating ones up to this many elements (biases, norms'
# affines, scalars), so that the stripped graph runs here with the large
# weights filled in at random.
KEEP_FLOATS = 4096


def strip_weights(m, path):
    """The graph without its weights' bytes: every floating initializer
    larger than KEEP_FLOATS elements emptied, its dims kept."""
    import onnx
    floating = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                onnx.TensorProto.DOUBLE}
    for t in m.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if t.data_type not in floating or n <= KEEP_FLOATS:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                onnx.external_data_helper.load_external_data_for_tensor(t, os.path.dirname(path))
                del t.external_data[:]
                t.data_location = onnx.TensorProto.DEFAULT
            continue
        t.ClearField("raw_data")
        for f in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
            t.ClearField(f)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
        t.doc_string = "weights stripped by bench/dynamo_export.py"
    onnx.save(m, path)


CAPTURE = re.compile(r"Obtain model graph for .*? with (.+?)\.\.\.\s*✅")


def export_one(torch, model, x, path, opset, exporter, fixed_batch=False):
    """Exports model at opset (None: the exporter's default) to path; returns
    the fields the line adds (batch, capture, error of a dynamic attempt).
    fixed_batch: no dynamic axes (the example's batch fixed), as users who
    pass neither dynamic_axes nor dynamic_shapes export."""
    import inspect as pyinspect
    names = dict(input_names=["input"], output_names=["logits"])
    if exporter == "torchscript":
        kw = dict(names, opset_version=17 if opset is None else opset)
        if not fixed_batch:
            kw["dynamic_axes"] = {"input": {0: "batch"}, "logits": {0: "batch"}}
        if "dynamo" in pyinspect.signature(torch.onnx.export).parameters:
            kw["dynamo"] = False
        torch.onnx.export(model, (x,), path, **kw)
        return {"batch": "fixed %d (asked)" % x.shape[0] if fixed_batch else "dynamic"}
    import torch.export  # noqa: F401 — Dim
    kw = dict(names, dynamo=True)
    if opset is not None:
        kw["opset_version"] = opset
    out = {}
    log = io.StringIO()
    if fixed_batch:
        with contextlib.redirect_stdout(log):
            torch.onnx.export(model, (x,), path, **kw)
        sys.stderr.write(log.getvalue())
        out["batch"] = "fixed %d (asked)" % x.shape[0]
        caps = CAPTURE.findall(log.getvalue())
        if caps:
            out["capture"] = caps[-1].strip("`")
        return out
    try:
        with contextlib.redirect_stdout(log):
            torch.onnx.export(model, (x,), path, dynamic_shapes=({0: torch.export.Dim("batch")},), **kw)
        out["batch"] = "dynamic"
    except Exception as e:  # noqa: BLE001 — the batch fixed at the example's, then
        sys.stderr.write(log.getvalue())
        traceback.print_exc(file=sys.stderr)
        sys.stderr.write("%s: dynamic batch failed (%s); exporting with batch %d fixed\n" % (path, first_line(e), x.shape[0]))
        out["dynamic_error"] = first_line(e)
        for f in (path, path + ".data"):
            if os.path.exists(f):
                os.remove(f)
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log):
                torch.onnx.export(model, (x,), path, **kw)
        except Exception as e2:  # noqa: BLE001
            sys.stderr.write(log.getvalue())
            traceback.print_exc(file=sys.stderr)
            fixed = first_line(e2, 300)
            if fixed == out["dynamic_error"][:300]:
                raise ExportFailed(fixed + " (the batch dynamic or fixed)") from None
            raise ExportFailed("%s (with the batch dynamic: %s)" % (fixed, out["dynamic_error"][:300])) from None
        out["batch"] = "fixed %d" % x.shape[0]
    sys.stderr.write(log.getvalue())
    caps = CAPTURE.findall(log.getvalue())
    if caps:
        out["capture"] = caps[-1].strip("`")
    return out


def worker(args):
    """One model, all opsets, in this process: its lines on the original stdout."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the exporters' chatter (Python's and C++'s) to stderr
    sys.stdout = sys.stderr

    def emit(row):
        out.write(json.dumps(row) + "\n")
        out.flush()

    import numpy as np
    import torch
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model_name = args.models
    stem = stem_of(model_name)
    opsets = parse_opsets(args.opsets)
    base = {"model": model_name, "stem": stem, "exporter": args.exporter, "torch": torch.__version__}
    try:
        import onnxscript
        base["onnxscript"] = getattr(onnxscript, "__version__", "?")
    except ImportError:
        pass
    try:
        model, size = build(model_name)
    except LookupError as e:
        emit(dict(base, skipped=str(e)))
        return
    except Exception as e:  # noqa: BLE001
        for o in opsets:
            emit(dict(base, opset_requested=o, error="build: " + first_line(e)))
        return
    model.eval()
    seed = zlib.crc32(model_name.encode())
    torch.manual_seed(seed)
    base["randomized"] = enliven(torch, model, seed)
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((2,) + tuple(size)).astype(np.float32)
    classes = getattr(model, "num_classes", None) or 1000
    ys = rng.integers(0, 10, size=2).astype(np.int64)  # labels for a 10-class head
    if args.half:
        # model.half() exported from the GPU (PyTorch has no float16
        # convolution on the CPU); the reference is the same model in
        # float32 with its weights and input rounded through float16: what
        # dpfinetune, which widens a half-precision model, computes.
        if not torch.cuda.is_available():
            emit(dict(base, skipped="--half needs CUDA (no float16 convolution on the CPU)"))
            return
        model = model.half().float()
        xs = xs.astype(np.float16).astype(np.float32)
        base["dtype"] = "float16"
    x = torch.from_numpy(xs)
    with torch.no_grad():
        logits = model(x)
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    if args.half:
        model, x = model.half().cuda(), x.half().cuda()
    files = {k: os.path.join(args.out, stem + "-" + k + ".npy") for k in ("x", "y", "logits")}
    np.save(files["x"], xs)
    np.save(files["y"], ys)
    np.save(files["logits"], logits.detach().float().numpy())
    base.update(files, input=list(size), classes=int(classes), params=sum(p.numel() for p in model.parameters()))
    for o in opsets:
        row = dict(base, opset_requested=o)
        path = os.path.join(args.out, stem + "-" + opset_tag(o) + ".onnx")
        for f in (path, path + ".data", path[:-5] + ".nodata.onnx"):
            if os.path.exists(f):
                os.remove(f)
        t0 = time.time()
        try:
            row.update(export_one(torch, model, x, path, o, args.exporter, args.fixed_batch))
            row["seconds"] = round(time.time() - t0, 2)
            row["onnx"] = path
            info, m = read_back(path)
            row.update(info)
            b = (info.get("input_shape") or [None])[0]
            if isinstance(b, int):  # the file's batch axis, whatever the exporter was asked
                row["batch"] = "fixed %d" % b
            if m is not None:
                try:
                    strip_weights(m, path[:-5] + ".nodata.onnx")
                except Exception as e:  # noqa: BLE001
                    row["nodata_error"] = first_line(e)
            # A .data file the loader did not name (none expected).
            if os.path.exists(path + ".data") and not row.get("external_data"):
                row["stray_data_file"] = path + ".data"
        except Exception as e:  # noqa: BLE001 — one export's failure is its row
            row["seconds"] = round(time.time() - t0, 2)
            row["error"] = first_line(e)
            sys.stderr.write("%s opset %s:\n%s\n" % (model_name, o, traceback.format_exc()))
        emit(row)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated: torchvision names, timm:NAME")
    ap.add_argument("--opsets", default="default,23", help="comma-separated: default (no opset_version) or numbers")
    ap.add_argument("--exporter", choices=["dynamo", "torchscript"], default="dynamo")
    ap.add_argument("--fixed-batch", action="store_true",
                    help="export without dynamic axes (the example's batch of 2 fixed), as users often do")
    ap.add_argument("--half", action="store_true",
                    help="export model.half() from the GPU; the logits are the float32 model's with float16-rounded weights and input")
    ap.add_argument("--jobs", type=int, default=max(1, min(6, (os.cpu_count() or 2) // 2)),
                    help="models exported at once, each in its own process")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per process (0: cores / jobs)")
    ap.add_argument("--timeout", type=float, default=150, help="seconds for one model's exports, then killed")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="seconds after which models not started are skipped and running ones killed (0: none)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    if args.worker:
        worker(args)
        return
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    opsets = parse_opsets(args.opsets)
    lock = threading.Lock()

    def emit(row):
        with lock:
            print(json.dumps(row))
            sys.stdout.flush()

    if args.exporter == "dynamo":
        why = dynamo_missing()
        if why:
            try:
                import torch
                tv = torch.__version__
            except ImportError:
                tv = None
            for i, m in enumerate(models):
                emit({"model": m, "stem": stem_of(m), "exporter": "dynamo", "torch": tv, "order": [i, 0], "skipped": why})
            return
    # The heavy exports first, so that they overlap the light ones (the
    # lines keep "order": the place of the model in --models, of the opset
    # in --opsets, for tables).
    heavy = ("maxvit_t", "swin_t", "timm:beit_base_patch16_224", "vit_b_16", "densenet121",
             "convnext_tiny", "timm:efficientvit_m0", "timm:crossvit_tiny_240", "resnet50")
    schedule = sorted(models, key=lambda m: (heavy.index(m) if m in heavy else len(heavy), models.index(m)))
    jobs = max(1, args.jobs)
    threads = args.threads or max(1, (os.cpu_count() or 2) // jobs)
    start = time.time()

    def run(model):
        order = models.index(model)
        if args.budget_s > 0 and time.time() - start >= args.budget_s:
            emit({"model": model, "stem": stem_of(model), "exporter": args.exporter, "order": [order, 0],
                  "skipped": "budget spent (--budget-s)"})
            return
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--out", args.out, "--models", model,
               "--opsets", args.opsets, "--exporter", args.exporter, "--threads", str(threads)]
        if args.fixed_batch:
            cmd.append("--fixed-batch")
        if args.half:
            cmd.append("--half")
        # In DIR: whatever an exporter writes beside (a failure's report) stays there.
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=args.out)
        killed = []

        def kill():
            killed.append(True)
            p.kill()

        limit = args.timeout
        if args.budget_s > 0:  # nor past the budget
            limit = max(1.0, min(limit, args.budget_s - (time.time() - start)))
        timer = threading.Timer(limit, kill)
        timer.start()
        seen, skipped = set(), False
        for line in p.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            skipped = skipped or "skipped" in row
            o = row.get("opset_requested", "?")
            seen.add(o)
            row["order"] = [order, opsets.index(o) if o in opsets else 0]
            emit(row)
        rc = p.wait()
        timer.cancel()
        if skipped:
            return
        for o in opsets:
            if o not in seen:
                why = "timeout: the model's exports ran past %.0f s (killed)" % limit if killed else "the export process ended with status %d" % rc
                emit({"model": model, "stem": stem_of(model), "exporter": args.exporter, "opset_requested": o,
                      "order": [order, opsets.index(o)], "error": why})

    pool = []
    sem = threading.Semaphore(jobs)

    def guarded(model):
        try:
            run(model)
        finally:
            sem.release()

    for m in schedule:
        sem.acquire()
        t = threading.Thread(target=guarded, args=(m,))
        t.start()
        pool.append(t)
    for t in pool:
        t.join()


if __name__ == "__main__":
    main()
