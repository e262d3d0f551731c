#!/usr/bin/python3
"""Writes Fashion-MNIST as PNG files and two multi-label CSV listings
(train.csv, test.csv) for bench/multilabel_fmnist.sh: each image's labels
are its garment's name and its group (upper: T-shirt, pullover, coat,
shirt; footwear: sandal, sneaker, boot; other: trouser, dress, bag), 13
labels, separated by '|' as NIH ChestX-ray14's "Finding Labels" are.

    /usr/bin/python3 bench/multilabel_fmnist.py /usr/share/datasets/fashion-mnist /tmp/fmnist-ml
"""
import gzip
import os
import sys

import numpy as np
from PIL import Image

GROUPS = ["Tshirt|upper", "Trouser|other", "Pullover|upper", "Dress|other", "Coat|upper",
          "Sandal|footwear", "Shirt|upper", "Sneaker|footwear", "Bag|other", "Boot|footwear"]


def idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(src, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(src, name)):
            return os.path.join(src, name)
    raise SystemExit("no %s under %s" % (stem, src))


def main(src, dst):
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = idx(find(src, prefix + "-images-idx3-ubyte"))
        labels = idx(find(src, prefix + "-labels-idx1-ubyte"))
        os.makedirs(os.path.join(dst, split), exist_ok=True)
        rows = ["path,labels"]
        for i, (img, y) in enumerate(zip(images, labels)):
            name = "%s/%05d.png" % (split, i)
            p = os.path.join(dst, name)
            if not os.path.exists(p):
                Image.fromarray(img, "L").save(p)
            rows.append("%s,%s" % (name, GROUPS[y]))
        with open(os.path.join(dst, split + ".csv"), "w") as f:
            f.write("\n".join(rows) + "\n")
        print(split, len(rows) - 1, "images")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
