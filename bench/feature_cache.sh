#!/usr/bin/env bash
# The feature cache (docs/BENCHMARKS.md, "Feature cache: a frozen backbone
# computed once"): a linear probe of the zoo's CIFAR ResNet-50 (its
# `linear` head alone trained) on EXAMPLES Fashion-MNIST images at 3×32×32,
# EPOCHS epochs at ε = 3, with --cache-features on (the frozen ResNet runs
# once per example) against off (the whole model at every step), timed as
# whole processes by farm-bench, A/B in turn, RUNS runs each. The two runs
# train the same samples with the same noise (--seed) and spend the same ε.
#
# With KEEP=1, a later run's features kept (docs/BENCHMARKS.md, "Kept
# features"): --cache-features on --keep-features DIR, whose warm-up run
# keeps the rows and whose timed runs read them, against --cache-features
# on computing them in every run.
#
# Usage: bench/feature_cache.sh
# Environment: EXAMPLES (default 1000), EPOCHS (default 5), RUNS (default
#   3), MODEL (default zoo's cifar_resnet50), TRAIN (the head's pattern,
#   default ^linear\.), OUTDIR (default /tmp/dpfinetune-feature-cache),
#   KEEP (1: kept features against computed ones).
set -euo pipefail
cd "$(dirname "$0")/.."
EXAMPLES=${EXAMPLES:-1000}
EPOCHS=${EPOCHS:-5}
RUNS=${RUNS:-3}
TRAIN=${TRAIN:-^linear\\.}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-feature-cache}
mkdir -p "$OUTDIR"
go build -o "$OUTDIR/dpfinetune" ./cmd/dpfinetune
MODEL=${MODEL:-$OUTDIR/cifar_resnet50.onnx}
if [[ ! -f $MODEL ]]; then
	"$OUTDIR/dpfinetune" zoo export cifar_resnet50 --out "$MODEL"
fi
"$OUTDIR/dpfinetune" plan --model "$MODEL" --train "$TRAIN" | grep '^features:'
run="$OUTDIR/dpfinetune train --model $MODEL --data idx:testdata/fmnist-small:limit=$EXAMPLES --test-data none
	--train $TRAIN --epsilon 3 --epochs $EPOCHS --batch-size 250 --quiet --seed 1 --out $OUTDIR/out.onnx --cache-features"
if [[ ${KEEP:-} == 1 ]]; then
	rm -rf "$OUTDIR/kept"
	# shellcheck disable=SC2086 # $run is a word list
	farm-bench -n "$RUNS" --warmup 1 --timeout 3600 --vs "$run on" -- $run on --keep-features "$OUTDIR/kept"
	ls -l "$OUTDIR/kept"
	exit
fi
# shellcheck disable=SC2086 # $run is a word list
farm-bench -n "$RUNS" --warmup 0 --timeout 3600 --vs "$run off" -- $run on
