package runtime

// NNOps is the group of GraphOps for convolutions (forward, input and weight gradients), pooling and the row normalizations behind BatchNormalization, LayerNormalization, InstanceNormalization, GroupNormalization and LRN.
type NNOps interface {
}
