#!/usr/bin/env bash
# The non-DP training step of the zoo models in docs/BENCHMARKS.md's DP
# tables (bench/dp_modes.sh, bench/dp_zoo.sh), ours against PyTorch's on the
# same network and batch, so that every table row has the PyTorch non-DP
# step beside ours. Usage:
#
#   bench/zoo_vs_torch.sh [models]     # comma-separated; default: the six below
#
# Default models (batch as in the tables): cifar_resnet34 (32),
# cifar_resnet50 (32), cifar_vgg16 (32), cifar_vgg19 (16, dp_modes.sh),
# cifar_mobilenet_v2 (32), vit_small_patch16_224 (8, 3×224×224, 10 classes).
# The suite models of dp_modes.sh (cnn-fmnist, resnet18-cifar, vgg11-cifar,
# vit-tiny-cifar) are accepted too; bench/run_suite.sh times those on
# PyTorch's own ONNX export.
#
# Per model:
#   1. ours: `dpfinetune zoo export NAME --batchnorm --num-classes 10`, then
#      `dpfinetune plan --out` applies the default rewrite (BatchNorm →
#      GroupNorm, 16 groups or the largest divisor of the channels below 16),
#      which is the graph `dpfinetune bench --model zoo:NAME` trains.
#   2. PyTorch: bench/torch_models.py builds the same network (the zoo's
#      reference in zoo/testdata/torch_ref.py, through bench/torch_zoo.py,
#      BatchNorm replaced by the same GroupNorm). The script
#      prints both parameter counts and skips a model whose counts differ;
#      with CHECK=1 (default, needs python3-onnx and numpy) it also loads our
#      weights into the PyTorch model and compares the logits with
#      `dpfinetune predict` on the rewritten graph.
#   3. The step, alternating ours and PyTorch ROUNDS times: forward,
#      per-sample softmax cross-entropy, backward of Σ_i loss_i, Adam
#      (lr 1e-3) — bench/cmd/stepbench on the rewritten ONNX and
#      bench/torch_step.py (train mode), THREADS threads on both sides.
#      (stepbench, not `dpfinetune bench --modes nondp`: the engine's nondp
#      step also accumulates the gradient into a second buffer for logical
#      batches, and reports the live Go heap rather than a resident peak.)
#
# Table: step time is the best of the rounds' medians; peak MB is the
# training loop's peak resident set (VmHWM reset after setup; maxRSS where
# that is unavailable), the largest over the rounds. The weights are seeded
# PyTorch-style random on both sides but not the same bytes; the step time
# does not depend on them.
#
# Environment: THREADS (2), STEPS (20), WARMUP (3), ROUNDS (2; 0 only checks
# the networks), CHECK (1),
# CACHE (binaries and ONNX files; default $HOME/.cache/dpfinetune-bench),
# OUT (JSON lines, default $CACHE/zoo_vs_torch.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-2}
CHECK=${CHECK:-1}
CACHE=${CACHE:-$HOME/.cache/dpfinetune-bench}
OUT=${OUT:-$CACHE/zoo_vs_torch.jsonl}
MODELS=${1:-cifar_resnet34,cifar_resnet50,cifar_vgg16,cifar_vgg19,cifar_mobilenet_v2,vit_small_patch16_224}
PY=/usr/bin/python3
declare -A BATCH=(
	[cifar_resnet34]=32 [cifar_resnet50]=32 [cifar_vgg16]=32 [cifar_vgg19]=16
	[cifar_mobilenet_v2]=32 [vit_small_patch16_224]=8
	[cnn-fmnist]=256 [resnet18-cifar]=32 [vgg11-cifar]=16 [vit-tiny-cifar]=32
)
declare -A SHAPE=([vit_small_patch16_224]="3,224,224" [cnn-fmnist]="1,28,28")
CLASSES=10

# jsonint KEY: the integer value of "KEY" in the JSON on stdin.
jsonint() { sed -n "s/.*\"$1\": *\([0-9][0-9]*\).*/\1/p" | awk 'NR == 1'; }

