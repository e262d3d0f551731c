package runtime

import "github.com/dpfinetune/dpfinetune/graph"

// Batch tracking: the DP engine needs per-sample slices of activations and
// output gradients, and the samples do not always lie along the leading
// axis: nn.MultiheadAttention exports run the attention projections on
// (T, B, D) tensors and its output projection on (T·B, D). propagateBatch
// follows the samples of graph input 0 (its leading axis) through the plan
// as a batch stride: sample of flat element e = (e / stride) mod N, which
// reshapes preserve. A value whose samples are mixed (batch statistics,
// reductions or softmax over the batch, contractions) gets stride 0.

// batchAt converts a batch stride into the axis that holds it and the
// stride within that axis (in units of the axis' own row-major stride).
func batchAt(shape []int, stride int) (axis, inner int) {
	st := strides(shape)
	for j := range shape {
		if st[j] <= stride && stride < st[j]*shape[j] && stride%st[j] == 0 {
			return j, stride / st[j]
		}
	}
	return -1, 0
}

func (p *Plan) propagateBatch() {
	for _, t := range p.tensors {
		t.bstride, t.bax = 0, -1
	}
	if len(p.inputs) == 0 || len(p.inputs[0].shape) == 0 {
		return
	}
	in := p.inputs[0]
	N := in.shape[0]
	in.bstride = max(1, numel(in.shape[1:]))
	in.bax = 0
	if N == 1 {
		p.propagateOne(in)
		return
	}
	for _, nd := range p.nodes {
		// Every output of a split, the fused ones' and a plain Split's
		// (torch.unbind of q, k and v: batchStride sees only the first).
		if nd.g.OpType == fusedSplit || nd.g.OpType == "Split" {
			nd.splitBatch(N)
			continue
		}
		y := nd.out[0]
		if y == nil {
			continue
		}
		if s := nd.batchStride(N); s > 0 {
			if ax, inner := batchAt(y.shape, s); ax >= 0 && (y.shape[ax]/inner)%N == 0 {
				y.bstride, y.bax = s, ax
			}
		}
	}
}

// propagateOne is propagateBatch for a batch of one sample, whose stride
// the shapes cannot tell (every axis of size 1 could hold it, and a
// sequence-first (T, 1, D) tensor's stride D is also its token stride):
// nothing can mix samples, so every value computed from the input is the
// sample's whole, stride its size, axis its outermost unit axis (0 where
// it has none: a (T·1, D) projection's rows) — or 0 where the value keeps
// its input's leading axis of the sample's rows (a sample's views folded
// into the batch: (K, 1, H, W) for a one-channel image). Shape and Size
// read only the layout, so what follows them is not the sample's.
func (p *Plan) propagateOne(in *tensor) {
	from := map[*tensor]bool{in: true}
	for _, nd := range p.nodes {
		if op := nd.g.OpType; op == "Shape" || op == "Size" {
			continue
		}
		dep := false
		for _, t := range nd.in {
			dep = dep || t != nil && from[t]
		}
		if !dep {
			continue
		}
		x := nd.in[0]
		for _, y := range nd.out {
			if y == nil || len(y.shape) == 0 {
				continue
			}
			from[y] = true
			y.bstride, y.bax = max(1, numel(y.shape)), 0
			if x != nil && x.bax == 0 && len(x.shape) > 0 && x.shape[0] > 1 && y.shape[0] == x.shape[0] && !layoutOps[nd.g.OpType] {
				// The sample's rows on the leading axis (a sample's
				// views or windows folded into the batch, as
				// augmentation multiplicity and user-level privacy
				// fold them), kept there by an operator that does not
				// move axes: a later axis of size 1 (a one-channel
				// image's) is not the batch.
				continue
			}
			if nd.g.OpType == "Reshape" && x != nil && x.bax == 0 && len(x.shape) > 1 && x.shape[0] == 1 && y.shape[0] == x.shape[1] {
				// The batch axis merged with the next: the sample's
				// rows folded into the leading axis (1, K, …) → (K, …),
				// as a larger batch's (B, K, …) → (B·K, …) holds them.
				continue
			}
			for j, d := range y.shape {
				if d == 1 {
					y.bax = j
					break
				}
			}
		}
	}
}

// layoutOps move or regroup axes: in a batch of one, a value they compute
// from one whose leading axis holds the sample's rows need not keep them
// there ((T, D) reshaped to sequence-first (T, 1, D)).
var layoutOps = map[string]bool{
	"Reshape": true, "Transpose": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true,
	"Expand": true, "Tile": true, "Concat": true, "Split": true, "Slice": true, "Gather": true,
	"GatherElements": true, "GatherND": true, "DepthToSpace": true, "SpaceToDepth": true, "Einsum": true,
	"MatMul": true, "FusedMatMul": true,
}

// splitBatch sets the batch strides of a FusedSplit's or Split's outputs:
// each keeps the input's batch axis unless the split cuts along it.
func (nd *node) splitBatch(N int) {
	x := nd.in[0]
	k, inner := batchAt(x.shape, x.bstride)
	if x.bstride <= 0 || k < 0 {
		return
	}
	for _, y := range nd.out {
		if y.shape[k] != x.shape[k] {
			continue // split along the batch axis
		}
		s := inner * strides(y.shape)[k]
		if ax, in := batchAt(y.shape, s); ax >= 0 && (y.shape[ax]/in)%N == 0 {
			y.bstride, y.bax = s, ax
		}
	}
}

