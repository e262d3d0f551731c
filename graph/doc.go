// Package graph is the typed intermediate representation of an ONNX model.
//
// A Graph holds values (dtype and shape, symbolic dimensions allowed),
// nodes with typed attribute accessors that apply the ONNX defaults of the
// node's opset, and initializers as parameters. Graph.InferShapes fixes the
// input shapes to concrete values and propagates dtypes and shapes through
// every node; Graph.FoldConstants evaluates shape-computation subgraphs
// (Shape, Gather, Concat, Reshape targets, ...) so that dynamic exports become
// static graphs. Graph.ToONNX writes the graph back, keeping everything the IR
// did not change.
//
// Package graph imports only package onnx.
package graph
