#!/usr/bin/env bash
# The remaining models of issue 8's tables: every clipping mode on the
# paper's CIFAR-10 models (32×32) and ViT-small at 224×224, ratios to nondp
# in the same run.
# Usage: bench/dp_zoo.sh [OUTDIR]   (default /tmp/dpfinetune-dp-zoo)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/dpfinetune-dp-zoo}
mkdir -p "$out"
go build -o bin/dpfinetune ./cmd/dpfinetune
export GOMAXPROCS=${GOMAXPROCS:-2}
run() {
	local name=$1; shift
	echo "== dpfinetune bench $*" | tee "$out/$name.txt"
	bin/dpfinetune bench "$@" | tee -a "$out/$name.txt"
}
run cifar_resnet34     --model zoo:cifar_resnet34     --batch 32 --steps 3
run cifar_resnet50     --model zoo:cifar_resnet50     --batch 32 --steps 3
run cifar_vgg16        --model zoo:cifar_vgg16        --batch 32 --steps 3
run cifar_mobilenet_v2 --model zoo:cifar_mobilenet_v2 --batch 32 --steps 3
run vit_small_224      --model zoo:vit_small_patch16_224 --num-classes 10 --batch 8 --steps 3
