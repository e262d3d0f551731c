package runtime

// LayoutOps is the group of GraphOps for copies, index maps (Gather, Slice, Transpose, Pad, Expand as one gather by a precomputed index map), concatenation and their backward scatter-adds.
type LayoutOps interface {
}
