#!/bin/sh
# A LoRA step beside a full one (docs/BENCHMARKS.md, "LoRA"): `dpfinetune
# bench` of the zoo's ViT-Tiny and ResNet-18 at CIFAR size, every
# parameter trained (nondp, bk) and rank-8 adapters with the head (bk,
# --lora 8), each mode's median of 3 rounds run in turn.
# $1: the dpfinetune binary (default bin/dpfinetune).
set -e
DP=${1:-bin/dpfinetune}
for m in vit-tiny-cifar resnet18-cifar; do
	"$DP" bench --model "zoo:$m" --batch 32 --modes nondp,bk --steps 5 --rounds 3
	"$DP" bench --model "zoo:$m" --batch 32 --modes nondp,bk --steps 5 --rounds 3 --lora 8
done
