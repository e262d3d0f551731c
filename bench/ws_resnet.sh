#!/bin/sh
# Times a weight-standardized ResNet-18 beside the same model with plain
# convolutions (bench/ws_resnet.py), 64x64, batch 16, on the CPU: the
# non-DP step and each DP mode, and the plain model's instantiate mode
# (every convolution's per-sample gradient instantiated, as the
# standardized model's must be). docs/BENCHMARKS.md, "Weight-standardized
# convolutions".
#
#   sh bench/ws_resnet.sh [OUTDIR]
set -e
dir=${1:-/tmp/ws_resnet}
/usr/bin/python3 "$(dirname "$0")/ws_resnet.py" "$dir"
go build -o "$dir/dpfinetune" ./cmd/dpfinetune
"$dir/dpfinetune" bench --model "$dir/plain.onnx" --input-shape 3,64,64 --batch 16 --modes nondp,instantiate,mixed,bk --steps 3 --rounds 2
"$dir/dpfinetune" bench --model "$dir/ws.onnx" --input-shape 3,64,64 --batch 16 --modes nondp,instantiate,mixed,bk --steps 3 --rounds 2
