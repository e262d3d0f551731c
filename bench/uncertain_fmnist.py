#!/usr/bin/python3
"""Writes Fashion-MNIST as multi-hot NumPy arrays with uncertain labels
for bench/uncertain_fmnist.sh: 13 labels an image (its garment and its
group, as bench/multilabel_fmnist.py), the training split's garment labels
made uncertain (-1) as CheXpert's radiologists' reports make findings
uncertain — 30 % of the positives and 3 % of the negatives, seeded —, the
test split clean. One .npz: x_train, y_train, x_test, y_test, classes.

    /usr/bin/python3 bench/uncertain_fmnist.py /usr/share/datasets/fashion-mnist /tmp/fmnist-uncertain.npz
"""
import sys

import numpy as np

from multilabel_fmnist import GROUPS, find, idx

NAMES = ["Tshirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Boot",
         "footwear", "other", "upper"]


def multi_hot(labels):
    y = np.zeros((len(labels), len(NAMES)), np.int64)
    for i, c in enumerate(labels):
        for name in GROUPS[c].split("|"):
            y[i, NAMES.index(name)] = 1
    return y


def main(src, dst):
    rng = np.random.default_rng(7)
    out = {"classes": np.array(NAMES)}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = idx(find(src, prefix + "-images-idx3-ubyte"))
        y = multi_hot(idx(find(src, prefix + "-labels-idx1-ubyte")))
        if split == "train":
            garment = y[:, :10]
            u = rng.random(garment.shape)
            positive = garment == 1
            uncertain = np.where(positive, u < 0.30, u < 0.03)
            garment[uncertain] = -1
            print("train: %d of %d garment labels uncertain (%d positives, %d negatives)" % (
                uncertain.sum(), garment.size, (uncertain & positive).sum(), (uncertain & ~positive).sum()), file=sys.stderr)
        out["x_" + split], out["y_" + split] = x, y
    np.savez(dst, **out)
    print("wrote", dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
