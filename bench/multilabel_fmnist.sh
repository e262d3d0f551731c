#!/usr/bin/env bash
# Multi-label training on real data (docs/RESULTS.md, "Multi-label"):
# Fashion-MNIST with 13 labels an image — its garment's name and its group
# (bench/multilabel_fmnist.py writes the PNGs and listings) — the T&B CNN
# from scratch with a 13-label head: without privacy (Adam, 15 epochs),
# and at ε = 3, δ = 1e-5 with Tramèr and Boneh's SGD settings (40 epochs,
# batch 2048, clip 0.1) at two learning rates. Prints each run's test AUC,
# share of right label decisions and exact matches.
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
DIR=${DIR:-/tmp/fmnist-ml}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-multilabel-fmnist}
DP=${DP:-bin/dpfinetune}
export PATH=$PATH:/usr/local/go/bin
[ -x "$DP" ] || go build -o "$DP" ./cmd/dpfinetune
[ -f "$DIR/test.csv" ] || /usr/bin/python3 bench/multilabel_fmnist.py "$FMNIST" "$DIR"
mkdir -p "$OUTDIR"
D=(--model testdata/models/cnn.onnx --num-classes 13 --data "csv:$DIR/train.csv:multilabel"
   --test-data "csv:$DIR/test.csv:multilabel" --norm fmnist)
TB=(--optimizer sgd --momentum 0.9 --clip 0.1 --batch-size 2048 --physical-batch 256 --epochs 40 --epsilon 3 --delta 1e-5)
. bench/train_run.sh
run nonprivate "${D[@]}" --non-private --optimizer adam --lr 0.001 --batch-size 128 --physical-batch 128 --epochs 15
run eps3_lr4 "${D[@]}" "${TB[@]}" --lr 4
run eps3_lr16 "${D[@]}" "${TB[@]}" --lr 16
echo
echo "run         ε      test AUC  labels right  exact   wall"
for name in nonprivate eps3_lr4 eps3_lr16; do
	f="$OUTDIR/$name.json"
	[ -f "$f" ] || continue
	wall=$(grep -o 'wall=[0-9]*s' "$OUTDIR/$name.log" | tail -n 1 | cut -d= -f2)
	jq -r --arg n "$name" --arg w "${wall:-?}" '[$n, (if .privacy == null then "none" else (.privacy.epsilon*1000|round/1000) end), (.epochs[-1].test.auc*10000|round/10000), ((.epochs[-1].test.accuracy*10000|round)/100|tostring+" %"), ((.epochs[-1].test.exact_match*10000|round)/100|tostring+" %"), $w] | @tsv' "$f"
done | column -t -s $'\t'
