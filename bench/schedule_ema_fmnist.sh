#!/usr/bin/env bash
# Learning-rate schedules and the parameters' moving average on
# Fashion-MNIST (docs/RESULTS.md, "Learning-rate schedules and the
# parameters' average"): the Tramèr–Boneh CNN from scratch at ε = 3 with
# their DP-SGD settings (bench/results_fmnist.sh), EPOCHS epochs, as
#   constant    their constant learning rate
#   cosine      --lr-schedule cosine --warmup-steps WARMUP
#   ema         --ema EMA
#   cosine-ema  both
# Every run spends the same ε: both are post-processing (docs/PRIVACY.md).
#
# Usage: bench/schedule_ema_fmnist.sh
# Environment: FMNIST (default /usr/share/datasets/fashion-mnist), OUTDIR
#   (default /tmp/dpfinetune-schedule), EPOCHS (default 40), WARMUP (default
#   30, one epoch), EMA (default 0.999), SEED (default: secure noise), RUNS
#   (default "constant cosine ema cosine-ema").
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-schedule}
EPOCHS=${EPOCHS:-40}
WARMUP=${WARMUP:-30}
EMA=${EMA:-0.999}
RUNS=${RUNS:-constant cosine ema cosine-ema}
go build -o bin/dpfinetune ./cmd/dpfinetune
mkdir -p "$OUTDIR"
TB=(--model testdata/models/cnn.onnx --data "idx:$FMNIST" --epsilon 3 --epochs "$EPOCHS"
    --optimizer sgd --momentum 0.9 --lr 4 --clip 0.1 --batch-size 2048
    --physical-batch 256 --accountant rdp --delta 1e-5 --quiet)
if [[ -n ${SEED:-} ]]; then TB+=(--seed "$SEED"); fi
for r in $RUNS; do
	case $r in
	constant) args=() ;;
	cosine) args=(--lr-schedule cosine --warmup-steps "$WARMUP") ;;
	ema) args=(--ema "$EMA") ;;
	cosine-ema) args=(--lr-schedule cosine --warmup-steps "$WARMUP" --ema "$EMA") ;;
	*) echo "unknown run $r" >&2; exit 2 ;;
	esac
	start=$(date +%s)
	bin/dpfinetune train "${TB[@]}" "${args[@]}" --report "$OUTDIR/$r.json" --out "$OUTDIR/$r.onnx" 2>&1 | tee "$OUTDIR/$r.log"
	echo "wall=$(( $(date +%s) - start ))s" | tee -a "$OUTDIR/$r.log"
done
echo
echo "run          ε spent  final test acc  best epoch's  wall"
for r in $RUNS; do
	wall=$(grep -o 'wall=[0-9]*s' "$OUTDIR/$r.log" | tail -n 1 | cut -d= -f2)
	/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); a=[e["test"]["accuracy"] for e in d["epochs"]]; print("%-12s %.3f    %.2f %%         %.2f %%       %s" % (sys.argv[2], d["privacy"]["epsilon"], 100*a[-1], 100*max(a), sys.argv[3]))' "$OUTDIR/$r.json" "$r" "$wall"
done
