//go:build tools

// Package tools pins the code generators used by go generate, so that
// "go generate ./onnx" builds protoc-gen-go at the version in go.mod.
package tools

import _ "google.golang.org/protobuf/cmd/protoc-gen-go"
