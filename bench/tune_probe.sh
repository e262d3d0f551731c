#!/bin/sh
# A seeded linear-probe search (docs/BENCHMARKS.md, "A search's frozen part
# once"): `dpfinetune tune` of the zoo's CIFAR ResNet-18 with its `linear`
# head trained, on the shipped Fashion-MNIST slice (1,000 images at
# 3×32×32 to train, 1,000 to score), 10 epochs of expected batch 256,
# lr ∈ {1, 4}, ε = 3 for the search, 3 runs in expectation (seed 1 draws 6).
# $1: the dpfinetune binary (the A/B is two builds under farm-bench:
#   farm-bench -n 3 --timeout 1400 --vs 'bench/tune_probe.sh OLD' -- bench/tune_probe.sh NEW).
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
d=$(mktemp -d /tmp/tune-probe.XXXXXX)
trap 'rm -rf "$d"' EXIT
[ -f /tmp/tune-probe-r18.onnx ] || "$1" zoo export cifar_resnet18 --num-classes 10 --input-shape 3,32,32 --out /tmp/tune-probe-r18.onnx >/dev/null
"$1" tune --model /tmp/tune-probe-r18.onnx --data "idx:$root/testdata/fmnist-small" --epsilon 3 --epochs 10 --batch-size 256 \
	--optimizer sgd --clip 1 --train '^linear\.' --grid lr=1,4 --trials-mean 3 --seed 1 --quiet --out "$d/lp.onnx" >>"$d/log" 2>&1
