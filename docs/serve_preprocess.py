#!/usr/bin/env python3
"""Preprocesses images for a model dpfinetune trained, as dpfinetune did:
the input size from the model, the resize, normalisation and channel count
train recorded in its metadata (dpfinetune.resize, dpfinetune.norm), with
PIL and torchvision — the transform to put in front of the model when
serving it with onnxruntime or PyTorch. Writes the batch as a .npy file
(N, C, H, W) float32 and prints the class names train recorded.

    python3 docs/serve_preprocess.py tuned.onnx out.npy image.jpg [image.png ...]

See docs/SERVING.md.
"""
import json
import sys

import numpy as np
import onnx
import torch
import torchvision.transforms as T
from PIL import Image


def transform(model):
    meta = {p.key: p.value for p in model.metadata_props}
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    channels, size = dims[1], dims[2:]
    resize = meta.get("dpfinetune.resize", "stretch")
    if resize.startswith("crop"):
        # The shorter side to S (default 8/7 of the input's longer side,
        # 256 for 224), then the centre: torchvision's Resize + CenterCrop.
        short = int(resize.split("=")[1]) if "=" in resize else round(max(size) * 8 / 7)
        steps = [T.Resize(short), T.CenterCrop(size)]
    else:
        steps = [T.Resize(size)]  # each axis to the input's
    if "dpfinetune.norm" not in meta:
        raise SystemExit("serve_preprocess: the model has no dpfinetune.norm in its metadata: it was not written by dpfinetune train")
    steps.append(T.ToTensor())  # [0, 1]
    if meta["dpfinetune.norm"] != "none":
        mean, std = ([float(v) for v in s.split(",")] for s in meta["dpfinetune.norm"].split("/"))
        if channels == 1 and len(mean) == 3:
            # An RGB normalisation for a gray model: weighted like the luma.
            w = (0.299, 0.587, 0.114)
            mean, std = [sum(a * b for a, b in zip(w, mean))], [sum(a * b for a, b in zip(w, std))]
        steps.append(T.Normalize(mean, std))
    mode = "L" if channels == 1 else "RGB"
    return T.Compose([lambda im: im.convert(mode)] + steps), json.loads(meta.get("dpfinetune.classes", "[]"))


def main():
    model = onnx.load(sys.argv[1], load_external_data=False)
    tf, classes = transform(model)
    x = torch.stack([tf(Image.open(p)) for p in sys.argv[3:]])
    np.save(sys.argv[2], x.numpy().astype(np.float32))
    print(json.dumps(classes))


if __name__ == "__main__":
    main()
