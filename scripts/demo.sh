#!/usr/bin/env bash
# The README's main command: a private fine-tune of the shipped fixture CNN
# (the Tramèr–Boneh architecture) on the shipped 4,000-image slice of
# Fashion-MNIST, three epochs at ε = 3, then its test accuracy and the run
# report drawn as a PNG.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./bin/dpfinetune
[ -x "$bin" ] || go build -o "$bin" ./cmd/dpfinetune
out=${DEMO_OUT:-/tmp/dpfinetune-demo}
mkdir -p "$out"
set -x
"$bin" train --model testdata/models/cnn.onnx --data idx:testdata/fmnist-small \
	--epsilon 3 --epochs 3 --batch-size 128 --lr 0.02 --clip 1 --clip-fn automatic \
	--out "$out/cnn-dp.onnx" --report "$out/report.json"
"$bin" eval --model "$out/cnn-dp.onnx" --data idx:testdata/fmnist-small
"$bin" report "$out/report.json" --out "$out/report.png"
