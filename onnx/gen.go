package onnx

// Regenerate the bindings with the protoc-gen-go version pinned in go.mod:
//go:generate sh -c "go build -o \"${TMPDIR:-/tmp}/dpf-protoc-gen-go\" google.golang.org/protobuf/cmd/protoc-gen-go && protoc --plugin=protoc-gen-go=\"${TMPDIR:-/tmp}/dpf-protoc-gen-go\" --go_out=. --go_opt=paths=source_relative onnxpb/onnx.proto"
