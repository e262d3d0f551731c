package runtime

import "fmt"

// GraphOps is the graph part of the device operation set (DESIGN.md §8):
// every operation the compiled forward and backward passes of a Plan
// perform, and the plan's loss head. Compile builds each node from these
// operations on the device's buffers, so that a backend that implements
// GraphOps and DPOps runs a whole training step.
//
// The operations are grouped by file, one interface per group, as DPOps
// is: LayoutOps (device_layout.go: copies, index maps, concatenation,
// padding, broadcasting copies), NNOps (device_nn.go: convolutions,
// pooling, normalizations), ElementwiseOps (device_elementwise.go: unary,
// binary and parameterized activations and their derivatives), ReduceOps
// (device_reduce.go: reductions, softmax, the cross-entropy head), and the
// GEMMs of LinalgOps, which the graph and the DP engine share. Operands
// are slices of device buffers (Buffer.Floats); sizes are the caller's
// contract, as for DPOps.
type GraphOps interface {
	LinalgOps
	LayoutOps
	NNOps
	ElementwiseOps
	ReduceOps
}

// Ops is the whole device operation set: the graph's and the DP engine's.
type Ops interface {
	GraphOps
	DPOps
}

// GraphOpsOf returns the graph operations of d (nil is the CPU), or an
// error naming the device if it has none.
func GraphOpsOf(d Device) (GraphOps, error) {
	if d == nil {
		return CPU{}, nil
	}
	ops, ok := d.(GraphOps)
	if !ok {
		return nil, fmt.Errorf("runtime: device %s does not implement the graph operations (runtime.GraphOps)", d.Name())
	}
	return ops, nil
}

var _ Ops = CPU{}
