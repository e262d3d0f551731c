#!/usr/bin/python3
"""Write a contiguous slice of an IDX (MNIST/Fashion-MNIST) training set as a new
IDX directory, with the test split copied unchanged.

    fmnist_split.py SRC DST START [END]

keeps training examples [START, END) (END defaults to the end). Used by
bench/results_fmnist.sh to build the "private" 50k split (examples 10000..59999)
that is disjoint from the "public" split `idx:SRC:limit=10000` (examples 0..9999).
Needs only numpy and the standard library.
"""
import gzip
import os
import shutil
import struct
import sys

import numpy as np


def open_any(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def find(src, name):
    for p in (os.path.join(src, name + ".gz"), os.path.join(src, name)):
        if os.path.exists(p):
            return p
    raise SystemExit(f"{name}(.gz) not found in {src}")


def read_idx(path):
    with open_any(path) as f:
        buf = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", buf[:4])
    if zero != 0 or dtype != 0x08:
        raise SystemExit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, buf[4:4 + 4 * ndim])
    data = np.frombuffer(buf, dtype=np.uint8, offset=4 + 4 * ndim)
    return data.reshape(dims)


def write_idx(path, arr):
    header = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header)
        f.write(np.ascontiguousarray(arr, dtype=np.uint8).tobytes())


def main():
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    src, dst, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.makedirs(dst, exist_ok=True)
    images = read_idx(find(src, "train-images-idx3-ubyte"))
    labels = read_idx(find(src, "train-labels-idx1-ubyte"))
    end = int(sys.argv[4]) if len(sys.argv) == 5 else len(labels)
    if not (0 <= start < end <= len(labels)) or len(images) != len(labels):
        raise SystemExit(f"bad range [{start}, {end}) for {len(labels)} examples")
    write_idx(os.path.join(dst, "train-images-idx3-ubyte.gz"), images[start:end])
    write_idx(os.path.join(dst, "train-labels-idx1-ubyte.gz"), labels[start:end])
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        p = find(src, name)
        shutil.copyfile(p, os.path.join(dst, os.path.basename(p)))
    counts = np.bincount(labels[start:end], minlength=10)
    print(f"{dst}: train examples [{start}, {end}) = {end - start}, per class {counts.tolist()}")


if __name__ == "__main__":
    main()
