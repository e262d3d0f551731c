#!/usr/bin/env bash
# Temperature scaling of private models (docs/RESULTS.md, "Calibration"):
# the T&B CNN trained from scratch on Fashion-MNIST's 60,000 training
# images without privacy (Adam, 15 epochs) and at ε = 1, 3 and 8
# (δ = 1e-5, Tramèr and Boneh's SGD settings: 40 epochs, batch 2048,
# clip 0.1, lr 4), each calibrated on the first half of the test images
# (bench/fmnist_test_halves.py: val.npz) and measured before and after on
# the other half (report.npz): accuracy, loss (NLL) and expected
# calibration error, and the temperature.
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
HALVES=${HALVES:-/tmp/fmnist-test-halves}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-calibrate-fmnist}
DP=${DP:-bin/dpfinetune}
export PATH=$PATH:/usr/local/go/bin
[ -x "$DP" ] || go build -o "$DP" ./cmd/dpfinetune
[ -f "$HALVES/report.npz" ] || /usr/bin/python3 bench/fmnist_test_halves.py "$FMNIST" "$HALVES"
mkdir -p "$OUTDIR"
D=(--model testdata/models/cnn.onnx --data "idx:$FMNIST" --norm fmnist --test-data none)
TB=(--optimizer sgd --momentum 0.9 --clip 0.1 --batch-size 2048 --physical-batch 256 --epochs 40 --delta 1e-5 --lr 4)
NP=(--non-private --optimizer adam --lr 0.001 --batch-size 128 --physical-batch 128 --epochs 15)
. bench/train_run.sh
run nonprivate "${D[@]}" "${NP[@]}"
for eps in 1 3 8; do
	run "eps$eps" "${D[@]}" "${TB[@]}" --epsilon "$eps"
done
echo
echo "run         temperature  accuracy  NLL before  NLL after  ECE before  ECE after"
for name in nonprivate eps1 eps3 eps8; do
	[ -f "$OUTDIR/$name.onnx" ] || continue
	"$DP" calibrate --model "$OUTDIR/$name.onnx" --data "npy:$HALVES/val.npz" --out "$OUTDIR/${name}_cal.onnx" --json > "$OUTDIR/${name}_cal.json"
	"$DP" eval --model "$OUTDIR/$name.onnx" --data "npy:$HALVES/report.npz" --json > "$OUTDIR/${name}_before.json"
	"$DP" eval --model "$OUTDIR/${name}_cal.onnx" --data "npy:$HALVES/report.npz" --json > "$OUTDIR/${name}_after.json"
	jq -r -n --arg n "$name" --slurpfile c "$OUTDIR/${name}_cal.json" --slurpfile b "$OUTDIR/${name}_before.json" --slurpfile a "$OUTDIR/${name}_after.json" '
		def pct: (.*10000|round)/100|tostring+" %";
		def f4: (.*10000|round)/10000|tostring;
		[$n, ($c[0].temperature|f4), ($b[0].accuracy|pct), ($b[0].loss|f4), ($a[0].loss|f4), ($b[0].ece|pct), ($a[0].ece|pct)] | @tsv'
done | column -t -s $'\t'
