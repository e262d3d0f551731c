#!/usr/bin/env bash
# Installs onnxruntime-node@1.30.0 (it ships libonnxruntime.so.1 and its
# Node binding) into DIR (default: $HOME/.cache/dpfinetune/ort) without
# running install scripts. Prints DIR/node_modules on success.
set -euo pipefail
dir=${1:-${DPFINETUNE_ORT_DIR:-$HOME/.cache/dpfinetune/ort}}
mod="$dir/node_modules/onnxruntime-node"
if [ ! -f "$mod/bin/napi-v6/linux/x64/onnxruntime_binding.node" ]; then
	command -v npm >/dev/null || { echo "install.sh: npm not found" >&2; exit 1; }
	mkdir -p "$dir"
	(cd "$dir" && npm install --silent --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30.0 >&2)
fi
echo "$dir/node_modules"
