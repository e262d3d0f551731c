#!/usr/bin/env python3
"""Fills the weights bench/dynamo_export.py stripped from a STEM.nodata.onnx
(every floating initializer over KEEP_FLOATS elements) with seeded random
values, so that a graph a GPU loan exported can be run, planned and trained
here without its weights:

    /usr/bin/python3 bench/fill_weights.py STEM.nodata.onnx OUT.onnx

A weight of rank ≥ 2 gets N(0, 1/fan_in), a BatchNorm running variance
(a name ending in "var") 1 + U(0, 0.1), anything else N(0, 0.05²). Integer
constants are the export's own (strip_weights keeps them); an older nodata
file that lost them is refused by name.
"""

import sys

import numpy as np
import onnx


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    m = onnx.load(sys.argv[1], load_external_data=False)
    rng = np.random.default_rng(0)
    filled = 0
    for t in m.graph.initializer:
        if t.raw_data or t.float_data or t.int64_data or t.int32_data or t.double_data:
            continue
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        if n == 0:
            continue
        if t.data_type != onnx.TensorProto.FLOAT:
            sys.exit("fill_weights: %s (%s, %s) has no data: a nodata file from before integer constants were kept"
                     % (t.name, onnx.TensorProto.DataType.Name(t.data_type), list(t.dims)))
        if t.name.endswith("var"):
            a = 1 + 0.1 * rng.random(n)
        elif len(t.dims) >= 2:
            a = rng.standard_normal(n) / np.sqrt(n // t.dims[0])
        else:
            a = 0.05 * rng.standard_normal(n)
        t.raw_data = a.astype(np.float32).tobytes()
        filled += 1
    onnx.save(m, sys.argv[2])
    print("fill_weights: %d initializers filled, %s written" % (filled, sys.argv[2]))


if __name__ == "__main__":
    main()
