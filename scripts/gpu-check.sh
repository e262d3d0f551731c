#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one command (issue 14): for a machine
# with an NVIDIA GPU and no network (the driver; PyTorch with CUDA for the
# baseline rows). It
#   1. runs the CUDA backend's tests on the real driver
#      (DPFINETUNE_CUDA=gpu: every operation against the CPU and the
#      reference backend, the noise bit for bit, every fixture plan);
#   2. compares `dpfinetune norms --device cuda` with `--device cpu` on
#      every fixture that has a golden batch (bk and ghost modes);
#   3. benchmarks `dpfinetune bench --device cuda` (nondp, bk, mixed) on
#      ResNet-50, ViT-B/16 and VGG-16 at 224×224 and VGG-19 on CIFAR, and
#      PyTorch's non-DP step on the same GPU (bench/torch_gpu_step.py), both
#      in float32; for the convolutional models also both with TF32
#      convolutions (PyTorch's default precision, dpfinetune's --tf32):
#      step times and peak device memory (ours: each mode's, on the device
#      opened afresh; PyTorch's: torch.cuda.max_memory_allocated); ResNet-50
#      once more with cuDNN off (DPFINETUNE_CUDNN=off: the convolutions as
#      cuBLAS GEMMs), what cuDNN buys, and the convolutional models with
#      cuDNN's algorithms chosen by its heuristics
#      (DPFINETUNE_CUDNN_ALGO=heuristic) instead of its measurement, the
#      default, with its deterministic algorithms only
#      (DPFINETUNE_CUDNN_DETERMINISTIC=on, as a seeded run; since the
#      fourteenth session bench, as train with secure noise, also lets
#      cuDNN take its nondeterministic ones, as PyTorch does), and
#      with cuDNN wherever it runs a shape (DPFINETUNE_CUDNN_GEMM=off)
#      instead of the default measured choice between cuDNN and the GEMM
#      path per shape and product, and VGG-16 with cuDNN's workspace
#      bounded at 256 MiB as before the tenth session
#      (DPFINETUNE_CUDNN_WORKSPACE=256), what the larger bound buys;
#   5. (part maxbatch) the largest physical batch that runs on the GPU
#      (paper Table 6: VGG-19 on CIFAR-10), ours per mode (nondp, bk,
#      mixed, and instantiate: Opacus's method, every per-sample gradient
#      kept), PyTorch's non-DP step and Opacus's method in PyTorch
#      (bench/torch_gpu_step.py --dp persample, where Opacus itself is not
#      installed), each found by doubling then
#      bisection (to 1/16) over one-step runs in fresh processes;
#   6. (part profile) the operation profile (DPFINETUNE_CUDA_PROFILE) of
#      ResNet-50 and VGG-16 (with cuDNN, with TF32 convolutions, and
#      without cuDNN) and ViT-B/16: where a step's time goes, per operation
#      and per kernel; and PyTorch's own non-DP step of ResNet-50 and
#      ViT-B/16 under torch.profiler (torch-profile-*.txt), its kernels;
#   4. exports real timm models (BEiT-B/16, CrossViT-Ti; random weights,
#      bench/timm_export.py) and runs each through `norms --device cuda`
#      against --device cpu (two samples, bk) and one epoch of `train
#      --device cuda` on the shipped Fashion-MNIST sample (resized to the
#      model's input);
#   7. (part dynamo) exports torchvision and timm models (random weights)
#      with PyTorch's default exporter since 2.9, the dynamo one
#      (bench/dynamo_export.py: its default opset and 23), and takes each
#      export through inspect (the operators we refuse), plan, predict
#      against PyTorch's logits and a two-step train on the GPU.
# Everything goes under OUT (default gpu-check-out): machine.txt, the logs,
# norms.jsonl, bench.jsonl and bench.md, timm.jsonl and timm.md,
# dynamo.jsonl, dynamo.md and dynamo/ (part 7's reports), maxbatch.jsonl and maxbatch.md, profile-*.txt, torch-profile-*.txt, convs-resnet50.md (the
# profile's convolutions by shape beside PyTorch's), peak-*.txt (bk's device
# peak by allocation, DPFINETUNE_CUDA_PEAK), cudnn-algos-*.json (the
# convolution choices the machine measured and kept; choices.md, the
# per-sample gradients' among them), and summary.md (bench.md,
# timm.md, dynamo.md, maxbatch.md, choices.md, the peak records) to paste into docs/BENCHMARKS.md.
#
#   scripts/gpu-check.sh [OUT]
#
# Go is needed only to build: with go on PATH the script builds
# bin/dpfinetune and bin/cuda.test; without it (or with GPU_CHECK_PREBUILT=1),
# it runs the ones already in bin/ (build them elsewhere with `GPU_CHECK_BUILD_ONLY=1
# scripts/gpu-check.sh` and carry bin/ over). GPU_CHECK_BIN=DIR: the
# binaries' folder instead of bin/ (built there, or with GPU_CHECK_PREBUILT=1
# taken from there; cuda.test only where part tests runs). GPU_CHECK_EMULATE=1 is a dry
# run on the CUDA emulation (any machine with g++): the same steps, with two
# small models at batch 2 for the benchmarks and no PyTorch rows, on the
# emulation's guarded form (DPFINETUNE_CUDA=emulate-guarded: a host read of
# device memory faults, as on the GPU). Environment: STEPS (5), BATCH224
# (32), PY (the first of python3, /usr/bin/python3 that has numpy); TIMM
# (beit_base_patch16_224,crossvit_tiny_240); PARTS ("tests norms bench timm
# dynamo maxbatch profile cache": the steps to run, so that a short GPU loan can split
# them over calls with the same OUT, each part rewriting only its own
# files); BENCH_VARIANTS (the benchmark rows beside each model's default:
# "gemm heuristic deterministic cudnn workspace256 tf32"); BENCH_MODELS
# (the benchmarks' models, of resnet50 vit_b_16 vgg16 cifar_vgg19 on a GPU:
# all by default);
# MB_ROWS (the largest-batch rows, IMPL:MODE, in order); DYN_* (part
# dynamo's, described there); BUDGET_S (0: none): seconds after which the norms and benchmarks
# still to come are skipped and said so, the summary still written. On an
# H100 (2026-11-26) the parts took: tests 52-57 s, norms 30 s, bench 140 s,
# timm 56 s, a profile row about 5 s, maxbatch 230 s from MB_START=2048
# (before its instantiate and per-sample rows; PyTorch's search unfinished:
# its large batches take seconds a step); on 2026-11-27 dynamo (16 models,
# two opsets, BUDGET_S=165) about 170 s, tests 60 s, and bench with
# BENCH_VARIANTS="deterministic tf32" 70 s a 224² model; on the sixth loan
# (same day) tests 55 s, dynamo of three models at one opset about 285 s
# (their exports 20-33 s each; a check that times out costs its whole
# DYN_CHECK_TIMEOUT), the profile part's first five rows with the
# convolution table and PyTorch's two profiles about 100 s. A part's checks
# already started run past BUDGET_S (dynamo's by up to DYN_CHECK_TIMEOUT
# each): an outer `timeout` shorter than that loses the part's tables,
# and the models it had not yet removed swell GPU_CHECK_TAR.
# A machine that returns only a few files: GPU_CHECK_TAR=FILE.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-check-out}
STEPS=${STEPS:-5}
BATCH224=${BATCH224:-32}
if [ -z "${PY:-}" ]; then # the first Python with numpy (and torch, for the baseline rows)
	for PY in python3 /usr/bin/python3; do "$PY" -c 'import numpy' 2>/dev/null && break; done
