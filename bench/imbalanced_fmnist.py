#!/usr/bin/python3
"""Writes a long-tailed Fashion-MNIST as IDX files (docs/RESULTS.md, "Class
weights"): of the training images, classes 0-4 (T-shirt, trouser,
pullover, dress, coat) keep their first KEEP (default 600, a tenth) in file
order and classes 5-9 all 6000; the test images are all 10000, balanced.

usage: imbalanced_fmnist.py SRC DST [KEEP]
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
    src, dst = sys.argv[1], sys.argv[2]
    keep = int(sys.argv[3]) if len(sys.argv) > 3 else 600
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


if __name__ == "__main__":
    main()
