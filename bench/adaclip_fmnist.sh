#!/usr/bin/env bash
# Adaptive clipping on Fashion-MNIST (docs/RESULTS.md, "Adaptive
# clipping"): the Tramèr–Boneh CNN from scratch at ε = 3 with their DP-SGD
# settings (bench/results_fmnist.sh: SGD, momentum 0.9, batch 2048, 40
# epochs) but the clip norm moved towards the QUANTILE of the per-sample
# norms from their R = 0.1 (--clip-quantile; Andrew et al. 2021), at each
# learning rate of LRS: their lr 4 is tuned for R = 0.1, and SGD's step
# scales with R, which the quantile takes to the per-sample norms' own
# scale. Every run spends the same ε (docs/PRIVACY.md).
#
# Usage: bench/adaclip_fmnist.sh
# Environment: FMNIST (default /usr/share/datasets/fashion-mnist), OUTDIR
#   (default /tmp/dpfinetune-adaclip), EPOCHS (default 40), QUANTILE
#   (default 0.5; 0: the fixed R = 0.1), LRS (default "0.4 0.8"), OPT
#   (default sgd; adam drops the momentum), SEED (default: secure noise).
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-adaclip}
EPOCHS=${EPOCHS:-40}
QUANTILE=${QUANTILE:-0.5}
LRS=${LRS:-0.4 0.8}
OPT=${OPT:-sgd}
go build -o bin/dpfinetune ./cmd/dpfinetune
mkdir -p "$OUTDIR"
TB=(--model testdata/models/cnn.onnx --data "idx:$FMNIST" --epsilon 3 --epochs "$EPOCHS"
    --optimizer "$OPT" --momentum 0.9 --clip 0.1 --clip-quantile "$QUANTILE" --batch-size 2048
    --physical-batch 256 --accountant rdp --delta 1e-5 --quiet)
if [[ -n ${SEED:-} ]]; then TB+=(--seed "$SEED"); fi
for lr in $LRS; do
	r=$OPT-q$QUANTILE-lr$lr
	start=$(date +%s)
	bin/dpfinetune train "${TB[@]}" --lr "$lr" --report "$OUTDIR/$r.json" --out "$OUTDIR/$r.onnx" 2>&1 | tee "$OUTDIR/$r.log"
	echo "$r: $(($(date +%s) - start)) s" | tee -a "$OUTDIR/times.txt"
done
# The final and the best epoch's test accuracy, and the clip norm's path.
for f in "$OUTDIR"/*-q*.json; do
	python3 - "$f" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
acc = [e["test"]["accuracy"] for e in r["epochs"]]
norms = [e.get("clip_norm", 0) for e in r["epochs"]]
print("%s: final %.2f %%, best %.2f %%, clip norm %s" % (sys.argv[1], 100 * acc[-1], 100 * max(acc),
      " ".join("%.3g" % n for n in norms[::5] + norms[-1:])))
PYEOF
done
