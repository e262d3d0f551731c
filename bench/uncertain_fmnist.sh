#!/usr/bin/env bash
# Uncertain labels on real data (docs/RESULTS.md, "Uncertain labels"):
# Fashion-MNIST's 13 labels an image (garment and group, as
# bench/multilabel_fmnist.sh), the training split's garment labels made
# uncertain (-1) for 30 % of the positives and 3 % of the negatives
# (bench/uncertain_fmnist.py), the test split clean; the T&B CNN from
# scratch at ε = 3, δ = 1e-5 (SGD, clip 0.01, lr 40, batch 2048, 40
# epochs: the multi-label section's best), once with each of CheXpert's
# policies — uncertain=ignore (U-Ignore), zero (U-Zeros), one (U-Ones) —
# and with the soft target 0.7 (U-Ones with label smoothing regularization).
# Prints each run's test figures.
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
NPZ=${NPZ:-/tmp/fmnist-uncertain.npz}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-uncertain-fmnist}
DP=${DP:-bin/dpfinetune}
export PATH=$PATH:/usr/local/go/bin
[ -x "$DP" ] || go build -o "$DP" ./cmd/dpfinetune
[ -f "$NPZ" ] || (cd bench && /usr/bin/python3 uncertain_fmnist.py "$FMNIST" "$NPZ")
mkdir -p "$OUTDIR"
TB=(--model testdata/models/cnn.onnx --num-classes 13 --norm fmnist --optimizer sgd --momentum 0.9 --clip 0.01 --lr 40
    --batch-size 2048 --physical-batch 256 --epochs 40 --epsilon 3 --delta 1e-5)
. bench/train_run.sh
for policy in ignore zero one 0.7; do
	run "$policy" "${TB[@]}" --data "npy:$NPZ:uncertain=$policy" --test-data "npy:$NPZ:split=test:uncertain=$policy"
done
echo
echo "policy   test AUC  garments' AUC  mAP     labels right  exact   wall"
for policy in ignore zero one 0.7; do
	f="$OUTDIR/$policy.json"
	[ -f "$f" ] || continue
	wall=$(grep -o 'wall=[0-9]*s' "$OUTDIR/$policy.log" | tail -n 1 | cut -d= -f2)
	jq -r --arg n "$policy" --arg w "${wall:-?}" '.epochs[-1].test as $t | [$n, ($t.auc*10000|round/10000), ([$t.per_class[:10][].auc]|add/10*10000|round/10000), ($t.map*10000|round/10000), (($t.accuracy*10000|round)/100|tostring+" %"), (($t.exact_match*10000|round)/100|tostring+" %"), $w] | @tsv' "$f"
done | column -t -s $'\t'
