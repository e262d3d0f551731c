// Package rewrite transforms a graph for differentially private training:
// normalization layers, freezing, weight-sharing detection, the layerwise
// ghost-norm / instantiation decision, and classifier-head replacement. Every
// pass reports what it changed and why.
//
// Package rewrite imports only packages onnx and graph.
package rewrite
