#!/usr/bin/python3
"""Write the Fashion-MNIST test set's two halves as NumPy archives:
DST/val.npz (test images 0..4999) and DST/report.npz (5000..9999), each
with x_test (N, 28, 28) uint8 and y_test (N,) int64 (the test split a
spec reads by default) — a validation half to calibrate
or choose thresholds on and a half to report on (bench/calibrate_fmnist.sh).

    fmnist_test_halves.py SRC DST
"""
import gzip
import os
import sys

import numpy as np


def read(src, name, offset):
    for p in (os.path.join(src, name + ".gz"), os.path.join(src, name)):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)
    raise SystemExit(f"{name}(.gz) not found in {src}")


src, dst = sys.argv[1], sys.argv[2]
x = read(src, "t10k-images-idx3-ubyte", 16).reshape(-1, 28, 28)
y = read(src, "t10k-labels-idx1-ubyte", 8).astype(np.int64)
os.makedirs(dst, exist_ok=True)
np.savez(os.path.join(dst, "val.npz"), x_test=x[:5000], y_test=y[:5000])
np.savez(os.path.join(dst, "report.npz"), x_test=x[5000:], y_test=y[5000:])
print("wrote", dst, "val.npz and report.npz")
