#!/usr/bin/env bash
# The DP libraries side by side with dpfinetune on the benchmark suite
# (docs/BENCHMARKS.md, "DP libraries"): Opacus, private_vision (the seed
# paper's code, mixed ghost clipping) and fastDP (book-keeping, MixOpt),
# with PyTorch's non-DP step alongside, in one run. Usage:
#
#   OPACUS_SRC=DIR PRIVATE_VISION_SRC=DIR FASTDP_SRC=DIR OPT_EINSUM_SRC=DIR bench/peers.sh [models]
#
# A library is used as its users obtain it: an installed package, or a
# directory of its sources (a pinned release or commit) named by
# OPACUS_SRC, PRIVATE_VISION_SRC or FASTDP_SRC, put on PYTHONPATH. Opacus
# needs opt_einsum (no Debian package: OPT_EINSUM_SRC, e.g. its v3.3.0) and
# scipy (python3-scipy). fastDP imports Hugging Face transformers at load
# time; where none is installed, bench/peer_shims (names only, for its type
# tests) stands in. A library that cannot be imported is skipped with its
# reason on one line. Pinned versions this script was written against
# (torch 1.13, /usr/bin/python3): Opacus v1.4.0 (later releases require
# torch ≥ 2.0), private_vision 5848437, fastDP 3d5cc56, opt_einsum v3.3.0.
#
# 1. Check: for each model, one batch of CHECK_SAMPLES samples through the
#    same weights on every side (bench/peer_step.py --export-check; torch
#    ViT's zero-initialised head and the biases are drawn non-zero so that
#    every gradient is), noise off: each library's summed clipped gradient
#    against ours (bench/cmd/clipsum, bk mode) and against the per-sample
#    definition computed one sample at a time. Where a library cannot train
#    a parameter, ours is computed with the same parameters frozen, and the
#    table says which.
# 2. Timing: ROUNDS rounds; in each, per model, PyTorch non-DP (with
#    OMP_WAIT_POLICY=PASSIVE and with the default policy, each with
#    contiguous and channels_last tensors: its best is reported and named), each library (PASSIVE) and `dpfinetune bench --modes
#    nondp,bk` run in turn, each a fresh process: σ = 1, R = 1, Adam(1e-3),
#    expected batch = physical batch, THREADS threads. Each reports the
#    median of STEPS steps after WARMUP; the table shows the best round.
#
# Environment: THREADS (2), STEPS (5), WARMUP (2), ROUNDS (2),
# CHECK_SAMPLES (8; 4 on vgg11-cifar), LIBS (opacus,private_vision,fastdp),
# CHECK (1; 0 skips part 1), TIME (1; 0 skips part 2), CACHE
# ($HOME/.cache/dpfinetune-bench), OUT (directory of the JSON lines,
# default $CACHE/peers).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-2}
CHECK=${CHECK:-1}
TIME=${TIME:-1}
LIBS=${LIBS:-opacus,private_vision,fastdp}
CACHE=${CACHE:-$HOME/.cache/dpfinetune-bench}
OUT=${OUT:-$CACHE/peers}
MODELS=${1:-cnn-fmnist,resnet18-cifar,vgg11-cifar,vit-tiny-cifar}
PY=/usr/bin/python3
declare -A BATCH=([cnn-fmnist]=256 [resnet18-cifar]=32 [vgg11-cifar]=16 [vit-tiny-cifar]=32)
declare -A MODULE=([opacus]=opacus [private_vision]=private_vision [fastdp]=fastDP)

if ! "$PY" -c 'import torch, torchvision' 2>/dev/null; then
	echo "peers: $PY has no torch/torchvision (Debian python3-torch python3-torchvision): nothing to compare" >&2
	exit 1
fi
pp=$PWD/bench
for v in OPACUS_SRC PRIVATE_VISION_SRC FASTDP_SRC OPT_EINSUM_SRC; do
	d=${!v:-}
	[ -z "$d" ] && continue
	if [ ! -d "$d" ]; then
		echo "peers: $v=$d is not a directory" >&2
		exit 2
	fi
	pp=$pp:$(cd "$d" && pwd)
done
if ! PYTHONPATH=$pp "$PY" -c 'import transformers' 2>/dev/null; then
	pp=$pp:$PWD/bench/peer_shims
fi
export PYTHONPATH=$pp${PYTHONPATH:+:$PYTHONPATH}
export GOMAXPROCS=$THREADS OPENBLAS_NUM_THREADS=1

