// Package rewrite transforms a graph for differentially private training:
// normalization layers, freezing, weight-sharing detection, the layerwise
// ghost-norm / instantiation decision, and classifier-head replacement. Every
// pass reports what it changed and why.
//
// Structural passes change the dynamic graph in place (it keeps its
// symbolic batch axis, so that ExportGraph and graph.ToONNX export the
// rewritten model):
//
//   - Cleanup: Identity and Dropout elision, exporter-aliased parameters
//     untied, dead nodes and unused initializers removed (RemoveDead).
//   - RewriteBatchNorm: BatchNormalization → GroupNorm (one
//     GroupNormalization node while training, whose scale and shift of
//     shape (C,1,…,1) ExportGraph writes as an opset-14 decomposition
//     with elementwise scale and shift) or frozen with its running
//     statistics and folded into the preceding Conv.
//   - FuseLayerNorm: a LayerNorm decomposed as torch exports it before
//     opset 17 → one LayerNormalization node while training, which
//     ExportGraph writes back decomposed where the opset needs it.
//   - ReplaceHead: a fresh classifier for a new number of classes.
//   - AddLoRA: low-rank adapters beside the linear layers (Options.LoRA),
//     which ExportGraph merges into the weights they adapt; the plan then
//     trains them and the classifier heads (PlanOptions.Frozen).
//
// Analyze never changes its graph: it infers shapes on a clone, follows the
// batch axis through every node (BatchLayout; nodes where samples interact
// are Problems), and returns a Plan: for every floating-point initializer
// a Kind (linear, elementwise, or frozen with a reason), its Uses (the
// consumer node, operand index, the shape-only Path from the parameter,
// and the batch layouts), weight sharing, and for every trainable linear
// use a Layer with T, D, p, groups, 2T², pD and the ghost/instantiate
// decision of mixed ghost clipping (Decide), plus per-mode memory
// estimates (MemoryAt). Prepare runs the passes and Analyze in order.
//
// SplitFrozenPrefix cuts a prepared graph where its trained part begins:
// the frozen prefix, whose outputs the trainer computes once per example
// (its feature cache), and the head, a graph of its own sharing the
// model's tensors, with a Plan that trains what the model's trains.
//
// StateDictOf reads a graph back as its PyTorch module's state dict: which
// initializer is which state-dict key, in what layout (a Linear weight an
// export stores transposed), the modules a run turned into GroupNorm, and
// what the export does not name (the `weights` command).
//
// The DP engine consumes a Plan: Plan.Compile gives the runtime a clone
// with frozen parameters turned into constants; Plan.Params and Plan.Layers
// say, per parameter, how to obtain per-sample gradient norms. Per-layer
// data do not depend on the batch size. docs/REWRITES.md describes the
// passes, the per-sample kinds, the decision rule and the memory formulas.
//
// Package rewrite imports only packages onnx and graph.
package rewrite
