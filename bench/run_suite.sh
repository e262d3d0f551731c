#!/usr/bin/env bash
# Runs the non-DP training-step benchmark of the suite (DESIGN.md §7) on the
# runtime and, where /usr/bin/python3 has torch, on PyTorch with the same
# model, batch and thread count, alternating the two ROUNDS times per model,
# and prints a table (step time: best of the rounds' medians; memory: peak
# resident set of the process; PyTorch: the fastest of its OpenMP wait
# policies and memory formats, named in the table). Usage:
#
#   bench/run_suite.sh [models]        # default: all four
#
# Environment: THREADS (2), STEPS (20), WARMUP (3), ROUNDS (2), CACHE
# (ONNX exports; default $HOME/.cache/dpfinetune-bench), OUT (JSON lines,
# default $CACHE/results.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-2}
CACHE=${CACHE:-$HOME/.cache/dpfinetune-bench}
OUT=${OUT:-$CACHE/results.jsonl}
MODELS=${1:-cnn-fmnist,resnet18-cifar,vgg11-cifar,vit-tiny-cifar}
PY=/usr/bin/python3
declare -A BATCH=([cnn-fmnist]=256 [resnet18-cifar]=32 [vgg11-cifar]=16 [vit-tiny-cifar]=32)

mkdir -p "$CACHE"
: >"$OUT"
torch=0
if [ -x "$PY" ] && "$PY" -c 'import torch, torchvision' 2>/dev/null; then
	torch=1
	"$PY" bench/torch_models.py --out "$CACHE" --models "$MODELS" >&2
else
	echo "run_suite: $PY has no torch/torchvision: PyTorch columns skipped (ONNX exports must already be in $CACHE)" >&2
fi
go build -o "$CACHE/stepbench" ./bench/cmd/stepbench
export GOMAXPROCS=$THREADS OPENBLAS_NUM_THREADS=1
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for m in ${MODELS//,/ }; do
	onnx="$CACHE/$m.onnx"
	if [ ! -f "$onnx" ]; then
		echo "run_suite: $onnx missing, $m skipped" >&2
		continue
	fi
	for ((r = 0; r < ROUNDS; r++)); do
		"$CACHE/stepbench" -model "$onnx" -name "$m" -batch "${BATCH[$m]}" -steps "$STEPS" -warmup "$WARMUP" | tee -a "$OUT" >&2
		if [ $torch = 1 ]; then
			# PyTorch at its best (DESIGN.md §7): both OpenMP wait policies,
			# both memory formats; the table keeps the fastest and names it.
			for policy in PASSIVE default; do
				for fmt in "" --channels-last; do
					(cd bench && if [ $policy = default ]; then unset OMP_WAIT_POLICY; else export OMP_WAIT_POLICY=$policy; fi
						"$PY" torch_step.py --model "$m" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" $fmt) | tee -a "$OUT" >&2
				done
			done
		fi
	done
done
python3 - "$OUT" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
best = {}
for r in rows:
    key = (r["model"], "ours" if r["impl"] == "dpfinetune" else "torch")
    b = best.setdefault(key, {"ms": float("inf"), "rss": 0, "peak": 0, "how": ""})
    if r["step_ms_median"] < b["ms"]:
        b["ms"] = r["step_ms_median"]
        if key[1] == "torch":
            b["how"] = "%s, OMP_WAIT_POLICY=%s" % (r.get("memory_format", "contiguous"), r.get("omp_wait_policy") or "default")
    b["rss"] = max(b["rss"], r["maxrss_mb"])
    b["peak"] = max(b["peak"], r.get("train_peak_mb", 0))
models = list(dict.fromkeys(r["model"] for r in rows))
print("| model | batch | ours ms | PyTorch ms (its best settings) | ratio | ours maxRSS MB | PyTorch maxRSS MB | RSS ratio |")
print("|---|---|---|---|---|---|---|---|")
for m in models:
    o, t = best.get((m, "ours")), best.get((m, "torch"))
    batch = next(r["batch"] for r in rows if r["model"] == m)
    if t:
        print("| %s | %d | %.1f | %.1f (%s) | %.2f | %.0f | %.0f | %.2f |" % (m, batch, o["ms"], t["ms"], t["how"], o["ms"] / t["ms"], o["rss"], t["rss"], o["rss"] / t["rss"]))
    else:
        print("| %s | %d | %.1f | – | – | %.0f | – | – |" % (m, batch, o["ms"], o["rss"]))
PYEOF
