#!/usr/bin/env bash
# A private search over how strongly to rebalance (docs/RESULTS.md, "Class
# weights"): the long-tailed Fashion-MNIST of bench/imbalanced_fmnist.py
# (--split: held-out data as long-tailed, from the first half of the test
# images; the other half, balanced, for the final figure), the T&B CNN
# from scratch at ε = 3 for the whole search, the runs' --class-weight the
# classes' inverse prevalence raised to a power drawn from
# --grid class-weight-power=0,0.5,1, each run scored by its class-weighted
# accuracy on the held-out data (the weights as given) with one point of
# noise. Prints the chosen power, its noisy score and the chosen model's
# figures on the balanced half. TRIALS sets the runs' mean number
# (default 3; the number itself is random and secret).
set -euo pipefail
cd "$(dirname "$0")/.."
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
DIR=${DIR:-/tmp/fmnist-longtail-split}
OUTDIR=${OUTDIR:-/tmp/dpfinetune-classweight-tune}
DP=${DP:-bin/dpfinetune}
export PATH=$PATH:/usr/local/go/bin
[ -x "$DP" ] || go build -o "$DP" ./cmd/dpfinetune
[ -f "$DIR-test/t10k-labels-idx1-ubyte.gz" ] || /usr/bin/python3 bench/imbalanced_fmnist.py "$FMNIST" "$DIR" 600 --split
mkdir -p "$OUTDIR"
start=$(date +%s)
"$DP" tune --model testdata/models/cnn.onnx --data "idx:$DIR" --test-data "idx:$DIR-val" --norm fmnist \
	--class-weight 1,1,1,1,1,0.1,0.1,0.1,0.1,0.1 --grid class-weight-power=0,0.5,1 --trials-mean "${TRIALS:-3}" \
	--optimizer sgd --momentum 0.9 --clip 0.1 --batch-size 2048 --physical-batch 256 --epochs 40 --lr 4 \
	--epsilon 3 --delta 1e-5 --work "$OUTDIR/work" --out "$OUTDIR/best.onnx" --report "$OUTDIR/best.json" 2>&1 | tee "$OUTDIR/tune.log"
echo "wall=$(( $(date +%s) - start ))s" | tee -a "$OUTDIR/tune.log"
jq -r '"chosen: \(.chosen), noisy score \(.score*10000|round/100) %, search ε \(.search.epsilon)"' "$OUTDIR/best.json"
"$DP" eval --model "$OUTDIR/best.onnx" --data "idx:$DIR-test" --json > "$OUTDIR/eval.json"
jq -r 'def pct: (.*10000|round)/100|tostring+" %";
	"balanced test half: accuracy \(.accuracy|pct), macro F1 \(.macro_f1|pct), recall of classes 0-4 \([.per_class[0:5][].recall]|add/5|pct), of 5-9 \([.per_class[5:10][].recall]|add/5|pct)"' "$OUTDIR/eval.json"
