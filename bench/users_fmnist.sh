#!/usr/bin/env bash
# User-level privacy on Fashion-MNIST (docs/RESULTS.md, "User-level
# privacy"): the Tramèr–Boneh CNN from scratch at ε = 3, δ = 1e-5 with their
# DP-SGD settings (bench/results_fmnist.sh: SGD, momentum 0.9, lr 4, clip
# norm 0.1, 40 epochs), on the training images grouped into users of PER
# images each at random (a seeded permutation; the NumPy arrays' users
# array), the guarantee per user (--privacy-unit user, the default where
# the data names users), each sampled user's PER images read each step
# (--examples-per-user PER). The expected batch is 2048/PER users, 2048
# rows: the sample rate, the steps and σ are those of the example-level
# run of docs/RESULTS.md, and a user's clipped gradient is the mean of its
# images'. With UNITS="user example" the same arrays are also trained with
# the guarantee per image (--privacy-unit example, batch 2048 images): the
# example-level baseline on the same day's machine.
#
# Usage: bench/users_fmnist.sh
# Environment: FMNIST (default /usr/share/datasets/fashion-mnist), OUTDIR
#   (default /tmp/dpfinetune-users), PER (default 4), EPOCHS (default 40),
#   UNITS (default "user"), BATCH (the expected users a step; default
#   2048/PER), LR (default 4, Tramèr and Boneh's for 2048 examples a step).
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-users}
PER=${PER:-4}
EPOCHS=${EPOCHS:-40}
UNITS=${UNITS:-user}
BATCH=${BATCH:-$((2048 / PER))}
LR=${LR:-4}
go build -o bin/dpfinetune ./cmd/dpfinetune
mkdir -p "$OUTDIR"
npz=$OUTDIR/fmnist-users$PER.npz
/usr/bin/python3 - "$FMNIST" "$npz" "$PER" <<'PYEOF'
import gzip, sys
import numpy as np
src, out, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
def idx(name, off, shape):
    with gzip.open(f"{src}/{name}", "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=off).reshape(shape)
x = idx("train-images-idx3-ubyte.gz", 16, (-1, 28, 28))
y = idx("train-labels-idx1-ubyte.gz", 8, (-1,)).astype(np.int64)
xt = idx("t10k-images-idx3-ubyte.gz", 16, (-1, 28, 28))
yt = idx("t10k-labels-idx1-ubyte.gz", 8, (-1,)).astype(np.int64)
# Users of per images each, at random: a seeded permutation of the images.
users = np.empty(len(y), np.int64)
users[np.random.default_rng(0).permutation(len(y))] = np.arange(len(y)) // per
np.savez(out, x_train=x, y_train=y, users_train=users, x_test=xt, y_test=yt)
PYEOF
for unit in $UNITS; do
	if [[ $unit == user ]]; then
		r=users$PER-batch$BATCH-lr$LR
		batch=(--privacy-unit user --batch-size "$BATCH" --examples-per-user "$PER" --physical-batch $((256 / PER)))
	else
		r=users$PER-per-example-lr$LR
		batch=(--privacy-unit example --batch-size 2048 --physical-batch 256)
	fi
	start=$(date +%s)
	bin/dpfinetune train --model testdata/models/cnn.onnx --data "npy:$npz" --norm fmnist --epsilon 3 --delta 1e-5 \
		--epochs "$EPOCHS" --optimizer sgd --momentum 0.9 --lr "$LR" --clip 0.1 "${batch[@]}" --accountant rdp --quiet \
		--report "$OUTDIR/$r.json" --out "$OUTDIR/$r.onnx" 2>&1 | tee "$OUTDIR/$r.log"
	echo "$r: $(($(date +%s) - start)) s" | tee -a "$OUTDIR/times.txt"
	python3 - "$OUTDIR/$r.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["settings"]
acc = [e["test"]["accuracy"] for e in r["epochs"]]
print("%s: %s units, q %.5g, σ %.4g, ε %.3f: final %.2f %%, best %.2f %%" % (sys.argv[1], s.get("users") or s["examples"],
      s["sample_rate"], s["sigma"], r["privacy"]["epsilon"], 100 * acc[-1], 100 * max(acc)))
PYEOF
done
