// Package zoo builds well-known vision models (ResNet, VGG, ViT, ...) as ONNX
// graphs in Go, with seeded random initialization, so that users and
// benchmarks get full-size models without Python.
package zoo
