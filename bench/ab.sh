#!/usr/bin/env bash
# Compares two dpfinetune binaries — the commit before a change ("old") and
# after it ("new") — on the benchmark suite (DESIGN.md §7), in one run:
# per model, the two binaries' `bench` alternate ROUNDS times, each a fresh
# process on the same machine, and the table gives each binary's best
# round per mode, new ÷ old, and each binary's mode ÷ nondp.
#
#   bench/ab.sh OLD_BIN NEW_BIN [models]   # default: the four suite models
#
# Environment: THREADS (2), STEPS (5), ROUNDS (2), MODES (nondp,bk,mixed),
# CACHE (the suite's ONNX exports, made by bench/torch_models.py as
# bench/run_suite.sh does; default $HOME/.cache/dpfinetune-bench; a model
# without its export falls back to zoo:NAME).
set -euo pipefail
old=${1:?usage: bench/ab.sh OLD_BIN NEW_BIN [models]}
new=${2:?usage: bench/ab.sh OLD_BIN NEW_BIN [models]}
MODELS=${3:-cnn-fmnist,resnet18-cifar,vgg11-cifar,vit-tiny-cifar}
THREADS=${THREADS:-2}
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-2}
MODES=${MODES:-nondp,bk,mixed}
CACHE=${CACHE:-$HOME/.cache/dpfinetune-bench}
declare -A BATCH=([cnn-fmnist]=256 [resnet18-cifar]=32 [vgg11-cifar]=16 [vit-tiny-cifar]=32)
export GOMAXPROCS=$THREADS OPENBLAS_NUM_THREADS=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for m in ${MODELS//,/ }; do
	model=$CACHE/$m.onnx
	[ -f "$model" ] || model=zoo:$m
	for ((r = 0; r < ROUNDS; r++)); do
		for side in old new; do
			bin=$old
			[ $side = new ] && bin=$new
			"$bin" bench --model "$model" --batch "${BATCH[$m]:-32}" --steps "$STEPS" --modes "$MODES" --json |
				python3 -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps({"model": sys.argv[1], "side": sys.argv[2], "rows": r["rows"]}))' "$m" "$side" |
				tee -a "$out" >&2
		done
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$out" "$MODES" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
modes = sys.argv[2].split(",")
best = {}
for r in rows:
    for row in r["rows"]:
        k = (r["model"], r["side"], row["mode"])
        best[k] = min(best.get(k, float("inf")), row["step_ms"])
print("| model | mode | old ms | new ms | new ÷ old | old ÷ nondp | new ÷ nondp |")
print("|---|---|---|---|---|---|---|")
for m in dict.fromkeys(r["model"] for r in rows):
    for mode in modes:
        o, n = best.get((m, "old", mode)), best.get((m, "new", mode))
        if o is None or n is None:
            continue
        o0, n0 = best[(m, "old", modes[0])], best[(m, "new", modes[0])]
        print("| %s | %s | %.1f | %.1f | %.3f | %.2f | %.2f |" % (m, mode, o, n, n / o, o / o0, n / n0))
PYEOF
