#!/usr/bin/env python3
"""Sets dpfinetune's convolutions by shape beside PyTorch's, per step.

    bench/conv_profile.py --ours profile.txt --modes nondp,bk --steps 2 --torch shapes.jsonl [--mode nondp]

profile.txt is the standard error of `DPFINETUNE_CUDA_PROFILE=1
dpfinetune bench --device cuda --modes M1,M2,… --steps S`: one profile a
mode (bench opens the device afresh for each; an empty one, the device it
opened first, is skipped), each with its table "convolutions by shape"
(runtime/cuda/profile.go: the operation, then the shape, its calls and
milliseconds over the S timed steps). shapes.jsonl is
bench/torch_conv_shapes.py's output for the same model and batch. Prints a
Markdown table for --mode's profile: per shape, the layers that have it,
PyTorch's forward and backward (input and weight gradients) milliseconds a
step (a shape's time alone times its layers), ours a step by operation —
Conv (forward), ConvBackward (the input gradient, and in nondp the weight
gradient with it), ConvWeightGrad (bk's clipped sum), and the per-sample
work (ConvSampleWeightGrads, ConvTapGrams) — and ours ÷ PyTorch's for the
forward and for the backward (input and weight gradients: ConvBackward
and ConvWeightGrad beside dgrad + wgrad), the shapes with most of our time
first, then the totals.
"""
import argparse
import json
import re

OPS = ["Conv", "ConvBackward", "ConvWeightGrad", "ConvSampleWeightGrads", "ConvTapGrams"]
ROW = re.compile(r"^  (\w+) (n=\d+ .*?g=\d+)(?: samples=\d+)?\s+(\d+) calls\s+([0-9.]+) ms")


def profiles(text):
    """The non-empty profiles in text, each a {(op, key): ms} of its
    table of convolutions by shape ({} where it had none)."""
    out, cur, in_convs, nonempty = [], None, False, False
    for line in text.splitlines():
        if line.startswith("cuda profile: operations, "):
            if cur is not None and nonempty:
                out.append(cur)
            cur, in_convs = {}, False
            nonempty = not line.startswith("cuda profile: operations, 0.0 ms")
            continue
        if line.startswith("cuda profile: "):
            in_convs = line.startswith("cuda profile: convolutions by shape, ")
            continue
        if in_convs and cur is not None:
            m = ROW.match(line)
            if m:
                k = (m.group(1), m.group(2))
                cur[k] = cur.get(k, 0.0) + float(m.group(4))
    if cur is not None and nonempty:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--modes", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--mode", default="nondp")
    a = ap.parse_args()
    modes = a.modes.split(",")
    profs = profiles(open(a.ours).read())
    if len(profs) != len(modes):
        raise SystemExit("conv_profile: %d profiles in %s for the modes %s" % (len(profs), a.ours, a.modes))
    ours = profs[modes.index(a.mode)]
    theirs = {}
    for line in open(a.torch):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            theirs[r["key"]] = r
    keys = sorted({k for _, k in ours} | set(theirs), key=lambda k: -sum(ours.get((op, k), 0) for op in OPS))
    print("| shape | layers | PyTorch fwd ms | PyTorch bwd ms (dgrad + wgrad) | " + " | ".join("ours %s ms" % op for op in OPS) + " | fwd × | bwd × |")
    print("|---|---|---|---|" + "---|" * len(OPS) + "---|---|")
    tot = {"tf": 0.0, "tb": 0.0, "of": 0.0, "ob": 0.0}
    ops_tot = {op: 0.0 for op in OPS}
    for k in keys:
        t = theirs.get(k)
        o = {op: ours.get((op, k), 0.0) / a.steps for op in OPS}
        tf = tb = None
        if t:
            tf = t["fwd_ms"] * t["layers"]
            tb = (t["dgrad_ms"] + t["wgrad_ms"]) * t["layers"]
        of, ob = o["Conv"], o["ConvBackward"] + o["ConvWeightGrad"]
        ratio = lambda x, y: "%.2f" % (x / y) if y and x else "–"
        fmt = lambda v: "%.3f" % v if v else "–"
        print("| %s | %s | %s | %s | %s | %s | %s |" % (k, t["layers"] if t else "?", fmt(tf), fmt(tb),
                                                      " | ".join(fmt(o[op]) for op in OPS), ratio(of, tf), ratio(ob, tb)))
        if t:
            tot["tf"] += tf
            tot["tb"] += tb
            tot["of"] += of
            tot["ob"] += ob
            for op in OPS:
                ops_tot[op] += o[op]
    print("| total (shapes on both sides) | | %.3f | %.3f | %s | %s | %s |" % (
        tot["tf"], tot["tb"], " | ".join("%.3f" % ops_tot[op] for op in OPS),
        "%.2f" % (tot["of"] / tot["tf"]) if tot["tf"] else "–", "%.2f" % (tot["ob"] / tot["tb"]) if tot["tb"] else "–"))


if __name__ == "__main__":
    main()
