#!/usr/bin/python3
"""Writes a long-tailed Fashion-MNIST as IDX files (docs/RESULTS.md, "Class
weights"): of the training images, classes 0-4 (T-shirt, trouser,
pullover, dress, coat) keep their first KEEP (default 600, a tenth) in file
order and classes 5-9 all 6000; the test images are all 10000, balanced.

With --split, also DST-val and DST-test from the test images, for a
private search (bench/classweight_tune.sh): DST-val's training files hold
the first half of each class's test images in file order, classes 0-4 cut
to a tenth of them (50 each beside 500 each: held-out data as long-tailed
as the training data), and DST-test's test files the other half (500 a
class, balanced), so that the search's scores and the final figure never
share an image.

usage: imbalanced_fmnist.py SRC DST [KEEP] [--split]
"""
import gzip
import os
import struct
import sys

import numpy as np


def read(path, images):
    with gzip.open(path, "rb") as f:
        b = f.read()
    if images:
        n, h, w = struct.unpack(">III", b[4:16])
        return np.frombuffer(b, np.uint8, offset=16).reshape(n, h, w)
    (n,) = struct.unpack(">I", b[4:8])
    return np.frombuffer(b, np.uint8, offset=8)


def write(path, a, images):
    head = struct.pack(">I", 0x803 if images else 0x801) + struct.pack(">I", a.shape[0])
    if images:
        head += struct.pack(">II", a.shape[1], a.shape[2])
    # mtime=0: the same bytes each time.
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(head + a.tobytes())


def main():
    args = [a for a in sys.argv[1:] if a != "--split"]
    src, dst = args[0], args[1]
    keep = int(args[2]) if len(args) > 2 else 600
    os.makedirs(dst, exist_ok=True)
    x = read(os.path.join(src, "train-images-idx3-ubyte.gz"), True)
    y = read(os.path.join(src, "train-labels-idx1-ubyte.gz"), False)
    rows = []
    for c in range(10):
        idx = np.flatnonzero(y == c)
        rows.append(idx[:keep] if c < 5 else idx)
    sel = np.sort(np.concatenate(rows))
    write(os.path.join(dst, "train-images-idx3-ubyte.gz"), x[sel], True)
    write(os.path.join(dst, "train-labels-idx1-ubyte.gz"), y[sel], False)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        with open(os.path.join(src, name), "rb") as f, open(os.path.join(dst, name), "wb") as g:
            g.write(f.read())
    counts = np.bincount(y[sel], minlength=10)
    print("train images per class:", " ".join(str(c) for c in counts), "total", len(sel))
    if "--split" in sys.argv:
        tx = read(os.path.join(src, "t10k-images-idx3-ubyte.gz"), True)
        ty = read(os.path.join(src, "t10k-labels-idx1-ubyte.gz"), False)
        val, test = [], []
        for c in range(10):
            idx = np.flatnonzero(ty == c)
            half = len(idx) // 2
            val.append(idx[:half // 10] if c < 5 else idx[:half])
            test.append(idx[half:])
        val, test = np.sort(np.concatenate(val)), np.sort(np.concatenate(test))
        for name, rows, prefix in (("val", val, "train"), ("test", test, "t10k")):
            d = dst.rstrip("/") + "-" + name
            os.makedirs(d, exist_ok=True)
            write(os.path.join(d, prefix + "-images-idx3-ubyte.gz"), tx[rows], True)
            write(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"), ty[rows], False)
            print(name, "images per class:", " ".join(str(c) for c in np.bincount(ty[rows], minlength=10)), "total", len(rows))


if __name__ == "__main__":
    main()
