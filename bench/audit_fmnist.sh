#!/usr/bin/env bash
# Reproduces the privacy-audit table of docs/RESULTS.md: `dpfinetune audit`
# (privacy auditing in one training run) of the Tramèr–Boneh CNN trained from
# scratch on all 60k Fashion-MNIST training images with the DP-SGD settings
# of bench/results_fmnist.sh (momentum 0.9, batch 2048, lr 4, clip 0.1), for
# 10 epochs, at ε ∈ {1, 3, 8}, δ = 1e-5:
#
#   grad_epsE    1000 gradient (Dirac, white-box) canaries, 250 + 250 guesses
#   input_eps8   1000 input (mislabeled, black-box) canaries drawn from the
#                10k test images, 250 + 250 guesses, at ε = 8
#
# Usage: bench/audit_fmnist.sh [all|grad|input] (default all)
# Environment: FMNIST (dataset dir, default /usr/share/datasets/fashion-mnist),
#   OUTDIR (default /tmp/dpfinetune-audit-fmnist), EPOCHS (default 10),
#   PHYS (physical batch, default 256), EPSILONS (default "1 3 8"),
#   EXTRA (extra flags, e.g. "--seed 1").
# No --seed by default: the noise, the sampling and the canaries come from the
# secure source. Each run writes OUTDIR/NAME.json (the audit result, with the
# run report) and OUTDIR/NAME.log; a summary table is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-audit-fmnist}
EPOCHS=${EPOCHS:-10}
PHYS=${PHYS:-256}
EPSILONS=${EPSILONS:-1 3 8}
EXTRA=${EXTRA:-}
what=${1:-all}

export PATH=$PATH:/usr/local/go/bin
go build -o bin/dpfinetune ./cmd/dpfinetune
mkdir -p "$OUTDIR"
DP=bin/dpfinetune
TB=(--optimizer sgd --momentum 0.9 --lr 4 --clip 0.1 --batch-size 2048
    --physical-batch "$PHYS" --accountant rdp --delta 1e-5 --epochs "$EPOCHS")

audit() { # NAME ARGS...: one audit; exit 1 (a violation) is recorded, not fatal
	local name=$1; shift
	echo "== $name: $DP audit $* --json $EXTRA"
	local start; start=$(date +%s)
	# shellcheck disable=SC2086
	"$DP" audit "$@" --json $EXTRA >"$OUTDIR/$name.json" 2>"$OUTDIR/$name.log" || echo "exit $?" >>"$OUTDIR/$name.log"
	echo "wall=$(( $(date +%s) - start ))s" | tee -a "$OUTDIR/$name.log"
}

if [[ $what == all || $what == grad ]]; then
	for eps in $EPSILONS; do
		audit "grad_eps$eps" --model testdata/models/cnn.onnx --data "idx:$FMNIST" --epsilon "$eps" \
			"${TB[@]}" --canary-kind gradient --canaries 1000
	done
fi
if [[ $what == all || $what == input ]]; then
	audit input_eps8 --model testdata/models/cnn.onnx --data "idx:$FMNIST" --epsilon 8 \
		"${TB[@]}" --canary-kind input --canaries 1000 --canary-data "idx:$FMNIST:test"
fi

echo
echo "run  kind  claimed ε  δ  m  included  guesses  correct  bound (95 %)  max bound  test acc  wall"
for f in "$OUTDIR"/*.json; do
	name=$(basename "$f" .json)
	wall=$(grep -o 'wall=[0-9]*s' "$OUTDIR/$name.log" | tail -n 1 | cut -d= -f2)
	jq -r --arg n "$name" --arg w "${wall:-?}" \
		'[$n, .kind, (.claimed_epsilon*1000|round/1000), .delta, .canaries, .included, .guesses, .correct, (.epsilon_lower_bound*1000|round/1000), (.max_bound*1000|round/1000), ((.run.epochs[-1].test.accuracy*10000|round)/100|tostring+" %"), $w] | @tsv' "$f"
done | column -t -s $'\t'
