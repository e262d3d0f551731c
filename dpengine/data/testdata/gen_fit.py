#!/usr/bin/env python3
"""Writes fit.json, the golden values of TestFitGolden: torchvision 0.14's
Resize (and CenterCrop) of PIL images — PIL 9.4's bilinear resample of
8-bit images, the transform of a PIL-based pipeline — for the sizes and
resizes a fit meets. The sources are patterns the test computes too:
value (x·a + y·b + x·y·c + channel·d) mod 256.

    /usr/bin/python3 dpengine/data/testdata/gen_fit.py > dpengine/data/testdata/fit.json
"""
import json

import torchvision.transforms.functional as TF
from PIL import Image


def pattern(w, h, channels, a, b, c, d):
    mode = "L" if channels == 1 else "RGB"
    im = Image.new(mode, (w, h))
    px = []
    for y in range(h):
        for x in range(w):
            v = [(x * a + y * b + x * y * c + k * d) % 256 for k in range(channels)]
            px.append(v[0] if channels == 1 else tuple(v))
    im.putdata(px)
    return im


def case(name, w, h, channels, coef, mode, out_h, out_w, short=0, gray=False):
    im = pattern(w, h, channels, *coef)
    if gray:
        im = im.convert("L")  # a gray model's pipeline: gray first, then resized
    if mode == "stretch":
        r = TF.resize(im, [out_h, out_w])
    else:
        r = TF.center_crop(TF.resize(im, short), [out_h, out_w])
    bands = [list(b.getdata()) for b in r.split()]
    return {"name": name, "w": w, "h": h, "channels": channels, "gray": gray, "coef": coef, "mode": mode, "short": short,
            "out_h": out_h, "out_w": out_w, "want": [v for b in bands for v in b]}


cases = [
    case("shrink both, RGB", 60, 45, 3, [37, 11, 5, 90], "stretch", 24, 32),
    case("shrink by 5.3 and 4.4, gray", 170, 106, 1, [7, 13, 3, 0], "stretch", 20, 32),
    case("shrink rows, grow columns", 20, 70, 3, [29, 3, 7, 60], "stretch", 24, 32),
    case("thin, grow rows", 900, 1, 3, [3, 0, 0, 77], "stretch", 24, 32),
    case("crop, default shorter side", 60, 45, 3, [37, 11, 5, 90], "crop", 24, 32, 37),
    case("crop, tall source", 33, 90, 1, [41, 17, 9, 0], "crop", 24, 24, 40),
    case("crop, shorter side kept", 50, 40, 3, [13, 5, 11, 30], "crop", 32, 32, 40),
    case("crop of the input's size", 32, 24, 3, [19, 23, 1, 50], "crop", 24, 32, 37),
    case("RGB made gray, then cropped", 60, 45, 3, [37, 11, 5, 90], "crop", 28, 28, 32, gray=True),
]
print("[\n" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases) + "\n]")
