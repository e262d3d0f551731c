#!/usr/bin/env python3
"""Writes formats/, one small image per format and variant a folder reads,
and formats.json: what PIL (Pillow 9.4) decodes from each file, as
torchvision's ImageFolder loads it (Image.open(path).convert("RGB")), and
whether PIL opens it as gray (mode "L" or "1"). TestFormatsGolden decodes
every file and wants the same bytes (lossy WebP included: libwebp's
limited-range conversion and chroma filter), or for JPEG the same within
the inverse DCT's rounding.

    /usr/bin/python3 dpengine/data/testdata/gen_formats.py

run from the repository root.
"""
import json
import os

from PIL import Image

DIR = "dpengine/data/testdata/formats"
W, H = 7, 5


def rgb():
    im = Image.new("RGB", (W, H))
    im.putdata([((x * 37 + y * 11) % 256, (x * x * 5 + y * 40) % 256, (3 * x * y + 17) % 256) for y in range(H) for x in range(W)])
    return im


def smooth(w, h):
    im = Image.new("RGB", (w, h))
    im.putdata([(8 * x + 20, 6 * y + 40, 4 * (x + y) + 60) for y in range(h) for x in range(w)])
    return im


def gray():
    im = Image.new("L", (W, H))
    im.putdata([(x * 29 + y * 51) % 256 for y in range(H) for x in range(W)])
    return im


def rgba():
    im = rgb().convert("RGBA")
    im.putalpha(Image.new("L", (W, H), 255))
    a = im.load()
    a[1, 1] = (200, 100, 50, 128)
    return im


CASES = [
    # name, image, save arguments
    ("rgb.bmp", rgb, {}),
    ("palette.bmp", lambda: rgb().quantize(16), {}),
    ("gray.bmp", gray, {}),
    ("rgb.tif", rgb, {}),
    ("lzw.tiff", rgb, {"compression": "tiff_lzw"}),
    ("deflate.tif", rgb, {"compression": "tiff_adobe_deflate"}),
    ("gray.tif", gray, {}),
    ("lossless.webp", rgb, {"lossless": True}),
    ("alpha.webp", rgba, {"lossless": True}),
    ("lossy.webp", lambda: smooth(32, 24), {"quality": 95}),
    ("lossy-odd.webp", lambda: rgb().resize((33, 21)), {"quality": 80}),
    ("lossy-alpha.webp", lambda: rgba().resize((17, 11)), {"quality": 90}),
    # Go's inverse DCT is not libjpeg-turbo's: values within ±3 (see
    # TestFormatsGolden); the chroma filter and colour matrix are libjpeg's.
    ("rgb420.jpg", lambda: rgb().resize((33, 21)), {"quality": 90, "subsampling": 2}),
    ("rgb422.jpg", lambda: rgb().resize((33, 21)), {"quality": 90, "subsampling": 1}),
    ("rgb444.jpg", lambda: rgb().resize((33, 21)), {"quality": 90, "subsampling": 0}),
    ("progressive.jpeg", lambda: rgb().resize((25, 19)), {"quality": 85, "progressive": True}),
    ("gray.jpg", gray, {"quality": 90}),
    ("rgb.ppm", rgb, {}),
    ("gray.pgm", gray, {}),
    ("bits.pbm", lambda: gray().point(lambda v: 255 if v > 100 else 0).convert("1"), {}),
]


def main():
    os.makedirs(DIR, exist_ok=True)
    out = []
    for name, make, kw in CASES:
        path = os.path.join(DIR, name)
        make().save(path, **kw)
        im = Image.open(path)
        mode = im.mode
        px = list(im.convert("RGB").getdata())
        out.append({"file": name, "width": im.width, "height": im.height, "gray": mode in ("L", "1"),
                    "rgb": [v for p in px for v in p]})
    with open(os.path.join(os.path.dirname(DIR), "formats.json"), "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(c) for c in out) + "\n]\n")


main()
