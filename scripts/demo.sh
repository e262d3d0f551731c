#!/usr/bin/env bash
# The README's main command: runs dpfinetune on the shipped fixture model.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./bin/dpfinetune
[ -x "$bin" ] || go build -o "$bin" ./cmd/dpfinetune
model=testdata/models/cnn.onnx
echo "== dpfinetune inspect --model $model --input-shape 1,28,28 --batch 256"
"$bin" inspect --model "$model" --input-shape 1,28,28 --batch 256
if "$bin" help 2>&1 | grep -q '^  privacy'; then
	echo
	echo "== dpfinetune privacy sigma --target-epsilon 3 --sample-rate 0.00427 --steps 4680 --delta 1e-5"
	"$bin" privacy sigma --target-epsilon 3 --sample-rate 0.00427 --steps 4680 --delta 1e-5
fi
