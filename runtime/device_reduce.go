package runtime

// ReduceOps is the group of GraphOps for reductions over axes, softmax and log-softmax, and the per-sample softmax cross-entropy head.
type ReduceOps interface {
}
