#!/bin/sh
# Regenerates testdata/fmnist-small from the full Fashion-MNIST IDX files
# (Debian package dataset-fashion-mnist installs them under
# /usr/share/datasets/fashion-mnist; pass another directory as $1).
# Keeps the first 4000 training and the first 1000 test images and labels,
# rewrites the item counts in the IDX headers, and gzips with Go's
# compress/gzip at best compression (deterministic output).
set -eu
src=${1:-/usr/share/datasets/fashion-mnist}
cd "$(dirname "$0")/../.."
go test -count=1 ./dpengine/data -run '^TestMakeFMNISTSmall$' -v -args -make-fmnist-small -fmnist-src "$src"
