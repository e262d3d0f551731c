#!/usr/bin/env bash
# Class weights on long-tailed data (docs/RESULTS.md, "Class weights"):
# Fashion-MNIST with classes 0-4 cut to a tenth of their training images
# (bench/imbalanced_fmnist.py: 600 each beside 6000 each of classes 5-9,
# 33000 in all; the test set the balanced 10000), the T&B CNN from
# scratch: without privacy (Adam, 15 epochs) with and without weights, and
# at ε = 3, δ = 1e-5 with Tramèr and Boneh's SGD settings (40 epochs,
# batch 2048, clip 0.1, lr 4) without weights, with the classes' inverse
# prevalence (the majority's 0.1) and with its square root (0.316).
# Prints each run's test accuracy, balanced accuracy, macro F1 and the
# minority classes' mean recall.
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
DIR=${DIR:-/tmp/fmnist-longtail}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-classweight-fmnist}
DP=${DP:-bin/dpfinetune}
export PATH=$PATH:/usr/local/go/bin
[ -x "$DP" ] || go build -o "$DP" ./cmd/dpfinetune
[ -f "$DIR/t10k-labels-idx1-ubyte.gz" ] || /usr/bin/python3 bench/imbalanced_fmnist.py "$FMNIST" "$DIR"
mkdir -p "$OUTDIR"
D=(--model testdata/models/cnn.onnx --data "idx:$DIR" --norm fmnist)
TB=(--optimizer sgd --momentum 0.9 --clip 0.1 --batch-size 2048 --physical-batch 256 --epochs 40 --epsilon 3 --delta 1e-5 --lr 4)
NP=(--non-private --optimizer adam --lr 0.001 --batch-size 128 --physical-batch 128 --epochs 15)
INV=1,1,1,1,1,0.1,0.1,0.1,0.1,0.1
SQRT=1,1,1,1,1,0.316,0.316,0.316,0.316,0.316
. bench/train_run.sh
run nonprivate "${D[@]}" "${NP[@]}"
run nonprivate_inv "${D[@]}" "${NP[@]}" --class-weight "$INV"
run eps3 "${D[@]}" "${TB[@]}"
run eps3_inv "${D[@]}" "${TB[@]}" --class-weight "$INV"
run eps3_sqrt "${D[@]}" "${TB[@]}" --class-weight "$SQRT"
echo
echo "run             accuracy  balanced  macro F1  minority recall  majority recall  wall"
for name in nonprivate nonprivate_inv eps3 eps3_inv eps3_sqrt; do
	f="$OUTDIR/$name.json"
	[ -f "$f" ] || continue
	wall=$(grep -o 'wall=[0-9]*s' "$OUTDIR/$name.log" | tail -n 1 | cut -d= -f2)
	jq -r --arg n "$name" --arg w "${wall:-?}" '.epochs[-1].test as $t |
		def pct: (.*10000|round)/100|tostring+" %";
		[$n, ($t.accuracy|pct), ($t.balanced_accuracy|pct), ($t.macro_f1|pct),
		 ([$t.per_class[0:5][].recall]|add/5|pct), ([$t.per_class[5:10][].recall]|add/5|pct), $w] | @tsv' "$f"
done | column -t -s $'\t'
