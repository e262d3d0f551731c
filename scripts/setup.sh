#!/usr/bin/env bash
# Installs what dpfinetune's build, tests and demo can use on a Debian
# machine. Everything here is optional: without OpenBLAS the runtime uses
# its pure-Go SGEMM; without Python/PyTorch the tests that regenerate
# fixtures skip. Set DPFINETUNE_NO_INSTALL=1 to install nothing.
set -u
[ "${DPFINETUNE_NO_INSTALL:-}" = 1 ] && exit 0
need=()
ldconfig -p 2>/dev/null | grep -q 'libopenblas.so.0' || need+=(libopenblas-dev)
[ -n "${DPFINETUNE_WITH_PYTHON:-}" ] && ! /usr/bin/python3 -c 'import torch, torchvision, onnx' 2>/dev/null && need+=(python3-torch python3-torchvision python3-onnx)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "setup: not root or no apt-get; skipping install of ${need[*]} (the pure-Go fallbacks are used)" >&2
	exit 0
fi
echo "setup: installing ${need[*]}" >&2
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; } >/tmp/dpfinetune-setup.log 2>&1; then
	echo "setup: apt-get failed (see /tmp/dpfinetune-setup.log); continuing with the pure-Go fallbacks" >&2
fi
exit 0
