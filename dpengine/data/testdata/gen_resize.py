#!/usr/bin/env python3
"""Writes resize.json, the golden values of TestResizeGolden: PyTorch's
resize of two uint8 patterns as float tensors, with torchvision's
semantics — F.interpolate(mode="bilinear", align_corners=False,
antialias=True) (torchvision >= 0.17's Resize default; antialiasing
changes only the axes that shrink) to (h, w) for "stretch", and for
"crop" Resize(short) — the shorter side to short, the longer to
int(short * long / short_side) — then CenterCrop(h, w) with
torchvision's offsets int(round((size - crop) / 2)).

    /usr/bin/python3 dpengine/data/testdata/gen_resize.py > dpengine/data/testdata/resize.json
"""
import json

import torch
import torch.nn.functional as F


def pattern(h, w, a, b, c):
    return [[(i * i * a + j * j * b + i * j * c) % 256 for j in range(w)] for i in range(h)]


def resize(src, h, w):
    x = torch.tensor(src, dtype=torch.float64)[None, None]
    return F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False, antialias=True)[0, 0]


def case(name, src, mode, h, w, short=0):
    sh, sw = len(src), len(src[0])
    if mode == "stretch":
        y = resize(src, h, w)
    else:
        if sh <= sw:
            rh, rw = short, int(short * sw / sh)
        else:
            rh, rw = int(short * sh / sw), short
        r = resize(src, rh, rw)
        top, left = int(round((rh - h) / 2.0)), int(round((rw - w) / 2.0))
        y = r[top:top + h, left:left + w]
    return {"name": name, "src": src, "mode": mode, "short": short, "h": h, "w": w,
            "want": [round(float(v), 5) for v in y.flatten()]}


small = pattern(5, 7, 13, 7, 5)
big = pattern(37, 50, 3, 11, 7)
cases = [
    case("shrink both", small, "stretch", 3, 4),
    case("grow rows, shrink columns", small, "stretch", 8, 3),
    case("grow both", small, "stretch", 8, 11),
    case("same size", small, "stretch", 5, 7),
    case("shrink 37x50 to 7x9", big, "stretch", 7, 9),
    case("crop, grown", small, "crop", 6, 6, 8),
    case("crop, shrunk", big, "crop", 8, 8, 9),
    case("crop, tall source", [list(r) for r in zip(*big)], "crop", 9, 7, 10),
    case("crop, no resize", small, "crop", 4, 4, 5),
]
print("[\n" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases) + "\n]")