# Which libraries import; the others are skipped with their reason.
libs=()
for lib in ${LIBS//,/ }; do
	mod=${MODULE[$lib]:-}
	if [ -z "$mod" ]; then
		echo "peers: unknown library $lib (want opacus, private_vision or fastdp)" >&2
		exit 2
	fi
	if why=$("$PY" - "$mod" 2>&1 <<'PYEOF'
import importlib, importlib.util, os, re, sys
import torch
name = sys.argv[1]
env = {"opacus": "OPACUS_SRC", "private_vision": "PRIVATE_VISION_SRC", "fastDP": "FASTDP_SRC"}[name]
spec = importlib.util.find_spec(name)
if spec is None:
    raise SystemExit("no module %s: install it or set %s to a directory of its sources" % (name, env))
if name == "opacus":
    # Opacus after 1.4.0 requires torch >= 2.0 and fails on import (torch.func):
    # say so before trying.
    vf = os.path.join(os.path.dirname(spec.origin), "version.py")
    v = re.search(r'"([0-9.]+)"', open(vf).read()).group(1) if os.path.exists(vf) else "0"
    vt = tuple(int(x) for x in v.split(".")[:3])
    tt = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    if vt > (1, 4, 0) and tt < (2, 0):
        raise SystemExit("Opacus %s requires torch >= 2.0 and this is torch %s: set OPACUS_SRC to an Opacus v1.4.0 checkout" % (v, torch.__version__))
try:
    importlib.import_module(name)
    if name == "opacus":
        import opacus.optimizers, opacus.validators  # noqa: F401
except ModuleNotFoundError as e:
    hint = {"opt_einsum": "set OPT_EINSUM_SRC to an opt_einsum v3.3.0 checkout", "scipy": "apt-get install python3-scipy"}.get(e.name, "")
    raise SystemExit("%s needs %s%s" % (name, e.name, ": " + hint if hint else ""))
PYEOF
	); then
		libs+=("$lib")
	else
		echo "peers: $lib skipped: $(echo "$why" | tail -n 1) (PYTHONPATH=$PYTHONPATH)" >&2
	fi
done
echo "peers: libraries: ${libs[*]:-none}; PyTorch $("$PY" -c 'import torch; print(torch.__version__)')" >&2

mkdir -p "$CACHE" "$OUT"
"$PY" bench/torch_models.py --out "$CACHE" --models "$MODELS" >&2
go build -o "$CACHE/dpfinetune" ./cmd/dpfinetune
go build -o "$CACHE/clipsum" ./bench/cmd/clipsum
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/machine.txt" >&2

step() { "$PY" bench/peer_step.py --threads "$THREADS" "$@"; }

if [ "$CHECK" = 1 ]; then
	: >"$OUT/check.jsonl"
	for m in ${MODELS//,/ }; do
		n=${CHECK_SAMPLES:-8}
		[ "$m" = vgg11-cifar ] && n=${CHECK_SAMPLES:-4}
		d=$CACHE/check-$m
		mkdir -p "$d"
		step --lib torch --model "$m" --write-batch "$n" --input "$d/x.npy" --labels "$d/y.npy"
		[ -f "$d/model.onnx" ] || step --lib torch --model "$m" --export-check "$d/model.onnx"
		"$CACHE/clipsum" -model "$d/model.onnx" -input "$d/x.npy" -labels "$d/y.npy" -out "$d/ours.npz"
		step --lib loop --model "$m" --check "$d/ours.npz" --input "$d/x.npy" --labels "$d/y.npy" 2>>"$OUT/check.log" | tee -a "$OUT/check.jsonl" >&2
		for lib in "${libs[@]}"; do
			ours=$d/ours.npz
			freeze=$(step --lib "$lib" --model "$m" --print-freeze 2>>"$OUT/check.log")
			if [ -n "$freeze" ]; then
				ours=$d/ours-$lib.npz
				"$CACHE/clipsum" -model "$d/model.onnx" -input "$d/x.npy" -labels "$d/y.npy" -out "$ours" -freeze "$freeze" 2>>"$OUT/check.log"
			fi
			step --lib "$lib" --model "$m" --check "$ours" --input "$d/x.npy" --labels "$d/y.npy" 2>>"$OUT/check.log" | tee -a "$OUT/check.jsonl" >&2
		done
	done
fi

if [ "$TIME" = 1 ]; then
	: >"$OUT/time.jsonl"
	for ((r = 0; r < ROUNDS; r++)); do
		for m in ${MODELS//,/ }; do
			b=${BATCH[$m]}
			args=(--model "$m" --batch "$b" --steps "$STEPS" --warmup "$WARMUP")
			for fmt in "" --channels-last; do
				OMP_WAIT_POLICY=PASSIVE step --lib torch "${args[@]}" $fmt 2>>"$OUT/time.log" | tee -a "$OUT/time.jsonl" >&2
				(unset OMP_WAIT_POLICY; step --lib torch "${args[@]}" $fmt) 2>>"$OUT/time.log" | tee -a "$OUT/time.jsonl" >&2
			done
			for lib in "${libs[@]}"; do
				OMP_WAIT_POLICY=PASSIVE step --lib "$lib" "${args[@]}" 2>>"$OUT/time.log" | tee -a "$OUT/time.jsonl" >&2
			done
			"$CACHE/dpfinetune" bench --model "$CACHE/$m.onnx" --batch "$b" --steps "$STEPS" --modes nondp,bk --json |
				"$PY" -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps({"model": sys.argv[1], "lib": "dpfinetune", "batch": r["batch"], "threads": r["threads"], "rows": r["rows"]}))' "$m" |
				tee -a "$OUT/time.jsonl" >&2
		done
	done
fi

"$PY" bench/peers_table.py "$OUT"
