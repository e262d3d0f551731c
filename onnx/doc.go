// Package onnx reads and writes ONNX model files.
//
// The protobuf bindings in onnxpb are generated from onnxpb/onnx.proto, a
// schema written in this repository from the ONNX IR specification (IR
// version 14). The proto package is named dpfinetune.onnx so that these
// bindings can be linked beside any other Go ONNX bindings without a
// registration clash.
//
// Load and Save are lossless: a model that is loaded and saved unchanged is
// written back byte for byte, and tensors stored as external data
// (data_location = EXTERNAL) are read on load and written on save. Every
// malformed input is reported as an error; the loader never panics.
package onnx
