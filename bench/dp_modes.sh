#!/usr/bin/env bash
# DP clipping modes against nondp on the benchmark suite (DESIGN.md §7) and
# the paper's Table 6 maximum-batch comparison on VGG-19 at 32×32.
# Usage: bench/dp_modes.sh [OUTDIR]   (default /tmp/dpfinetune-dp-bench)
# JSON=1 also writes OUTDIR/NAME.json (a second run of each line).
# ROUNDS (default 3): the modes run in turn that many times and each
# reports its median round, so that nondp and bk see the same load on a
# shared machine. Then nondp against bk alone, TARGET_ROUNDS times in turn
# (default 9): the time target's ratio. PART=targets runs only that part.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/dpfinetune-dp-bench}
mkdir -p "$out"
go build -o bin/dpfinetune ./cmd/dpfinetune
export GOMAXPROCS=${GOMAXPROCS:-2}
run() {
	local name=$1; shift
	echo "== dpfinetune bench $*" | tee "$out/$name.txt"
	bin/dpfinetune bench --rounds "${ROUNDS:-3}" "$@" | tee -a "$out/$name.txt"
	if [ "${JSON:-0}" = 1 ]; then # a second run, for machine-readable output
		bin/dpfinetune bench --rounds "${ROUNDS:-3}" "$@" --json > "$out/$name.json"
	fi
}
if [ "${PART:-all}" != targets ]; then
	run cnn-fmnist     --model zoo:cnn-fmnist     --batch 256 --steps 5
	run resnet18-cifar --model zoo:resnet18-cifar --batch 32  --steps 5
	run vgg11-cifar    --model zoo:vgg11-cifar    --batch 16  --steps 5
	run vit-tiny-cifar --model zoo:vit-tiny-cifar --batch 32  --steps 5
	run vgg19-maxbatch --model zoo:cifar_vgg19    --batch 16  --steps 3 --modes nondp,instantiate,ghost,mixed,bk --max-memory 4GiB
fi
export ROUNDS=${TARGET_ROUNDS:-9}
run cnn-fmnist-bk     --model zoo:cnn-fmnist     --batch 256 --steps 20 --modes nondp,bk
run resnet18-cifar-bk --model zoo:resnet18-cifar --batch 32  --steps 5  --modes nondp,bk
run vgg11-cifar-bk    --model zoo:vgg11-cifar    --batch 16  --steps 5  --modes nondp,bk
run vit-tiny-cifar-bk --model zoo:vit-tiny-cifar --batch 32  --steps 5  --modes nondp,bk
