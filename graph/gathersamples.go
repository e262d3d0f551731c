package graph

// GatherSampleStride follows the samples through a Gather along the axis
// that holds the batch, given its constant indices (idx, flattened in
// row-major order). The samples lie along that axis of length dim as
// (o·batch + b)·inner + i for sample b (rewrite.BatchLayout); an index t
// therefore reads sample (t / inner) mod batch.
//
// PyTorch's dynamo exporter writes as_strided views this way: Swin-T
// flattens its pooled (B, 768) features to one axis and gathers them back
// by computed indices, B·768 of them, so that sample b's 768 elements come
// back as indices [768b, 768b+768). The samples survive such a Gather when
// index j reads sample (j / s) mod batch for one stride s that lays whole
// runs of batch·s indices (so that the axes before the gathered one add
// whole cycles of samples). GatherSampleStride returns that s, or false
// when some index reads another sample (or lies outside the axis): then
// the Gather moves elements between samples, or the batch is not followed
// through it.
//
// The indices are checked one by one: computed indices prove nothing until
// their values are known, and a plan compiled for one batch size checks the
// ones of that size.
func GatherSampleStride(idx []int64, dim, inner, batch int64) (int64, bool) {
	n := int64(len(idx))
	if batch < 1 || inner < 1 || dim <= 0 || dim%(inner*batch) != 0 || n == 0 {
		return 0, false
	}
	sample := func(t int64) (int64, bool) {
		if t < 0 {
			t += dim
		}
		if t < 0 || t >= dim {
			return 0, false
		}
		return (t / inner) % batch, true
	}
	// The stride is the first index of sample 1: every index before it
	// reads sample 0.
	s := n
	for j, t := range idx {
		b, ok := sample(t)
		if !ok {
			return 0, false
		}
		if b != 0 {
			s = int64(j)
			break
		}
	}
	if s == 0 || s == n && batch > 1 || n%(s*batch) != 0 {
		return 0, false
	}
	for j, t := range idx {
		if b, ok := sample(t); !ok || b != (int64(j)/s)%batch {
			return 0, false
		}
	}
	return s, true
}

// ScatterKeepsSamples reports whether a ScatterND writes each sample's
// updates into the same sample of its data, given its constant indices
// (idx, flattened in row-major order, of shape idxShape whose last axis
// holds index tuples): the data's batch is its axis dataAxis, of dim
// elements, one sample each; the updates' batch is their axis updAxis, one
// of the axes the index tuples are laid along, one sample each. Then every
// tuple's coordinate on dataAxis must equal its own position along
// updAxis: a slice assignment within each sample (x[:, :, 1:, 1:] = …,
// which PyTorch exports with the whole grid of coordinates, the batch's
// included, as MViT's relative positions are added).
func ScatterKeepsSamples(idx, idxShape []int64, dataAxis int, dim int64, updAxis int) bool {
	r := len(idxShape)
	if r < 2 || updAxis < 0 || updAxis >= r-1 || dataAxis < 0 || int64(dataAxis) >= idxShape[r-1] || idxShape[updAxis] != dim {
		return false
	}
	q := idxShape[r-1]
	inner := int64(1)
	for _, d := range idxShape[updAxis+1 : r-1] {
		inner *= d
	}
	if int64(len(idx))%q != 0 {
		return false
	}
	for p := int64(0); p < int64(len(idx))/q; p++ {
		t := idx[p*q+int64(dataAxis)]
		if t < 0 {
			t += dim
		}
		if t != (p/inner)%dim {
			return false
		}
	}
	return true
}
