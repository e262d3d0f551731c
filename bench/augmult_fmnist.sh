#!/usr/bin/env bash
# Augmentation multiplicity on Fashion-MNIST (docs/RESULTS.md, "Augmentation
# multiplicity"): the Tramèr–Boneh CNN from scratch at ε = 3 with their DP-SGD
# settings (bench/results_fmnist.sh), EPOCHS epochs, three ways:
#   plain     no augmentation
#   aug       --augment AUG, one view a sample
#   augmultK  --augment AUG --augment-multiplicity K
#
# Usage: bench/augmult_fmnist.sh
# Environment: FMNIST (default /usr/share/datasets/fashion-mnist), OUTDIR
#   (default /tmp/dpfinetune-augmult), EPOCHS (default 10), K (default 4),
#   AUG (default crop=2,flip), PHYS (physical batch in samples, default 256),
#   RUNS (variants, default "plain aug augmult").
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-augmult}
EPOCHS=${EPOCHS:-10}
K=${K:-4}
AUG=${AUG:-crop=2,flip}
PHYS=${PHYS:-256}
RUNS=${RUNS:-plain aug augmult}
go build -o bin/dpfinetune ./cmd/dpfinetune
mkdir -p "$OUTDIR"
TB=(--model testdata/models/cnn.onnx --data "idx:$FMNIST" --epsilon 3 --epochs "$EPOCHS"
    --optimizer sgd --momentum 0.9 --lr 4 --clip 0.1 --batch-size 2048
    --physical-batch "$PHYS" --accountant rdp --delta 1e-5 --quiet)
for r in $RUNS; do
	case $r in
	plain) args=() name=plain ;;
	aug) args=(--augment "$AUG") name=aug ;;
	augmult) args=(--augment "$AUG" --augment-multiplicity "$K") name=augmult$K ;;
	*) echo "unknown run $r" >&2; exit 2 ;;
	esac
	start=$(date +%s)
	bin/dpfinetune train "${TB[@]}" "${args[@]}" --report "$OUTDIR/$name.json" --out "$OUTDIR/$name.onnx" 2>&1 | tee "$OUTDIR/$name.log"
	echo "wall=$(( $(date +%s) - start ))s" | tee -a "$OUTDIR/$name.log"
done
echo
echo "run        ε spent  final test acc  wall"
for r in $RUNS; do
	name=$r; [[ $r == augmult ]] && name=augmult$K
	wall=$(grep -o 'wall=[0-9]*s' "$OUTDIR/$name.log" | tail -n 1 | cut -d= -f2)
	/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%-10s %.3f    %.2f %%         %s" % (sys.argv[2], d["privacy"]["epsilon"], 100*d["epochs"][-1]["test"]["accuracy"], sys.argv[3]))' "$OUTDIR/$name.json" "$name" "$wall"
done
