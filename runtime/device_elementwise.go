package runtime

// ElementwiseOps is the group of GraphOps for unary, binary and parameterized activations, Where, Clip and their derivatives.
type ElementwiseOps interface {
}