fi
BIN=${GPU_CHECK_BIN:-bin}
mkdir -p "$OUT" "$BIN"
BIN=$(cd "$BIN" && pwd) # absolute: part 1 runs its binary from runtime/cuda
if command -v go >/dev/null && [ "${GPU_CHECK_PREBUILT:-}" != 1 ]; then
	go build -o "$BIN"/dpfinetune ./cmd/dpfinetune || exit 1
	go test -c -o "$BIN"/cuda.test ./runtime/cuda || exit 1
fi
[ "${GPU_CHECK_BUILD_ONLY:-}" = 1 ] && exit 0
for b in "$BIN"/dpfinetune "$BIN"/cuda.test; do
	case $b in */cuda.test) case " ${PARTS:-tests} " in *" tests "*) ;; *) continue ;; esac ;; esac # only part 1 runs it
	[ -x "$b" ] || { echo "gpu-check: $b missing (no go here to build it)" >&2; exit 1; }
done
mode=gpu
if [ "${GPU_CHECK_EMULATE:-}" = 1 ]; then
	mode=emulate
	BATCH224=2
	STEPS=1
fi
export DPFINETUNE_CUDA=$mode
[ $mode = emulate ] && export DPFINETUNE_CUDA=emulate-guarded
# cuBLAS and NVRTC: the binary looks on the loader's path, in the usual
# places of PyTorch's NVIDIA wheels and under /usr/local/cuda; a Python
# whose wheels lie elsewhere names its own here.
wheel_lib() { # VAR GLOB: VAR, unless set, to the first GLOB among the wheels
	[ -n "${!1:-}" ] && return
	local f
	f=$("$PY" -c 'import glob, os, sys
try:
    import nvidia
except ImportError:
    sys.exit()
for d in nvidia.__path__:
    for f in sorted(glob.glob(os.path.join(d, "*", "lib", sys.argv[1])), reverse=True):
        print(f); sys.exit()' "$2" 2>/dev/null)
	[ -n "$f" ] && export "$1=$f"
}
if [ $mode = gpu ]; then
	wheel_lib DPFINETUNE_CUBLAS 'libcublas.so.1[1-9]*'
	wheel_lib DPFINETUNE_NVRTC 'libnvrtc.so.1[1-9]*'
	wheel_lib DPFINETUNE_CUDNN 'libcudnn.so.[89]*'
fi
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "driver: $mode"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
	echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "cublas: ${DPFINETUNE_CUBLAS:-searched}; nvrtc: ${DPFINETUNE_NVRTC:-searched}; cudnn: ${DPFINETUNE_CUDNN:-searched}"
	"$PY" -c 'import torch; print("torch:", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo "torch: none"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >&2
status=0
PARTS=${PARTS:-tests norms bench timm dynamo maxbatch profile cache}
TIMM=${TIMM:-beit_base_patch16_224,crossvit_tiny_240}
BUDGET_S=${BUDGET_S:-0}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
late() { [ "$BUDGET_S" -gt 0 ] && [ "$SECONDS" -ge "$BUDGET_S" ]; }
tmp=$(mktemp -d)
# GPU_CHECK_TAR=FILE: OUT also as one tarball, written when the script
# ends (a timeout's TERM included), for machines that return few files.
finish() {
	rm -rf "$tmp"
	# The convolution choices this machine measured and kept: cuDNN's
	# algorithms, and cuDNN against the GEMM path per shape and product
	# with both times (runtime/cuda/cudnn_choices.go).
	cp "${DPFINETUNE_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dpfinetune}"/cuda/cudnn-algos-*.json "$OUT"/ 2>/dev/null || true
	[ -n "${GPU_CHECK_TAR:-}" ] && tar czf "$GPU_CHECK_TAR" -C "$(dirname "$OUT")" "$(basename "$OUT")"
}
trap finish EXIT
trap 'exit 143' TERM

if has tests; then
echo "== 1. CUDA backend tests ($mode)" >&2
if (cd runtime/cuda && "$BIN"/cuda.test -test.count=1 -test.v) >"$OUT/cuda-test.log" 2>&1; then
	echo "pass: $(grep -c '^--- PASS' "$OUT/cuda-test.log") tests, $(grep -c '^--- SKIP' "$OUT/cuda-test.log") skipped" >&2
else
	status=1
	echo "FAIL (see $OUT/cuda-test.log):" >&2
	grep -A5 '^--- FAIL' "$OUT/cuda-test.log" | head -40 >&2
fi
fi

if has norms; then
echo "== 2. norms --device cuda against --device cpu" >&2
: >"$OUT/norms.jsonl"
for gd in testdata/golden/*.npz; do
	name=$(basename "$gd" .npz)
	if late; then
		echo "{\"model\": \"$name\", \"skipped\": \"BUDGET_S spent\"}" | tee -a "$OUT/norms.jsonl" >&2
		continue
	fi
	model=testdata/models/$name.onnx
	[ -f "$model" ] || continue
	"$PY" - "$gd" "$tmp/$name" <<'PYEOF' || continue
import sys, numpy as np
z = np.load(sys.argv[1])
if "input" not in z or "labels" not in z:
    sys.exit(1)
np.save(sys.argv[2] + "-x.npy", z["input"].astype(np.float32))
np.save(sys.argv[2] + "-y.npy", z["labels"].astype(np.int64))
PYEOF
	for m in bk ghost; do
		for d in cpu cuda; do
			"$BIN"/dpfinetune norms --device $d --model "$model" --input "$tmp/$name-x.npy" --labels "$tmp/$name-y.npy" --mode $m --json >"$tmp/$name-$m-$d.json" 2>>"$OUT/norms.log" ||
				echo "{\"error\": \"norms --device $d failed\"}" >"$tmp/$name-$m-$d.json"
		done
		"$PY" - "$name" "$m" "$tmp/$name-$m-cpu.json" "$tmp/$name-$m-cuda.json" <<'PYEOF' | tee -a "$OUT/norms.jsonl" >&2
import json, sys
name, mode, a, b = sys.argv[1:5]
cpu, gpu = json.load(open(a)), json.load(open(b))
if "error" in cpu or "error" in gpu:
    print(json.dumps({"model": name, "mode": mode, "ok": False, "error": cpu.get("error") or gpu.get("error")}))
    sys.exit()
t0, t1 = cpu["total"], gpu["total"]
rel = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(t0, t1)) if t0 else 0.0
print(json.dumps({"model": name, "mode": mode, "samples": len(t0), "max_rel": rel, "ok": len(t0) == len(t1) and rel <= 1e-4}))
PYEOF
	done
done
grep -q '"ok": false' "$OUT/norms.jsonl" && status=1
fi

if has bench; then
echo "== 3. benchmarks" >&2
: >"$OUT/bench.jsonl"
ours() { # name batch modes [--tf32]; CONVS=gemm: with DPFINETUNE_CUDNN=off; classes: bench's (the head PyTorch's row has)
	"$BIN"/dpfinetune bench --device cuda --model "zoo:$1" --batch "$2" --num-classes "${classes:-10}" --steps "$STEPS" --modes "$3" ${4:-} --json 2>>"$OUT/bench.log" |
		"$PY" -c 'import json, sys; r = json.load(sys.stdin); print(json.dumps({"model": sys.argv[1], "impl": "dpfinetune", "tf32": r.get("tf32", False), "convs": sys.argv[2], "batch": r["batch"], "rows": r["rows"]}))' "$1" "${CONVS:-library}" |
		tee -a "$OUT/bench.jsonl" >&2 || echo "{\"model\": \"$1\", \"impl\": \"dpfinetune\", \"tf32\": $([ -n "${4:-}" ] && echo true || echo false), \"error\": \"see bench.log\"}" >>"$OUT/bench.jsonl"
}
# BENCH_VARIANTS: the rows beside each model's default one (all by
# default; empty: none); a short loan names fewer, e.g. BENCH_VARIANTS=tf32.
BENCH_VARIANTS=${BENCH_VARIANTS-gemm heuristic deterministic cudnn workspace256 tf32}
variant() { case " $BENCH_VARIANTS " in *" $1 "*) return 0 ;; esac; return 1; }
torch() { # name batch size classes tf32 [dp]
	(cd bench && "$PY" torch_gpu_step.py --model "$1" --batch "$2" --size "$3" --classes "$4" --steps 20 --tf32 "$5" --dp "${6:-none}") 2>>"$OUT/bench.log" | tee -a "$OUT/bench.jsonl" >&2
}
bench() { # name batch size classes: float32 on both sides; for convolutional
	# models also TF32 convolutions on both (PyTorch's default precision,
	# dpfinetune's --tf32, which ghost and mixed refuse). Both sides have
	# the same head (until the twelfth session ours had 10 classes against
	# PyTorch's 1000 at 224²: 32 MiB less for ResNet-50's bk, 64 for VGG-16's).
	local classes=$4
	case " ${BENCH_MODELS:-$1} " in *" $1 "*) ;; *) return ;; esac
	if late; then
		echo "{\"model\": \"$1\", \"impl\": \"dpfinetune\", \"error\": \"skipped: BUDGET_S spent\"}" | tee -a "$OUT/bench.jsonl" >&2
		return
	fi
	ours "$1" "$2" nondp,bk,mixed
	[ $mode = gpu ] && torch "$1" "$2" "$3" "$4" off
	# One model also with cuDNN off: the convolutions as cuBLAS GEMMs,
	# what cuDNN buys (the emulation has no cuDNN: the row runs the path).
	if [ "$1" = "$GEMM_ROW" ] && variant gemm && ! late; then
		CONVS=gemm DPFINETUNE_CUDNN=off ours "$1" "$2" nondp,bk
	fi
	# The convolutional models also with cuDNN's algorithms chosen by its
	# heuristics (DPFINETUNE_CUDNN_ALGO=heuristic) rather than its
	# measurement, the default (kept on disk after the first run: the rows
	# above measured the shapes, this row's and later runs' read them).
	case $1 in vit*) ;; *) variant heuristic && ! late && CONVS=heuristic DPFINETUNE_CUDNN_ALGO=heuristic ours "$1" "$2" nondp,bk ;; esac
	# And with cuDNN's deterministic algorithms only
	# (DPFINETUNE_CUDNN_DETERMINISTIC=on, as a seeded run): bench lets it
	# take its nondeterministic ones too, as PyTorch's default does.
	case $1 in vit*) ;; *) variant deterministic && ! late && CONVS=deterministic DPFINETUNE_CUDNN_DETERMINISTIC=on ours "$1" "$2" nondp,bk ;; esac
	# And with cuDNN wherever it takes a shape (DPFINETUNE_CUDNN_GEMM=off):
	# the default measures each product against the GEMM path and keeps
	# the faster, this row what that choice buys.
	case $1 in vit*) ;; *) variant cudnn && ! late && CONVS=cudnn DPFINETUNE_CUDNN_GEMM=off ours "$1" "$2" nondp,bk ;; esac
	# VGG-16 with cuDNN's workspace bounded as before (256 MiB): its
	# 256- and 512-channel convolutions' FFT and Winograd algorithms ask
	# for more (docs/BENCHMARKS.md, tenth session).
	case $1 in vgg16) variant workspace256 && ! late && CONVS=workspace256 DPFINETUNE_CUDNN_WORKSPACE=256 ours "$1" "$2" nondp,bk ;; esac
	case $1 in vit*) return ;; esac
	variant tf32 || return 0
	ours "$1" "$2" nondp,bk --tf32
	[ $mode = gpu ] && torch "$1" "$2" "$3" "$4" default
	# Opacus's method in PyTorch (every per-sample gradient materialized,
	# torch_gpu_step.py --dp persample) on the model without BatchNorm.
	[ $mode = gpu ] && [ "$1" = cifar_vgg19 ] && ! late && torch "$1" "$2" "$3" "$4" off persample
}
if [ $mode = gpu ]; then
	GEMM_ROW=resnet50
	bench resnet50 "$BATCH224" 224 1000
	bench vit_b_16 "$BATCH224" 224 1000
	bench vgg16 "$BATCH224" 224 1000
	bench cifar_vgg19 64 32 10
else # the dry run: the emulation's kernels are the plainest, so small models
	GEMM_ROW=cifar_resnet18
	bench cnn-fmnist 2 28 10
	bench cifar_resnet18 2 32 10
fi
# Where bk's device peak goes (DPFINETUNE_CUDA_PEAK): the allocations held
# at it, summed by the code that asked, and cuDNN's workspace beside them
# (peak-MODEL.txt) — what the memory target (1.1× PyTorch's) cuts from.
peak() { # name batch classes
	if late; then
		echo "peak $1: skipped, BUDGET_S spent" >&2
		return
	fi
	DPFINETUNE_CUDA_PEAK=1 "$BIN"/dpfinetune bench --device cuda --model "zoo:$1" --batch "$2" --num-classes "$3" --steps 1 --modes bk >"$OUT/peak-$1.txt" 2>&1 ||
		echo "peak $1: exit $? (see peak-$1.txt)" >&2
	grep -A6 '^cuda peak' "$OUT/peak-$1.txt" | sed "s/^/$1: /" >&2
}
if [ $mode = gpu ]; then
	peak resnet50 "$BATCH224" 1000
else
	peak cifar_resnet18 2 10
fi
"$PY" - "$OUT/bench.jsonl" "$OUT/machine.txt" >"$OUT/bench.md" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
print("GPU check, " + open(sys.argv[2]).read().replace("\n", "; ") + "\n")
print("Each row sets dpfinetune beside PyTorch's non-DP step at the same precision: float32,")
print("or TF32 convolutions (PyTorch's default; dpfinetune's --tf32, weight gradients and norms float32).\n")
print("| model (batch) | precision | PyTorch non-DP ms (peak MiB) | nondp ms | bk ms (× PyTorch) | mixed ms | bk device peak MiB (× PyTorch) |")
print("|---|---|---|---|---|---|---|")
torch = [r for r in rows if str(r.get("impl", "")).startswith("pytorch-") and not r["impl"].startswith("pytorch-persample")]
persample = [r for r in rows if str(r.get("impl", "")).startswith("pytorch-persample")]
for r in rows:
    if r.get("impl") != "dpfinetune":
        continue
    name, tf32 = r["model"], bool(r.get("tf32"))
    prec = "TF32 convs" if tf32 else "float32"
    if r.get("convs") == "gemm":
        prec += ", convs as GEMMs (cuDNN off)"
    if r.get("convs") == "heuristic":
        prec += ", cuDNN's algorithms by heuristics"
    if r.get("convs") == "nondeterministic":  # before the fourteenth session's default allowed them
        prec += ", cuDNN's nondeterministic algorithms allowed"
    if r.get("convs") == "deterministic":
        prec += ", cuDNN's deterministic algorithms only (a seeded run's)"
    if r.get("convs") == "cudnn":
        prec += ", cuDNN wherever it runs (not measured against GEMMs)"
    if r.get("convs") == "workspace256":
        prec += ", cuDNN's workspace at most 256 MiB (before the tenth session)"
    if "error" in r:
        print("| %s | %s | | error: %s | | | |" % (name, prec, r["error"]))
        continue
    t = next((x for x in torch if x["model"] == name and bool(x.get("cudnn_tf32")) == tf32), None)
    by = {x["mode"]: x for x in r["rows"]}
    base = t["step_ms_median"] if t else None
    bk = by.get("bk", {}).get("step_ms")
    mixed = by.get("mixed", {}).get("step_ms")
    peak = by.get("bk", {}).get("device_peak_bytes", 0) / 2**20
    print("| %s (%d) | %s | %s | %.1f | %s%s | %s | %s%s |" % (
        name, r["batch"], prec, "%.1f (%.0f)" % (base, t["peak_mib"]) if t else "–", by["nondp"]["step_ms"],
        "%.1f" % bk if bk is not None else "–", " (%.2f×)" % (bk / base) if base and bk else "",
        "%.1f" % mixed if mixed is not None else "–",
        "%.0f" % peak if peak else "–", " (%.2f×)" % (peak / t["peak_mib"]) if t and peak else ""))
for r in persample:
    print("\nOpacus's method in PyTorch (`torch_gpu_step.py --dp persample`: every per-sample gradient materialized, clipped, summed, noised; float32), %s at batch %d: %.1f ms a step, peak %.0f MiB." % (
        r["model"], r["batch"], r["step_ms_median"], r["peak_mib"]))
PYEOF
fi

if has timm; then
echo "== 4. timm models: norms and train --device cuda" >&2
: >"$OUT/timm.jsonl"
"$PY" bench/timm_export.py --out "$tmp/timm" --models "$TIMM" 2>>"$OUT/timm.log" >"$tmp/timm-export.jsonl"
while IFS= read -r line; do
	name=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])["model"])' "$line")
	model=$tmp/timm/$name.onnx
	if ! [ -f "$model" ] || late; then # no export (an error; no timm here: skipped), or no time left
		"$PY" -c 'import json, sys
r = json.loads(sys.argv[1])
if "skipped" in r or "onnx" in r:
    print(json.dumps({"model": r["model"], "skipped": r.get("skipped", "BUDGET_S spent")}))
else:
    print(json.dumps({"model": r["model"], "ok": False, "error": r.get("error", "no export")}))' "$line" | tee -a "$OUT/timm.jsonl" >&2
		continue
	fi
	for d in cpu cuda; do
		"$BIN"/dpfinetune norms --device $d --model "$model" --input "$tmp/timm/$name-x.npy" --labels "$tmp/timm/$name-y.npy" --mode bk --json \
			>"$tmp/$name-norms-$d.json" 2>>"$OUT/timm.log" || echo '{"error": "norms failed"}' >"$tmp/$name-norms-$d.json"
	done
	start=$SECONDS
	"$BIN"/dpfinetune train --device cuda --model "$model" --data idx:testdata/fmnist-small:limit=64 --num-classes 10 \
		--epsilon 8 --batch-size 16 --physical-batch 8 --epochs 1 --seed 1 --out "$tmp/$name-tuned.onnx" >"$tmp/$name-train.log" 2>&1
	rc=$?
	cat "$tmp/$name-train.log" >>"$OUT/timm.log"
	"$PY" - "$line" "$tmp/$name-norms-cpu.json" "$tmp/$name-norms-cuda.json" "$tmp/$name-train.log" "$rc" "$((SECONDS - start))" <<'PYEOF' | tee -a "$OUT/timm.jsonl" >&2
import json, sys
meta = json.loads(sys.argv[1])
cpu, gpu = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
log = open(sys.argv[4]).read().strip().splitlines()
row = {"model": meta["model"], "params": meta.get("params"), "exporter": meta.get("exporter"), "timm": meta.get("timm")}
if "error" in cpu or "error" in gpu:
    row["norms_error"] = cpu.get("error") or gpu.get("error")
else:
    t0, t1 = cpu["total"], gpu["total"]
    row["norms_max_rel"] = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(t0, t1))
row["train_exit"] = int(sys.argv[5])
row["train_s"] = int(sys.argv[6])
row["train_last"] = log[-1] if log else ""
row["ok"] = row["train_exit"] == 0 and row.get("norms_max_rel", 1) <= 1e-4
print(json.dumps(row))
PYEOF
done <"$tmp/timm-export.jsonl"
grep -q '"ok": false' "$OUT/timm.jsonl" && status=1
"$PY" - "$OUT/timm.jsonl" >"$OUT/timm.md" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
print("\ntimm models (random weights) through `norms` (bk, 2 samples, cuda against cpu) and one epoch of `train --device cuda`:\n")
print("| model | parameters | exporter | norms max rel (cuda vs cpu) | train (exit, s) | train's last line |")
print("|---|---|---|---|---|---|")
for r in rows:
    if "train_exit" not in r:
        print("| %s | | | | | %s |" % (r["model"], "skipped: " + r["skipped"] if "skipped" in r else "error: " + r.get("error", "")))
        continue
    nm = "%.1e" % r["norms_max_rel"] if "norms_max_rel" in r else "error: " + r.get("norms_error", "")
    print("| %s | %s | %s | %s | %d, %d | %s |" % (r["model"], "{:,}".format(r["params"]) if r.get("params") else "", r.get("exporter", ""),
        nm, r["train_exit"], r["train_s"], r["train_last"].replace("|", "/")))
PYEOF
fi
if has dynamo; then
echo "== 7. PyTorch's default ONNX exporter (dynamo): inspect, plan, predict, train" >&2
# Since PyTorch 2.9 torch.onnx.export(model, args, path) is the dynamo
# (torch.export-based) exporter, opset 18 unless asked. bench/dynamo_export.py
# exports DYN_MODELS (default: its own list, ten torchvision models and six
# timm ones where the installed timm has them; random weights) at each of
# DYN_OPSETS (default,23: the exporter's own, and 23, whose
# scaled_dot_product_attention is the Attention operator), DYN_EXPORT_JOBS
# models at once (default: half the cores, at most 6), each model's exports
# killed after DYN_TIMEOUT s (120; the dry run 300). As each export arrives, DYN_JOBS (4; the
# dry run 1) at once, it goes through `inspect` (CheckOps: the operators the
# runtime refuses), `plan` (the rewrite and its report), `predict` of its
# two samples on DYN_PREDICT_DEVICES (cpu and cuda; the dry run cpu) against
# PyTorch's float32 logits, and a short `train` on DYN_DEVICE (cuda; the dry
# run cpu): the timm part's Fashion-MNIST sample, resized to the model's
# input, cut to 16 samples at a logical batch of 8 (about two steps) and
# evaluated on 16; each command killed after DYN_CHECK_TIMEOUT s (60; the
# dry run 180). BUDGET_S: models not started by then are not exported,
# exports still running are killed, and exports that arrive after it are
# not checked (their rows say so): the part ends within about
# DYN_CHECK_TIMEOUT s of it.
# Writes dynamo.jsonl, dynamo.md and dynamo/ (export.jsonl, export.log;
# per export STEM.inspect.json, STEM.plan.json, the logs, and
# STEM.nodata.onnx: the graph without its large weights' bytes, its
# integer constants kept, to read and run here later). The models (hundreds of MiB) and their samples are removed after
# their checks unless DYN_KEEP=1. The part sets the exit status 1 only
# where predict disagrees with PyTorch (max |Δ| above DYN_TOL, 1e-4, of the
# largest |logit|): a refused operator or a failed train is a finding, not
# a failure of the check. Without the dynamo exporter (PyTorch < 2.5, or no
# onnxscript) every row says skipped; DYN_EXPORTER=torchscript (dynamo=False,
# opset 17) takes the dry run through the same checks on an old PyTorch.
# DYN_FIXED_BATCH=1 exports without dynamic axes (the batch of 2 fixed, as
# users who pass no dynamic_shapes export): the loader's release of a fixed
# batch on the exporter's own graphs. DYN_HALF=1 exports model.half() from
# the GPU (float16; the logits compared are the float32 model's with its
# weights and input rounded through float16, which is what the loader's
# widening computes).
# Expected on the H100 machine (16 cores), 16 models × 2 opsets: 60-90 s of
# exports in parallel (a heavy model such as MaxViT or BEiT-B about 20-40 s
# for its two), the checks alongside (about 1-2 s for inspect, plan and
# the CPU predict, 5-15 s for the cuda predict and train of an export):
# about 2-3 minutes in all (not measured yet). GPU_CHECK_EMULATE=1
# PARTS=dynamo on a PyTorch without the dynamo exporter: skipped rows in
# seconds; with DYN_EXPORTER=torchscript about a minute on 2 cores.
D=$OUT/dynamo
rm -rf "$D" "$OUT/dynamo.jsonl" "$OUT/dynamo.md"
mkdir -p "$D" "$tmp/dyn"
DYN_EXPORTER=${DYN_EXPORTER:-dynamo}
DYN_OPSETS=${DYN_OPSETS:-default,23}
DYN_TOL=${DYN_TOL:-1e-4}
if [ $mode = gpu ]; then
	DYN_TIMEOUT=${DYN_TIMEOUT:-120}
	DYN_CHECK_TIMEOUT=${DYN_CHECK_TIMEOUT:-60}
	DYN_MODELS=${DYN_MODELS:-} # empty: bench/dynamo_export.py's list
	DYN_JOBS=${DYN_JOBS:-4}
	DYN_DEVICE=${DYN_DEVICE:-cuda}
	DYN_PREDICT_DEVICES=${DYN_PREDICT_DEVICES:-cpu cuda}
else # the dry run: two models, the checks on the CPU (the emulation would take minutes for ViT-B/16)
	DYN_TIMEOUT=${DYN_TIMEOUT:-300}
	DYN_CHECK_TIMEOUT=${DYN_CHECK_TIMEOUT:-180} # ViT-B/16's train takes about 40 s on 2 cores
	DYN_MODELS=${DYN_MODELS:-resnet18,vit_b_16}
	DYN_JOBS=${DYN_JOBS:-1}
	DYN_DEVICE=${DYN_DEVICE:-cpu}
	DYN_PREDICT_DEVICES=${DYN_PREDICT_DEVICES:-cpu}
fi
tmo() { # SECONDS CMD...: CMD, ended after SECONDS (exit 124) where coreutils' timeout is
	local s=$1
	shift
	if command -v timeout >/dev/null; then timeout -k 5 "$s" "$@"; else "$@"; fi
}
# dyn_check N LINE: one export line's checks; its row to $tmp/dyn/N.json.
dyn_check() {
	local n=$1 line=$2 fields onnx x shape extra e p d rc_inspect rc_plan=- rc_train=- start train_s=0
	mapfile -t fields < <("$PY" -c 'import json, sys
r = json.loads(sys.argv[1])
for v in (r.get("onnx"), r.get("x"), ",".join(str(d) for d in r.get("input") or []), " ".join(r.get("external_files") or [])):
    print(v or "")' "$line")
	onnx=${fields[0]:-} x=${fields[1]:-} shape=${fields[2]:-} extra=${fields[3]:-}
	if [ -z "$onnx" ] || ! [ -f "$onnx" ]; then # skipped, or the export failed: the line is the row
		printf '%s\n' "$line" >"$tmp/dyn/$n.json"
		return
	fi
	e=$(basename "$onnx" .onnx)
	p=$D/$e
	if late; then
		"$PY" -c 'import json, sys; r = json.loads(sys.argv[1]); r["checks_skipped"] = "BUDGET_S spent"; print(json.dumps(r))' "$line" >"$tmp/dyn/$n.json"
	else
		tmo "$DYN_CHECK_TIMEOUT" "$BIN"/dpfinetune inspect --model "$onnx" --json >"$p.inspect.json" 2>"$p.inspect.err"
		rc_inspect=$?
		if [ $rc_inspect = 0 ]; then # a refused model: plan, predict and train would refuse it the same way
			tmo "$DYN_CHECK_TIMEOUT" "$BIN"/dpfinetune plan --model "$onnx" --input-shape "$shape" --batch 8 --num-classes 10 --json \
				>"$p.plan.json" 2>"$p.plan.err"
			rc_plan=$?
			for d in $DYN_PREDICT_DEVICES; do
				tmo "$DYN_CHECK_TIMEOUT" "$BIN"/dpfinetune predict --device "$d" --model "$onnx" --input "$x" --out "$p.pred-$d.npy" >"$p.pred-$d.log" 2>&1
				echo $? >"$p.pred-$d.rc"
			done
			start=$SECONDS
			tmo "$DYN_CHECK_TIMEOUT" "$BIN"/dpfinetune train --device "$DYN_DEVICE" --model "$onnx" --data idx:testdata/fmnist-small:limit=16 \
				--test-data idx:testdata/fmnist-small:test:limit=16 \
				--num-classes 10 --epsilon 8 --batch-size 8 --physical-batch 8 --epochs 1 --seed 1 --quiet \
				--out "$tmp/dyn/$e-tuned.onnx" >"$p.train.log" 2>&1
			rc_train=$?
			train_s=$((SECONDS - start))
			rm -f "$tmp/dyn/$e-tuned".*
		fi
		"$PY" - "$line" "$p" "$rc_inspect" "$rc_plan" "$rc_train" "$train_s" "$DYN_PREDICT_DEVICES" "$DYN_TOL" "$DYN_DEVICE" >"$tmp/dyn/$n.json" <<'PYEOF'
import collections, json, sys
import numpy as np
line, p, rc_i, rc_p, rc_t, train_s, devs, tol, tdev = sys.argv[1:10]
row, tol = json.loads(line), float(tol)


def tail(path, n=1):
    try:
        lines = [l.strip() for l in open(path, errors="replace") if l.strip()]
    except OSError:
        return ""
    return " / ".join(lines[-n:])[:600]


def why(rc, path):
    return "timeout (DYN_CHECK_TIMEOUT)" if rc in (124, 137) else tail(path) or "exit %d" % rc


row["inspect_exit"] = int(rc_i)
try:
    ins = json.load(open(p + ".inspect.json"))
except (OSError, ValueError):
    ins = None
if ins is not None:
    uns = ins.get("unsupported") or []
    row["refused"] = dict(collections.Counter("%s: %s" % (u["op"], u["reason"]) for u in uns))  # op and reason: nodes
    row["refused_ops"] = sorted({u["op"] for u in uns})
    row["parameters"] = ins.get("parameters")
if int(rc_i) != 0:
    row["inspect_error"] = why(int(rc_i), p + ".inspect.err")
if rc_p != "-":
    row["plan_exit"] = int(rc_p)
    if int(rc_p) == 0:
        try:
            plan = json.load(open(p + ".plan.json"))
            row["plan"] = {"layers": len(plan.get("layers") or []),
                           "decisions": dict(collections.Counter(l.get("decision") for l in plan.get("layers") or [])),
                           "changes": dict(collections.Counter(c.get("pass") for c in plan.get("changes") or [])),
                           "trainable_tensors": (plan.get("trainable") or {}).get("tensors")}
        except (OSError, ValueError) as e:
            row["plan_error"] = "unreadable report: %s" % e
    else:
        row["plan_error"] = why(int(rc_p), p + ".plan.err")
if rc_i == "0":
    ref = np.load(row["logits"])
    row["predict"] = {}
    for d in devs.split():
        try:
            rc = int(open("%s.pred-%s.rc" % (p, d)).read())
        except (OSError, ValueError):
            rc = -1
        if rc != 0:
            row["predict"][d] = {"error": why(rc, "%s.pred-%s.log" % (p, d))}
            continue
        got = np.load("%s.pred-%s.npy" % (p, d))
        if got.shape != ref.shape:
            row["predict"][d] = {"error": "output shape %s, PyTorch's %s" % (list(got.shape), list(ref.shape))}
            continue
        dmax = float(np.abs(got.astype(np.float64) - ref).max())
        rel = dmax / max(float(np.abs(ref).max()), 1e-12)
        row["predict"][d] = {"max_abs": dmax, "rel": rel, "match": bool(rel <= tol)}
    row["train_device"] = tdev
    row["train_exit"] = int(rc_t)
    row["train_s"] = int(train_s)
    row["train_last"] = why(int(rc_t), p + ".train.log")
preds = list((row.get("predict") or {}).values())
row["mismatch"] = any(v.get("match") is False for v in preds)
row["ok"] = bool(rc_i == "0" and rc_p == "0" and preds and all(v.get("match") for v in preds) and rc_t == "0")
print(json.dumps(row))
PYEOF
	fi
	if [ "${DYN_KEEP:-}" != 1 ]; then
		rm -f "$onnx" "$onnx.data"
		for f in $extra; do rm -f "$(dirname "$onnx")/$f"; done
	fi
}
budget=()
if [ "$BUDGET_S" -gt 0 ]; then # models not started by then are skipped
	budget=(--budget-s "$([ "$SECONDS" -lt "$BUDGET_S" ] && echo $((BUDGET_S - SECONDS)) || echo 0.001)")
fi
dyn_n=0
while IFS= read -r line; do
	case $line in "{"*) ;; *) continue ;; esac
	dyn_n=$((dyn_n + 1))
	printf '%s\n' "$line" >>"$D/export.jsonl"
	while [ "$(jobs -rp | wc -l)" -ge "$DYN_JOBS" ]; do wait -n 2>/dev/null || sleep 0.2; done
	dyn_check "$dyn_n" "$line" &
done < <("$PY" bench/dynamo_export.py --out "$D" --exporter "$DYN_EXPORTER" --opsets "$DYN_OPSETS" --timeout "$DYN_TIMEOUT" \
	${DYN_MODELS:+--models "$DYN_MODELS"} ${DYN_EXPORT_JOBS:+--jobs "$DYN_EXPORT_JOBS"} ${budget[@]+"${budget[@]}"} \
	$([ "${DYN_FIXED_BATCH:-}" = 1 ] && echo --fixed-batch) $([ "${DYN_HALF:-}" = 1 ] && echo --half) 2>>"$D/export.log")
wait
if [ "${DYN_KEEP:-}" != 1 ]; then # the samples, and what a killed export left
	rm -f "$D"/*-x.npy
	find "$D" -maxdepth 1 -type f \( \( -name '*.onnx' ! -name '*.nodata.onnx' \) -o -name '*.data' \) -delete
fi
"$PY" - "$tmp/dyn" "$OUT/dynamo.jsonl" <<'PYEOF'
import glob, json, os, sys
rows = []
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    try:
        rows.append(json.loads(open(f).read()))
    except ValueError as e:
        rows.append({"model": os.path.basename(f), "error": "unreadable row: %s" % e})
rows.sort(key=lambda r: r.get("order") or [1 << 30, 0])
with open(sys.argv[2], "w") as out:
    for r in rows:
        out.write(json.dumps(r) + "\n")
PYEOF
grep -q '"mismatch": true' "$OUT/dynamo.jsonl" && status=1
"$PY" - "$OUT/dynamo.jsonl" "$DYN_DEVICE" >"$OUT/dynamo.md" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
if not rows:
    print("\nPart dynamo: bench/dynamo_export.py wrote no line (see dynamo/export.log).")
    sys.exit()


def cell(s, n=160):
    s = " ".join(str(s).split()).replace("|", "/")
    return s if len(s) <= n else s[:n - 1] + "…"


meta = next((r for r in rows if r.get("torch")), rows[0] if rows else {})
exporter = meta.get("exporter", "dynamo")
how = "torch.onnx.export(..., dynamo=True)" if exporter == "dynamo" else "the TorchScript exporter (dynamo=False, opset 17: the dry run's)"
print("\nPyTorch's default ONNX exporter through dpfinetune: %s, torch %s%s, random weights; `inspect` (the operators "
      "CheckOps refuses), `predict` of two samples against PyTorch's float32 logits (max |Δ|, and relative to the largest "
      "|logit|), one short epoch of `train --device %s` (16 Fashion-MNIST samples, logical batch 8):\n" % (
          how, meta.get("torch", "?"), ", onnxscript " + meta["onnxscript"] if meta.get("onnxscript") else "", sys.argv[2]))
print("| model | opset (asked → file) | export (s; batch) | ops we refuse | predict max abs Δ (rel) | plan | train (exit, s) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    asked = "default" if r.get("opset_requested") is None else str(r["opset_requested"])
    if "skipped" in r:
        print("| %s | | skipped: %s | | | | |" % (r["model"], cell(r["skipped"])))
        continue
    if "error" in r and "onnx" not in r:
        print("| %s | %s | error (%s s): %s | | | | |" % (r["model"], asked, r.get("seconds", "?"), cell(r["error"], 240)))
        continue
    opset = "%s → %s" % (asked, r.get("opset", "?"))
    exp = "ok (%s; %s%s)%s" % (r.get("seconds", "?"), r.get("batch", "?"), "; external data" if r.get("external_data") else "",
                               ", then: " + cell(r["error"]) if r.get("error") else "")
    if r.get("checks_skipped"):
        print("| %s | %s | %s | skipped: %s | | | |" % (r["model"], opset, exp, r["checks_skipped"]))
        continue
    if r.get("refused"):
        refuse = "; ".join("%s ×%d" % (k, n) for k, n in sorted(r["refused"].items()))
    elif r.get("inspect_error"):
        refuse = "inspect: " + r["inspect_error"]
    else:
        refuse = "none"
    preds = []
    for d, v in (r.get("predict") or {}).items():
        if "error" in v:
            preds.append("%s: %s" % (d, cell(v["error"], 120)))
        else:
            preds.append("%s %.1e (%.1e)%s" % (d, v["max_abs"], v["rel"], "" if v["match"] else " MISMATCH"))
    plan = ""
    if "plan" in r:
        pl = r["plan"]
        plan = "ok: %d layers (%s)" % (pl["layers"], ", ".join("%s %d" % kv for kv in sorted(pl["decisions"].items())))
    elif "plan_error" in r:
        plan = "error: " + r["plan_error"]
    train = ""
    if "train_exit" in r:
        train = "%d, %d" % (r["train_exit"], r["train_s"]) + ("" if r["train_exit"] == 0 else ": " + cell(r.get("train_last", ""), 200))
    print("| %s | %s | %s | %s | %s | %s | %s |" % (r["model"], opset, exp, cell(refuse, 240), "; ".join(preds) or "–", cell(plan, 120), train or "–"))
ops, refused = set(), set()
for r in rows:
    ops.update(r.get("ops") or [])
    refused.update(r.get("refused_ops") or [])
if ops:
    print("\nOperators in these exports: %s." % ", ".join(sorted(ops)))
    print("Refused by CheckOps: %s." % (", ".join(sorted(refused)) or "none"))
PYEOF
cat "$OUT/dynamo.md" >&2
fi
if has maxbatch; then
echo "== 5. largest physical batch (VGG-19, CIFAR-10)" >&2
: >"$OUT/maxbatch.jsonl"
MB_MODEL=cifar_vgg19
MB_START=${MB_START:-2048} # halved while it does not run (a smaller GPU), doubled while it does
MB_MAX=${MB_MAX:-65536}
if [ $mode = emulate ]; then MB_MODEL=cnn-fmnist MB_START=2 MB_MAX=8; fi
# largest CMD...: the largest batch B (from MB_START, doubling while it
# runs, halving while it does not, then bisecting to within 1/16) for
# which `CMD... B` exits 0; 0 if none does, and the search stops where
# BUDGET_S is spent (the row says so).
largest() {
	local lo=0 b=$MB_START hi
	while [ "$b" -le "$MB_MAX" ] && ! late && "$@" "$b"; do lo=$b b=$((b * 2)); done
	[ "$b" -gt "$MB_MAX" ] && { echo "$lo"; return; } # every batch up to the cap ran
	hi=$b
	if [ "$lo" = 0 ]; then # MB_START itself did not run: down until one does
		while [ "$hi" -gt 1 ] && ! late; do
			b=$((hi / 2))
			if "$@" "$b"; then lo=$b; break; fi
			hi=$b
		done
	fi
	while [ "$lo" -gt 0 ] && [ $((hi - lo)) -gt $((lo / 16)) ] && ! late; do
		local mid=$(((lo + hi) / 2))
		if "$@" "$mid"; then lo=$mid; else hi=$mid; fi
	done
	echo "$lo"
}
ours_fits() { # mode batch
	"$BIN"/dpfinetune bench --device cuda --model "zoo:$MB_MODEL" --batch "$2" --steps 1 --modes "$1" --json >/dev/null 2>>"$OUT/maxbatch.log"
}
torch_fits() { # batch
	(cd bench && "$PY" torch_gpu_step.py --model "$MB_MODEL" --batch "$1" --size 32 --classes 10 --steps 1 --warmup 1 --tf32 off) >/dev/null 2>>"$OUT/maxbatch.log"
}
persample_fits() { # batch: Opacus's method in PyTorch
	(cd bench && "$PY" torch_gpu_step.py --model "$MB_MODEL" --batch "$1" --size 32 --classes 10 --steps 1 --warmup 1 --tf32 off --dp persample) >/dev/null 2>>"$OUT/maxbatch.log"
}
mbrow() { # impl mode largest
	echo "{\"model\": \"$MB_MODEL\", \"impl\": \"$1\", \"mode\": \"$2\", \"largest_batch\": $3, \"cap\": $MB_MAX, \"budget_spent\": $(late && echo true || echo false)}" | tee -a "$OUT/maxbatch.jsonl" >&2
}
# MB_ROWS: the rows to search, in order (a short loan puts first the ones
# it lacks); IMPL:MODE each, pytorch rows only on a GPU.
MB_ROWS=${MB_ROWS:-dpfinetune:nondp dpfinetune:bk dpfinetune:mixed dpfinetune:instantiate pytorch:nondp pytorch-persample:instantiate}
for row in $MB_ROWS; do
	impl=${row%%:*} m=${row#*:}
	case $impl in
	dpfinetune) mbrow dpfinetune "$m" "$(largest ours_fits "$m")" ;;
	pytorch) [ $mode = gpu ] && mbrow pytorch nondp "$(largest torch_fits)" ;;
	pytorch-persample) [ $mode = gpu ] && mbrow pytorch-persample instantiate "$(largest persample_fits)" ;;
	*) echo "gpu-check: MB_ROWS: unknown row $row (IMPL:MODE, IMPL dpfinetune, pytorch or pytorch-persample)" >&2 ;;
	esac
done
"$PY" - "$OUT/maxbatch.jsonl" >"$OUT/maxbatch.md" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
print("\nLargest physical batch that runs (one step; doubling or halving, then bisection to 1/16; instantiate is Opacus's method in our engine, every per-sample gradient kept; Opacus and private_vision themselves are not part of this check):\n")
print("| model | implementation | mode | largest batch |")
print("|---|---|---|---|")
for r in rows:
    note = " (budget spent: a lower bound)" if r.get("budget_spent") else ""
    cap = " (the cap)" if r["largest_batch"] >= r["cap"] else ""
    print("| %s | %s | %s | %d%s%s |" % (r["model"], r["impl"], r["mode"], r["largest_batch"], cap, note))
by = {(r["impl"], r["mode"]): r["largest_batch"] for r in rows}
ps = by.get(("pytorch-persample", "instantiate"))
if ps:
    for m in ("bk", "mixed"):
        if by.get(("dpfinetune", m)):
            print("\n%s's largest batch is %.1f× that of Opacus's method in PyTorch (issue 14's target for mixed: ≥ 10× Opacus's)." % (m, by[("dpfinetune", m)] / ps))
PYEOF
fi
if has profile; then
echo "== 6. where a step's time goes (DPFINETUNE_CUDA_PROFILE)" >&2
# Each operation and kernel timed alone (the device waited for before and
# after each): profile-MODEL[-tf32|-gemm].txt, one table per mode, over the
# timed steps (bench resets the profile after its warm-up step), with the
# convolution library's products and refusals.
# The tf32 variant: every loan so far timed bk slower with TF32
# convolutions than in float32 (ResNet-50, VGG-16, VGG-19/CIFAR) while
# nondp ran faster; its profile says where.
profile() { # name batch [gemm|tf32]
	if late; then
		echo "profile $1${3:+-$3}: skipped, BUDGET_S spent" >&2
		return
	fi
	local f=$OUT/profile-$1${3:+-$3}.txt
	case ${3:-} in
	gemm) DPFINETUNE_CUDNN=off DPFINETUNE_CUDA_PROFILE=1 "$BIN"/dpfinetune bench --device cuda --model "zoo:$1" --batch "$2" --steps 2 --modes nondp,bk >"$f" 2>&1 ;;
	tf32) DPFINETUNE_CUDA_PROFILE=1 "$BIN"/dpfinetune bench --device cuda --model "zoo:$1" --batch "$2" --steps 2 --modes nondp,bk --tf32 >"$f" 2>&1 ;;
	*) DPFINETUNE_CUDA_PROFILE=1 "$BIN"/dpfinetune bench --device cuda --model "zoo:$1" --batch "$2" --steps 2 --modes nondp,bk,mixed >"$f" 2>&1 ;;
	esac || echo "profile $1: exit $? (see $f)" >&2
	grep -E '^(nondp|bk|mixed) ' "$f" | sed "s/^/$1${3:+ ($3)}: /" >&2
}
# convs-MODEL.md: the default profile's convolutions by shape (nondp's,
# bk's) beside PyTorch's, each of its shapes timed alone in float32
# (bench/torch_conv_shapes.py, bench/conv_profile.py): which layers'
# products make the non-DP step's gap to PyTorch's.
convs() { # name batch size classes
	late && return
	local f=$OUT/profile-$1.txt t=$OUT/convs-$1.jsonl
	if ! (cd bench && "$PY" torch_conv_shapes.py --model "$1" --batch "$2" --size "$3" --classes "$4" --tf32 off) >"$t" 2>>"$OUT/bench.log"; then
		echo "convs $1: torch_conv_shapes.py failed (see bench.log)" >&2
		return
	fi
	for m in nondp bk; do
		printf '\n### %s, %s: convolutions by shape, ms a step (PyTorch: each shape alone, float32)\n\n' "$1" "$m"
		"$PY" bench/conv_profile.py --ours "$f" --modes nondp,bk,mixed --steps 2 --torch "$t" --mode $m
	done >"$OUT/convs-$1.md" 2>>"$OUT/bench.log" || echo "convs $1: conv_profile.py failed (see bench.log)" >&2
}
# torch-profile-MODEL.txt: PyTorch's own non-DP step in float32 under
# torch.profiler, its kernels by device time (bench/torch_gpu_step.py
# --profile): beside profile-MODEL.txt's nondp table, where our non-DP
# step spends the time PyTorch's does not (bk's targets hang on it,
# bench/flop_floor.py).
torchprof() { # name batch size classes [device]
	late && return
	(cd bench && "$PY" torch_gpu_step.py --model "$1" --batch "$2" --size "$3" --classes "$4" --steps 3 --warmup 3 --tf32 off \
		--device "${5:-cuda}" --profile "$OUT/torch-profile-$1.txt") >/dev/null 2>>"$OUT/bench.log" || echo "torchprof $1: failed (see bench.log)" >&2
}
if [ $mode = gpu ]; then
	# In the order a short loan needs them (BUDGET_S skips the rest).
	profile resnet50 "$BATCH224"
	convs resnet50 "$BATCH224" 224 1000
	torchprof resnet50 "$BATCH224" 224 1000
	profile vit_b_16 "$BATCH224"
	torchprof vit_b_16 "$BATCH224" 224 1000
	profile resnet50 "$BATCH224" tf32
	profile vgg16 "$BATCH224" tf32
	profile vgg16 "$BATCH224"
	profile resnet50 "$BATCH224" gemm
	profile vgg16 "$BATCH224" gemm
else
	profile cnn-fmnist 2
	profile cnn-fmnist 2 gemm
	torchprof resnet18 2 32 10 cpu
fi
fi
# The per-sample gradients' measured choices (cuDNN's samples as groups
# against the engine's unfolding, per sample), from the kept choices.
"$PY" - "${DPFINETUNE_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dpfinetune}"/cuda >"$OUT/choices.md" <<'PYEOF' || true
import glob, json, os, sys
rows = []
for f in glob.glob(os.path.join(sys.argv[1], "cudnn-algos-*.json")):
    kept = json.load(open(f))  # one file per cuDNN setting: its workspace bound, determinism
    setting = "%d MiB%s" % (kept.get("workspace_cap_bytes", 0) >> 20, "" if kept.get("deterministic", True) else ", nondeterministic")
    for k, v in (kept.get("paths") or {}).items():
        if k.startswith("per-sample "):
            rows.append((k[len("per-sample "):], setting, v))
if rows:
    print("\nPer-sample gradients, measured per sample: cuDNN's filter gradient of the samples as groups against the engine's unfolding (kept choices; cuDNN's workspace bound per row):\n")
    print("| shape (samples as groups) | workspace bound | cuDNN ms a sample | unfolding ms a sample | taken |")
    print("|---|---|---|---|---|")
    for k, setting, v in sorted(rows, key=lambda r: r[:2]):
        print("| %s | %s | %.4f | %.4f | %s |" % (k, setting, v["cudnn_ms"], v["gemm_ms"], "cuDNN" if v["cudnn"] else "unfolding"))
PYEOF
if has cache; then
echo "== 8. feature cache: a linear probe on the device, cached and not" >&2
# ResNet-50 at 224² with its fc alone trained on CACHE_EXAMPLES images for
# CACHE_EPOCHS epochs, --cache-features on against off (the same seed):
# the cached run computes the frozen network once and releases its plan
# (runtime.Plan.Release); the two runs' last losses agree.
: >"$OUT/cache.jsonl"
if [ $mode = gpu ]; then
	"$BIN"/dpfinetune zoo export resnet50 --out "$tmp/probe.onnx" 2>>"$OUT/cache.log"
	probe=(--model "$tmp/probe.onnx" --input-shape 3,224,224 --data "idx:testdata/fmnist-small:limit=${CACHE_EXAMPLES:-2048}" --epochs "${CACHE_EPOCHS:-3}")
else
	probe=(--model testdata/models/resnet_eval.onnx --input-shape 3,32,32 --data idx:testdata/fmnist-small:limit=64 --epochs 2)
fi
for c in on off; do
	"$BIN"/dpfinetune train --device cuda "${probe[@]}" --test-data none --train '^fc\.' --epsilon 3 --batch-size 256 --quiet --seed 1 \
		--cache-features $c --out "$tmp/probe-$c.onnx" --report "$tmp/cache-$c.json" >>"$OUT/cache.log" 2>&1 || status=1
done
"$PY" - "$tmp/cache-on.json" "$tmp/cache-off.json" <<'PYEOF' | tee -a "$OUT/cache.jsonl" >&2
import json, sys
try:
    on, off = (json.load(open(f)) for f in sys.argv[1:3])
except (OSError, ValueError) as e:
    print(json.dumps({"error": "a run failed (see cache.log): %s" % e}))
    sys.exit()
a, b = on["epochs"][-1]["train_loss"], off["epochs"][-1]["train_loss"]
print(json.dumps({"cached_s": on["seconds"], "whole_s": off["seconds"], "ratio": on["seconds"] / off["seconds"],
                  "feature_cache": on.get("feature_cache"), "losses": [a, b], "ok": bool(on["feature_cache"]["cached"]) and abs(a - b) <= 1e-3 * abs(b)}))
PYEOF
grep -q '"ok": true' "$OUT/cache.jsonl" || status=1
fi

{
	cat "$OUT"/bench.md "$OUT"/timm.md "$OUT"/dynamo.md "$OUT"/maxbatch.md "$OUT"/choices.md "$OUT"/convs-*.md
	for f in "$OUT"/peak-*.txt; do
		[ -f "$f" ] || continue
		printf '\nbk device peak by allocation (%s, DPFINETUNE_CUDA_PEAK):\n\n' "$(basename "$f" .txt)"
		grep -A14 '^cuda peak: [1-9]' "$f" | sed 's/^/    /'
	done
	for f in "$OUT"/torch-profile-*.txt; do
		[ -f "$f" ] || continue
		printf '\n%s (its first kernels by device time):\n\n' "$(basename "$f" .txt)"
		head -n 30 "$f" | sed 's/^/    /'
	done
} >"$OUT/summary.md" 2>/dev/null # the parts run so far, this call's or an earlier one's
cat "$OUT/summary.md" >&2
exit $status
