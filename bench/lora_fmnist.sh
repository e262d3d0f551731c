#!/usr/bin/env bash
# LoRA against a full fine-tune and a linear probe (docs/RESULTS.md, "LoRA"):
# the transfer setting of bench/results_fmnist.sh — the T&B CNN pretrained
# without privacy on the first 10k Fashion-MNIST training images, then
# fine-tuned privately at ε = 1 on the other 50k (Tramèr–Boneh's SGD
# settings, 8 epochs) — trained three ways: every parameter (full), rank-4
# adapters beside its four linear layers with the head in full (--lora 4),
# and the head alone (linear probe), each REPS times (default 3: the
# secure noise differs from run to run; the pretrained model is the same).
# Prints each run's final test accuracy and trained scalars, and each
# way's mean.
set -euo pipefail
cd "$(dirname "$0")/.."

FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-lora-fmnist}
REST=${REST:-/tmp/fmnist-rest}
EPOCHS1=${EPOCHS1:-8}
EPOCHS0=${EPOCHS0:-15}
PHYS=${PHYS:-256}
REPS=${REPS:-3}
DP=${DP:-bin/dpfinetune}

export PATH=$PATH:/usr/local/go/bin
[ -x "$DP" ] || go build -o "$DP" ./cmd/dpfinetune
mkdir -p "$OUTDIR"
TB=(--optimizer sgd --momentum 0.9 --clip 0.1 --batch-size 2048
    --physical-batch "$PHYS" --accountant rdp --delta 1e-5)

. bench/train_run.sh

/usr/bin/python3 bench/fmnist_split.py "$FMNIST" "$REST" 10000
run pretrain10k --model testdata/models/cnn.onnx --data "idx:$FMNIST:limit=10000" \
	--test-data "idx:$FMNIST:test" --non-private --optimizer adam --lr 0.001 \
	--batch-size 128 --physical-batch 128 --epochs "$EPOCHS0"
P="$OUTDIR/pretrain10k.onnx"
T=(--data "idx:$REST" --test-data "idx:$FMNIST:test" --epsilon 1 --epochs "$EPOCHS1")
for r in $(seq 1 "$REPS"); do
	run "full_lr4_r$r" --model "$P" "${T[@]}" "${TB[@]}" --lr 4
	run "lora4_lr4_r$r" --model "$P" "${T[@]}" "${TB[@]}" --lr 4 --lora 4
	run "lora4_lr16_r$r" --model "$P" "${T[@]}" "${TB[@]}" --lr 16 --lora 4
	run "probe_lr4_r$r" --model "$P" "${T[@]}" "${TB[@]}" --lr 4 --train '^classifier\.3\.'
done

echo
echo "run             trained scalars  ε      final test acc  wall"
for f in "$OUTDIR"/*.json; do
	name=$(basename "$f" .json)
	wall=$(grep -o 'wall=[0-9]*s' "$OUTDIR/$name.log" | tail -n 1 | cut -d= -f2)
	jq -r --arg n "$name" --arg w "${wall:-?}" \
		'[$n, .plan.trainable.scalars, (if .privacy == null then "none" else (.privacy.epsilon*1000|round/1000) end), ((.epochs[-1].test.accuracy*10000|round)/100|tostring+" %"), $w] | @tsv' "$f"
done | column -t -s $'\t'
echo
echo "way          runs  mean test acc  min     max"
for way in full_lr4 lora4_lr4 lora4_lr16 probe_lr4; do
	ls "$OUTDIR"/"$way"_r*.json >/dev/null 2>&1 || continue
	jq -s -r --arg w "$way" '[.[].epochs[-1].test.accuracy*100] | [$w, length, ((add/length)*100|round/100), (min*100|round/100), (max*100|round/100)] | @tsv' "$OUTDIR"/"$way"_r*.json
done | column -t -s $'\t'