mkdir -p "$CACHE/zoo"
CACHE=$(cd "$CACHE" && pwd) # absolute: the Python steps run in bench/
: >"$OUT"
export PATH=$PATH:/usr/local/go/bin
go build -o "$CACHE/dpfinetune" ./cmd/dpfinetune
go build -o "$CACHE/stepbench" ./bench/cmd/stepbench
DP=$CACHE/dpfinetune
torch=0
if [ -x "$PY" ] && "$PY" -c 'import torch, torchvision' 2>/dev/null; then
	torch=1
else
	echo "zoo_vs_torch: $PY has no torch/torchvision: PyTorch columns skipped" >&2
fi
if [ "$CHECK" = 1 ] && [ $torch = 1 ] && ! "$PY" -c 'import onnx, numpy' 2>/dev/null; then
	echo "zoo_vs_torch: $PY has no onnx/numpy: forward check skipped" >&2
	CHECK=0
fi
export GOMAXPROCS=$THREADS OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
status=0
IFS=, read -ra models <<<"$MODELS"
for m in "${models[@]}"; do
	batch=${BATCH[$m]:-}
	if [ -z "$batch" ]; then
		echo "zoo_vs_torch: no batch known for $m (want one of: ${!BATCH[*]})" >&2
		status=1
		continue
	fi
	shape=${SHAPE[$m]:-3,32,32}
	bn="$CACHE/zoo/$m.onnx"
	gn="$CACHE/zoo/$m-gn.onnx"
	# Rebuilt every run (a few seconds): the zoo may have changed.
	"$DP" zoo export "$m" --batchnorm --num-classes "$CLASSES" --out "$bn" >/dev/null
	"$DP" plan --model "$bn" --input-shape "$shape" --batch "$batch" --out "$gn" >/dev/null
	ours=$("$DP" inspect --model "$gn" --json | jsonint parameters)
	if [ $torch = 1 ]; then
		theirs=$(cd bench && "$PY" torch_models.py --count "$m" | jsonint params)
		echo "params $m: ours $ours (dpfinetune inspect of the rewritten zoo export), PyTorch $theirs" >&2
		if [ "$ours" != "$theirs" ]; then
			echo "zoo_vs_torch: $m: parameter counts differ, not the same network: skipped" >&2
			status=1
			continue
		fi
		if [ "$CHECK" = 1 ]; then
			if ! (cd bench && "$PY" torch_models.py --forward "$m" --onnx "$gn" --dpfinetune "$DP") >&2; then
				echo "zoo_vs_torch: $m: logits differ, not the same network: skipped" >&2
				status=1
				continue
			fi
		fi
	else
		echo "params $m: ours $ours (dpfinetune inspect of the rewritten zoo export)" >&2
	fi
	for ((r = 0; r < ROUNDS; r++)); do
		"$CACHE/stepbench" -model "$gn" -name "$m" -batch "$batch" -classes "$CLASSES" -steps "$STEPS" -warmup "$WARMUP" | tee -a "$OUT" >&2
		if [ $torch = 1 ]; then
			(cd bench && "$PY" torch_step.py --model "$m" --batch "$batch" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP") | tee -a "$OUT" >&2
		fi
	done
done
python3 - "$OUT" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if not rows:
    sys.exit(0)
best = {}
for r in rows:
    key = (r["model"], "ours" if r["impl"] == "dpfinetune" else "torch")
    b = best.setdefault(key, {"ms": float("inf"), "peak": 0, "batch": r["batch"]})
    b["ms"] = min(b["ms"], r["step_ms_median"])
    b["peak"] = max(b["peak"], r.get("train_peak_mb") or r["maxrss_mb"])
print("| model | batch | ours ms | PyTorch ms | ratio | ours peak MB | PyTorch peak MB |")
print("|---|---|---|---|---|---|---|")
for m in dict.fromkeys(r["model"] for r in rows):
    o, t = best.get((m, "ours")), best.get((m, "torch"))
    if t:
        print("| %s | %d | %.1f | %.1f | %.2f | %.0f | %.0f |" % (m, o["batch"], o["ms"], t["ms"], o["ms"] / t["ms"], o["peak"], t["peak"]))
    else:
        print("| %s | %d | %.1f | – | – | %.0f | – |" % (m, o["batch"], o["ms"], o["peak"]))
PYEOF
exit $status
