#!/usr/bin/env bash
# Reproduces the Fashion-MNIST runs of docs/RESULTS.md:
#
#   1. scratch_eps3   the Tramèr–Boneh CNN (testdata/models/cnn.onnx, seeded random
#                     init) trained from scratch with DP-SGD on all 60k training
#                     images at ε = 3, δ = 1e-5 (T&B's end-to-end CNN settings:
#                     momentum 0.9, batch 2048, 40 epochs, lr 4, clip 0.1).
#   2. the transfer pair at ε = 1, δ = 1e-5 on the 50k "private" split
#      (training examples 10000..59999, built by bench/fmnist_split.py):
#        pretrain10k    non-private pretraining on the 10k "public" split
#                       (idx:...:limit=10000, examples 0..9999, disjoint from the 50k)
#        transfer_eps1  DP fine-tune of pretrain10k.onnx on the 50k split
#        scratch_eps1   the same DP run from the random init (the baseline)
#
# Usage: bench/results_fmnist.sh [all|scratch3|transfer] (default all)
# Environment: FMNIST (dataset dir, default /usr/share/datasets/fashion-mnist),
#   OUTDIR (default /tmp/dpfinetune-results-fmnist), REST (50k split dir,
#   default /tmp/fmnist-rest), EPOCHS3 (default 40), EPOCHS1 (default 8),
#   EPOCHS0 (public pretraining epochs, default 15), PHYS (physical batch,
#   default 256), EXTRA (extra train flags, e.g. "--seed 1").
# No --seed by default: the noise is drawn from the secure source.
# Each run writes OUTDIR/NAME.{log,json,onnx}; a summary table is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-results-fmnist}
REST=${REST:-/tmp/fmnist-rest}
EPOCHS3=${EPOCHS3:-40}
EPOCHS1=${EPOCHS1:-8}
EPOCHS0=${EPOCHS0:-15}
PHYS=${PHYS:-256}
EXTRA=${EXTRA:-}
what=${1:-all}

export PATH=$PATH:/usr/local/go/bin
go build -o bin/dpfinetune ./cmd/dpfinetune
mkdir -p "$OUTDIR"
DP=bin/dpfinetune
# The DP-SGD settings of Tramèr & Boneh (2021) for the end-to-end CNN.
TB=(--optimizer sgd --momentum 0.9 --lr 4 --clip 0.1 --batch-size 2048
    --physical-batch "$PHYS" --accountant rdp --delta 1e-5)

run() { # NAME ARGS...: run one training job, record its wall time
	local name=$1; shift
	echo "== $name: $DP train $* --quiet --report $OUTDIR/$name.json --out $OUTDIR/$name.onnx $EXTRA"
	local start; start=$(date +%s)
	# shellcheck disable=SC2086
	"$DP" train "$@" --quiet --report "$OUTDIR/$name.json" --out "$OUTDIR/$name.onnx" $EXTRA 2>&1 | tee "$OUTDIR/$name.log"
	echo "wall=$(( $(date +%s) - start ))s" | tee -a "$OUTDIR/$name.log"
}

if [[ $what == all || $what == scratch3 ]]; then
	run scratch_eps3 --model testdata/models/cnn.onnx --data "idx:$FMNIST" \
		--epsilon 3 --epochs "$EPOCHS3" "${TB[@]}"
fi

if [[ $what == all || $what == transfer ]]; then
	# The 50k private split: training examples [10000, 60000), test split copied.
	/usr/bin/python3 bench/fmnist_split.py "$FMNIST" "$REST" 10000
	# Public pretraining (no privacy) on examples [0, 10000).
	run pretrain10k --model testdata/models/cnn.onnx --data "idx:$FMNIST:limit=10000" \
		--test-data "idx:$FMNIST:test" --non-private --optimizer adam --lr 0.001 \
		--batch-size 128 --physical-batch 128 --epochs "$EPOCHS0"
	# DP fine-tune of the pretrained model vs DP from scratch, same settings, ε = 1.
	run transfer_eps1 --model "$OUTDIR/pretrain10k.onnx" --data "idx:$REST" \
		--epsilon 1 --epochs "$EPOCHS1" "${TB[@]}"
	run scratch_eps1 --model testdata/models/cnn.onnx --data "idx:$REST" \
		--epsilon 1 --epochs "$EPOCHS1" "${TB[@]}"
fi

echo
echo "run            epochs  ε spent   δ       σ        final test acc  wall"  # ε: RDP, at the end of the run
for f in "$OUTDIR"/*.json; do
	name=$(basename "$f" .json)
	wall=$(grep -o 'wall=[0-9]*s' "$OUTDIR/$name.log" | tail -n 1 | cut -d= -f2)
	jq -r --arg n "$name" --arg w "${wall:-?}" \
		'(.privacy == null) as $np | [$n, (.epochs|length), (if $np then "none" else (.privacy.epsilon*1000|round/1000) end), (if $np then "-" else .privacy.delta end), (if $np then "-" else (.settings.sigma*10000|round/10000) end), ((.epochs[-1].test.accuracy*10000|round)/100|tostring+" %"), $w] | @tsv' "$f"
done | column -t -s $'\t'
