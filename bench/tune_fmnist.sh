#!/usr/bin/env bash
# A private search over the learning rate on Fashion-MNIST (docs/RESULTS.md,
# "Choosing settings privately"): the Tramèr–Boneh CNN from scratch with
# their DP-SGD settings (bench/results_fmnist.sh: SGD, momentum 0.9, clip
# norm 0.1, expected batch 2048, 40 epochs) but the learning rate chosen by
# `dpfinetune tune` from GRID, the whole search at ε = 3, δ = 1e-5. The
# runs train on 54,000 of the training images and are scored on the other
# 6,000 (a seeded split; the scores are noised, so the choice is private);
# the chosen model is then evaluated once on the 10,000 test images, which
# the search never saw.
#
# Usage: bench/tune_fmnist.sh
# Environment: FMNIST (default /usr/share/datasets/fashion-mnist), OUTDIR
#   (default /tmp/dpfinetune-tune), GRID (default 0.25,1,4,16), MEAN (the
#   expected number of runs, default 3), ETA (default 1), EPOCHS (default
#   40), SEED (empty: secure randomness; else the search is seeded),
#   BASELINE (1: instead of the search, train once with each learning rate
#   of GRID at ε = 3 on the same 54,000 images, as if an oracle had named
#   it, and evaluate each on the test images).
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-tune}
GRID=${GRID:-0.25,1,4,16}
MEAN=${MEAN:-3}
ETA=${ETA:-1}
EPOCHS=${EPOCHS:-40}
SEED=${SEED:-}
go build -o bin/dpfinetune ./cmd/dpfinetune
mkdir -p "$OUTDIR"
npz=$OUTDIR/fmnist-val.npz
/usr/bin/python3 - "$FMNIST" "$npz" <<'PYEOF'
import gzip, sys
import numpy as np
src, out = sys.argv[1], sys.argv[2]
def idx(name, off, shape):
    with gzip.open(f"{src}/{name}", "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=off).reshape(shape)
x = idx("train-images-idx3-ubyte.gz", 16, (-1, 28, 28))
y = idx("train-labels-idx1-ubyte.gz", 8, (-1,)).astype(np.int64)
# 6,000 of the training images held out for the runs' scores (the npz's
# test split), at random: a seeded permutation.
p = np.random.default_rng(0).permutation(len(y))
tr, va = p[6000:], p[:6000]
np.savez(out, x_train=x[tr], y_train=y[tr], x_test=x[va], y_test=y[va])
PYEOF
if [[ ${BASELINE:-} == 1 ]]; then
	for lr in ${GRID//,/ }; do
		r=single-lr$lr
		start=$(date +%s)
		bin/dpfinetune train --model testdata/models/cnn.onnx --data "npy:$npz" --test-data none --norm fmnist --epsilon 3 --delta 1e-5 \
			--epochs "$EPOCHS" --batch-size 2048 --physical-batch 256 --optimizer sgd --momentum 0.9 --clip 0.1 --lr "$lr" --quiet \
			--report "$OUTDIR/$r.json" --out "$OUTDIR/$r.onnx" 2>&1 | tail -1 | tee "$OUTDIR/$r.log"
		echo "run: $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/$r.log"
		bin/dpfinetune eval --model "$OUTDIR/$r.onnx" --data "idx:$FMNIST" | sed -n 3p | tee -a "$OUTDIR/$r.log"
	done
	exit 0
fi
seed=()
[[ -n $SEED ]] && seed=(--seed "$SEED")
r=tune-lr${GRID//,/-}-mean$MEAN-eta$ETA
start=$(date +%s)
bin/dpfinetune tune --model testdata/models/cnn.onnx --data "npy:$npz" --norm fmnist --epsilon 3 --delta 1e-5 \
	--epochs "$EPOCHS" --batch-size 2048 --physical-batch 256 --optimizer sgd --momentum 0.9 --clip 0.1 \
	--grid "lr=$GRID" --trials-mean "$MEAN" --trials-eta "$ETA" "${seed[@]}" --quiet \
	--report "$OUTDIR/$r.json" --out "$OUTDIR/$r.onnx" 2>&1 | tee "$OUTDIR/$r.log"
echo "search: $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/$r.log"
bin/dpfinetune eval --model "$OUTDIR/$r.onnx" --data "idx:$FMNIST" | head -4 | tee -a "$OUTDIR/$r.log"
