#!/usr/bin/env bash
# Calibrating multi-label private models (docs/RESULTS.md, "Calibration"):
# the models bench/uncertain_fmnist.sh trains (13 labels, ε = 3, each
# uncertain policy), calibrated with one temperature and with a map of
# each label's logit (calibrate --per-label) on the first half of the
# clean test split and measured on the other half: the loss (mean binary
# cross-entropy), the labels' mean AUC, mAP, and the share of label
# decisions right at ½.
set -euo pipefail
cd "$(dirname "$0")/.."
NPZ=${NPZ:-/tmp/fmnist-uncertain.npz}
MODELS=${MODELS:-/tmp/dpfinetune-uncertain-fmnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-calibrate-multilabel}
DP=${DP:-bin/dpfinetune}
export PATH=$PATH:/usr/local/go/bin
[ -x "$DP" ] || go build -o "$DP" ./cmd/dpfinetune
[ -f "$MODELS/one.onnx" ] || OUTDIR=$MODELS bench/uncertain_fmnist.sh
mkdir -p "$OUTDIR"
/usr/bin/python3 - "$NPZ" "$OUTDIR" <<'PY'
import sys
import numpy as np
d = np.load(sys.argv[1])
for name, part in (("val", slice(0, 5000)), ("report", slice(5000, 10000))):
    np.savez(f"{sys.argv[2]}/{name}.npz", x_test=d["x_test"][part], y_test=d["y_test"][part], classes=d["classes"])
PY
echo "policy  calibration   loss     AUC     mAP     labels right"
for policy in ignore zero one 0.7; do
	[ -f "$MODELS/$policy.onnx" ] || continue
	"$DP" calibrate --model "$MODELS/$policy.onnx" --data "npy:$OUTDIR/val.npz" --out "$OUTDIR/${policy}_t.onnx" --json > "$OUTDIR/${policy}_t.json"
	"$DP" calibrate --model "$MODELS/$policy.onnx" --data "npy:$OUTDIR/val.npz" --out "$OUTDIR/${policy}_p.onnx" --per-label --json > "$OUTDIR/${policy}_p.json"
	for c in none t p; do
		m="$MODELS/$policy.onnx"
		[ "$c" = none ] || m="$OUTDIR/${policy}_$c.onnx"
		"$DP" eval --model "$m" --data "npy:$OUTDIR/report.npz" --json > "$OUTDIR/${policy}_${c}_eval.json"
		label=$c
		[ "$c" = t ] && label="temperature $(jq -r '.temperature*1000|round/1000' "$OUTDIR/${policy}_t.json")"
		[ "$c" = p ] && label="per label"
		jq -r --arg p "$policy" --arg c "$label" '[$p, $c, (.loss*10000|round/10000), (.auc*10000|round/10000), (.map*10000|round/10000), ((.accuracy*10000|round)/100|tostring+" %")] | @tsv' "$OUTDIR/${policy}_${c}_eval.json"
	done
done | column -t -s $'\t'
