// Package graph is the typed intermediate representation of an ONNX model.
//
// A Graph holds values (dtype and shape, symbolic dimensions allowed),
// nodes with typed attribute accessors that apply the ONNX defaults of the
// node's opset, and initializers as parameters.
//
// FromONNX expands, at load, what ONNX defines in terms of other operators:
// calls of model-local functions (ModelProto.functions, which PyTorch's
// dynamo exporter and onnxscript write) are inlined with their attribute
// references resolved, each inlined node at the opset its function imports
// (refused where that differs from the model's, which export would write);
// and the standard function operators Swish (24), RMSNormalization (23) and
// Attention (23–25; the subset vision models use, see ExpandedOps) become
// the operators of their definitions. Everything after loading — runtime
// checks, shape inference, plans, export — sees only the expansion, which
// is what a trained model is saved with. It also reads torch.export's
// signature marks (signature.go): in a dynamo export the parameters are the
// tensors marked PARAMETER and the unmarked ones its optimizer rewrote, its
// buffers and lifted constants fold (Value.ExportConstant); in any model a
// float initializer whose every use ends in a comparison (gradient.go: a
// mask's fill values compared by Equal), or whose every element reaching
// the model a condition computed from it masks out again (zerograd.go: the
// same mask as the dynamo exporter writes it, proven by evaluation), is
// no parameter and folds too (Value.NoGradient). Shape inference
// turns a CastLike whose target type is known into Cast, and a GatherND of
// one leading axis by constant indices into Gather (castlike.go,
// gathernd.go), the forms the dynamo exporter writes. Graph.InferShapes fixes the
// input shapes to concrete values and propagates dtypes and shapes through
// every node; Graph.FoldConstants evaluates shape-computation subgraphs
// (Shape, Gather, Concat, Reshape targets, ...) so that dynamic exports become
// static graphs. Graph.ToONNX writes the graph back, keeping everything the IR
// did not change.
//
// Package graph imports only package onnx.
package graph
