#!/usr/bin/env bash
# The remaining models of issue 8's tables: every clipping mode on the
# paper's CIFAR-10 models (32×32) and ViT-small at 224×224, ratios to nondp
# in the same run.
# Then nondp against bk alone, run in turn ROUNDS times (default 3), each
# reporting its median round: the time target's ratio, robust to the load
# of a shared machine. PART=targets runs only that part.
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
models=(
	"cifar_resnet34     --model zoo:cifar_resnet34     --batch 32"
	"cifar_resnet50     --model zoo:cifar_resnet50     --batch 32"
	"cifar_vgg16        --model zoo:cifar_vgg16        --batch 32"
	"cifar_mobilenet_v2 --model zoo:cifar_mobilenet_v2 --batch 32"
	"vit_small_224      --model zoo:vit_small_patch16_224 --num-classes 10 --batch 8"
)
if [ "${PART:-all}" != targets ]; then
	for m in "${models[@]}"; do
		# shellcheck disable=SC2086 # the entries are word lists
		run $m --steps 3
	done
fi
# cifar_vgg19's full table is bench/dp_modes.sh's (batch 16).
for m in "${models[@]}" "cifar_vgg19 --model zoo:cifar_vgg19 --batch 16"; do
	# shellcheck disable=SC2086
	set -- $m
	name=$1; shift
	run "$name-bk" "$@" --steps 3 --modes nondp,bk --rounds "${ROUNDS:-3}"
done