// batchStride returns the batch stride of nd's first output, or 0.
func (nd *node) batchStride(N int) int {
	y := nd.out[0]
	src, si := (*tensor)(nil), -1
	for i, t := range nd.in {
		if t != nil && t.bstride > 0 {
			src, si = t, i
			break
		}
	}
	if src == nil {
		if nd.g.OpType == "Expand" { // a parameter broadcast over the batch
			x := nd.in[0]
			off := len(y.shape) - len(x.shape)
			st := strides(y.shape)
			for j, d := range y.shape {
				if d == N && (j < off || x.shape[j-off] == 1) {
					return st[j]
				}
			}
			// Broadcast over an axis of k rows a sample (a class token
			// prepended to each of a sample's augmented views, rewrite's
			// augmentation multiplicity): a sample's rows are consecutive,
			// as the batch analysis folds views, windows and heads.
			for j, d := range y.shape {
				if d > N && d%N == 0 && (j < off || x.shape[j-off] == 1) {
					return st[j] * (d / N)
				}
			}
		}
		return 0
	}
	switch nd.g.OpType {
	case "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Cast":
		return src.bstride // the flat layout is unchanged
	}
	k, inner := batchAt(src.shape, src.bstride)
	if k < 0 {
		return 0
	}
	r, ry := len(src.shape), len(y.shape)
	kOut := -1
	switch nd.g.OpType {
	case "Transpose":
		perm, err := nd.g.Perm(r)
		if err != nil {
			return 0
		}
		for j, a := range perm {
			if a == k {
				kOut = j
			}
		}
	case "MatMul":
		switch {
		case r == 1, si == 0 && k == r-1, si == 1 && k == r-2:
			return 0 // contracted
		case si == 1 && k == r-1:
			kOut = ry - 1
		default:
			kOut = k + ry - r
		}
	case fusedMatMul:
		kOut = nd.mm.batchOut(si, k)
		if kOut < 0 {
			return 0
		}
	case "Gemm":
		if si != 0 || k != 0 || nd.g.IntOr("transA", 0) != 0 {
			return 0
		}
		kOut = 0
	case "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "InstanceNormalization", "GroupNormalization":
		if k != 0 {
			return 0
		}
		kOut = 0
	case "BatchNormalization":
		if nd.g.IntOr("training_mode", 0) != 0 || k == 1 {
			return 0 // batch statistics mix samples
		}
		kOut = k
	case "LayerNormalization":
		a := nd.g.IntOr("axis", -1)
		if a < 0 {
			a += int64(r)
		}
		if k >= int(a) {
			return 0
		}
		kOut = k
	case fusedNormalize: // over the last axis
		if k >= r-1 {
			return 0
		}
		kOut = k
	case "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
		"ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp":
		axes, noop, err := nd.g.ReduceAxes(r)
		if err != nil {
			return 0
		}
		kOut = k
		if !noop {
			shift := 0
			for _, a := range axes {
				if a == k {
					return 0
				}
				if a < k {
					shift++
				}
			}
			if nd.g.IntOr("keepdims", 1) == 0 {
				kOut = k - shift
			}
		}
	case "Softmax", "LogSoftmax":
		if nd.g.Opset < 13 { // coerced to 2-D at axis
			a := nd.g.IntOr("axis", 1)
			if a < 0 {
				a += int64(r)
			}
			if int(a) <= k {
				return 0
			}
		} else {
			a := nd.g.IntOr("axis", -1)
			if a < 0 {
				a += int64(r)
			}
			if int(a) == k {
				return 0
			}
		}
		kOut = k
	case "Gather":
		if si != 0 {
			return 0
		}
		a := nd.g.IntOr("axis", 0)
		if a < 0 {
			a += int64(r)
		}
		switch {
		case int(a) == k:
			// Along the batch axis only constant indices that keep each
			// sample's elements together (dynamo's as_strided views).
			idx := nd.in[1]
			if idx == nil || !idx.isConst || idx.i64 == nil {
				return 0
			}
			s, ok := graph.GatherSampleStride(idx.i64, int64(src.shape[k]), int64(inner), int64(N))
			if !ok {
				return 0
			}
			return int(s) * strides(src.shape)[k]
		case int(a) < k:
			kOut = k - 1 + len(nd.in[1].shape)
		default:
			kOut = k
		}
	case "Einsum":
		eq, _ := nd.g.Str("equation")
		ranks := make([]int, len(nd.in))
		for i, t := range nd.in {
			ranks[i] = len(t.shape)
		}
		spec, err := graph.ParseEinsum(eq, ranks)
		if err != nil {
			return 0
		}
		l := spec.Inputs[si][k]
		for j, o := range spec.Output {
			if o == l {
				kOut = j
			}
		}
	case "ScatterND":
		// Data's batch axis below the indexed axes, with updates that do
		// not depend on the samples, keeps each sample in place; so do
		// constant indices that write each sample's updates into the
		// same sample (graph.ScatterKeepsSamples).
		idx, upd := nd.in[1], nd.in[2]
		if si != 0 || len(idx.shape) == 0 {
			return 0
		}
		switch {
		case k >= idx.shape[len(idx.shape)-1] && upd.bstride <= 0:
		case upd.bstride > 0 && idx.isConst && idx.i64 != nil && inner == 1 && src.shape[k] == N:
			ku, innerU := batchAt(upd.shape, upd.bstride)
			shape := make([]int64, len(idx.shape))
			for j, d := range idx.shape {
				shape[j] = int64(d)
			}
			if ku < 0 || innerU != 1 || !graph.ScatterKeepsSamples(idx.i64, shape, k, int64(N), ku) {
				return 0
			}
		default:
			return 0
		}
		kOut = k
	default:
		// Elementwise ops, Concat, Slice, Pad, Expand, Where, Clip...: the
		// same axis, right-aligned to the output rank.
		kOut = k + ry - r
	}
	if kOut < 0 || kOut >= ry || y.shape[kOut] != src.shape[k] {
		return 0
	}
	return inner * strides(y.shape)[kOut]
}
