#!/usr/bin/env python3
"""Writes resized_crop.json, the golden values of TestResizedCropGolden:
torchvision's resized_crop of uint8 patterns as float tensors — the box
(top, left, height, width) cropped, then resized to (h, w) by
F.interpolate(mode="bilinear", align_corners=False, antialias=True), as
RandomResizedCrop does with antialias=True (torchvision >= 0.17's
default; it changes only the axes that shrink) — then flipped where flip
is set (RandomHorizontalFlip after it).

    /usr/bin/python3 dpengine/data/testdata/gen_resized_crop.py > dpengine/data/testdata/resized_crop.json
"""
import json

import torch
import torch.nn.functional as F


def pattern(h, w, a, b, c):
    return [[(i * i * a + j * j * b + i * j * c) % 256 for j in range(w)] for i in range(h)]


def case(name, src, top, left, bh, bw, h, w, flip=False):
    x = torch.tensor(src, dtype=torch.float64)[None, None, top:top + bh, left:left + bw]
    y = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False, antialias=True)[0, 0]
    if flip:
        y = torch.flip(y, dims=[1])
    return {"name": name, "src": src, "top": top, "left": left, "bh": bh, "bw": bw, "h": h, "w": w, "flip": flip,
            "want": [round(float(v), 5) for v in y.flatten()]}


small = pattern(9, 12, 13, 7, 5)
big = pattern(41, 50, 3, 11, 7)
cases = [
    case("box grown to the input", small, 2, 3, 4, 5, 8, 8),
    case("box grown, flipped", small, 1, 0, 5, 7, 8, 10, flip=True),
    case("box shrunk to the input", big, 3, 5, 30, 36, 8, 9),
    case("rows grown, columns shrunk", big, 10, 2, 6, 40, 12, 10, flip=True),
    case("the whole image", small, 0, 0, 9, 12, 9, 12),
    case("one pixel", small, 4, 6, 1, 1, 3, 3),
]
print("[\n" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases) + "\n]")
