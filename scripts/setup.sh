#!/usr/bin/env bash
# Installs what dpfinetune's build, tests and demo can use on a Debian
# machine: `setup.sh` for the demo (OpenBLAS), `setup.sh test` for `make
# test` (also PyTorch, torchvision, onnx, pydicom, nibabel, the Fashion-MNIST data set,
# g++ for the CUDA backend's emulated kernels and onnxruntime from npm), so that CI and a newcomer run the same tests.
# Everything here is optional: without OpenBLAS the runtime uses its pure-Go
# SGEMM; without Python/PyTorch or onnxruntime the tests that need them skip
# with a message. Not root, or no apt-get: nothing is installed and the run
# goes on. Set DPFINETUNE_NO_INSTALL=1 to install nothing.
set -u
[ "${DPFINETUNE_NO_INSTALL:-}" = 1 ] && exit 0
mode=${1:-demo}
need=()
ldconfig -p 2>/dev/null | grep -q 'libopenblas.so.0' || need+=(libopenblas-dev)
if [ "$mode" = test ] || [ -n "${DPFINETUNE_WITH_PYTHON:-}" ]; then
	/usr/bin/python3 -c 'import torch, torchvision, onnx, numpy' 2>/dev/null ||
		need+=(python3-torch python3-torchvision python3-onnx python3-numpy)
	# docs/serve_preprocess.py's DICOM images, checked against predict.
	/usr/bin/python3 -c 'import pydicom' 2>/dev/null || need+=(python3-pydicom)
	# Its NIfTI volumes, and the NIfTI decoder's oracle (internal/nifti).
	/usr/bin/python3 -c 'import nibabel' 2>/dev/null || need+=(python3-nibabel)
	[ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] ||
		[ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte ] || need+=(dataset-fashion-mnist)
	command -v node >/dev/null && command -v npm >/dev/null || need+=(nodejs npm)
	# The CUDA backend's emulated kernels (runtime/cuda) are compiled by g++.
	command -v g++ >/dev/null || need+=(g++)
fi
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "setup: not root or no apt-get; skipping install of ${need[*]} (the pure-Go fallbacks are used; tests that need them skip)" >&2
	else
		echo "setup: installing ${need[*]}" >&2
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; } >/tmp/dpfinetune-setup.log 2>&1; then
			echo "setup: apt-get failed (see /tmp/dpfinetune-setup.log); continuing with the fallbacks" >&2
		fi
	fi
fi
if [ "$mode" = test ] && command -v npm >/dev/null; then
	# onnxruntime-node into the cache the interop tests read (internal/orttest).
	"$(dirname "$0")/ort/install.sh" >/dev/null 2>>/tmp/dpfinetune-setup.log ||
		echo "setup: onnxruntime-node could not be installed (see /tmp/dpfinetune-setup.log); the onnxruntime tests skip" >&2
fi
exit 0
