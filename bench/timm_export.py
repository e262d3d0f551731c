#!/usr/bin/env python3
"""Exports real timm models to ONNX for scripts/gpu-check.sh (issue 14,
item 5: timm BEiT and CrossViT through `dpfinetune train` on a GPU): the
architecture as timm builds it, random weights (pretrained=False: the GPU
machines have no network), eval mode, opset 17, batch axis dynamic.

    python3 bench/timm_export.py --out DIR [--models beit_base_patch16_224,crossvit_tiny_240]

Writes DIR/<model>.onnx and DIR/<model>-x.npy (two random samples of the
model's input size) with DIR/<model>-y.npy (their labels), and prints one
JSON line per model: {model, onnx, input, params, exporter}, {model,
error}, or {model, skipped} without timm. The TorchScript exporter (dynamo=False) is tried first, as the
repository's fixtures were made with it; PyTorch versions that lack it
fall back to the default exporter, which the line names.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch


def export(model, x, path):
    kw = dict(opset_version=17, input_names=["input"], output_names=["logits"],
              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    try:
        torch.onnx.export(model, (x,), path, dynamo=False, **kw)
        return "torchscript"
    except TypeError:  # a PyTorch without the dynamo argument: TorchScript's
        torch.onnx.export(model, (x,), path, **kw)
        return "torchscript"
    except Exception as first:  # noqa: BLE001 — report, then try the default exporter
        try:
            torch.onnx.export(model, (x,), path, **kw)
            return "default (TorchScript failed: %s)" % str(first).splitlines()[0][:200]
        except Exception:  # noqa: BLE001
            raise first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="beit_base_patch16_224,crossvit_tiny_240")
    args = ap.parse_args()
    try:
        import timm
    except ImportError as e:
        for name in args.models.split(","):
            print(json.dumps({"model": name, "skipped": "timm not installed: %s" % e}))
        return
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    for name in args.models.split(","):
        try:
            model = timm.create_model(name, pretrained=False).eval()
            size = model.default_cfg.get("input_size", (3, 224, 224))
            x = torch.randn(1, *size)
            path = os.path.join(args.out, name + ".onnx")
            how = export(model, x, path)
            xs = rng.standard_normal((2, *size)).astype(np.float32)
            ys = rng.integers(0, model.num_classes, size=2).astype(np.int64)
            np.save(os.path.join(args.out, name + "-x.npy"), xs)
            np.save(os.path.join(args.out, name + "-y.npy"), ys)
            print(json.dumps({"model": name, "onnx": path, "input": list(size),
                              "params": sum(p.numel() for p in model.parameters()),
                              "timm": timm.__version__, "torch": torch.__version__, "exporter": how}))
        except Exception as e:  # noqa: BLE001 — one model's failure is a result
            print(json.dumps({"model": name, "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
