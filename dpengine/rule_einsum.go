package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Einsum with one weight and one data operand. Its labels split as
// rewrite.SplitEinsum says: groups G (weight, data and output: heads),
// contracted K (D), features N (p), rows R (T, with the batch label b in
// the data and the output only). Per group, sample i's weight gradient is
// a_iᵀg_i with a_i its data rows (T×D) and g_i its output-gradient rows
// (T×p): a grouped linear layer, with the ghost norm or instantiation of
// any other, gathered through index maps built at the first hook.

func init() {
	registerLinear(&linearRule{perSample: einsumUse, weightedSum: einsumWeightedSum}, "Einsum")
}

// einsumGeom is one Einsum use's geometry and index maps: aIdx (G·T·D)
// and gIdx (G·T·P) are offsets into a sample of the data operand and of
// the output gradient, wIdx (G·D·P) into the weight, each in (group, row,
// column) order.
type einsumGeom struct {
	G, T, D, P       int
	aIdx, gIdx, wIdx []int32
	// aMap and gMap are aIdx and gIdx as the device's index gathers from
	// a gathered sample of the data operand and of the output gradient
	// (built by einsumUse once the samples' sizes are known).
	aMap, gMap *runtime.IndexMap
	// hostC is host memory for book-keeping's clip factors, copied from
	// the device once per physical batch: each sample's factor is its
	// GEMM's α (a host scalar) and a factor of 0 skips the sample.
	hostC []float32
	// bk: the data operand and output gradient as the runtime holds them.
	x, dy runtime.View
}

// labelOffsets lists, for every coordinate of the labels ls (row-major),
// the offset of that element in a tensor with labels of and shape shape
// (strides of shape; labels of of absent from ls are at 0).
func labelOffsets(ls []rune, size map[rune]int, of []rune, shape []int) []int32 {
	stride := map[rune]int{}
	s := 1
	for a := len(of) - 1; a >= 0; a-- {
		stride[of[a]] = s
		s *= shape[a]
	}
	n := 1
	for _, l := range ls {
		n *= size[l]
	}
	out := make([]int32, n)
	coord := make([]int, len(ls))
	for j := range out {
		off := 0
		for a, l := range ls {
			off += coord[a] * stride[l]
		}
		out[j] = int32(off)
		for a := len(ls) - 1; a >= 0; a-- {
			coord[a]++
			if coord[a] < size[ls[a]] {
				break
			}
			coord[a] = 0
		}
	}
	return out
}

func concatRunes(parts ...[]rune) []rune {
	var out []rune
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// newEinsumGeom builds the geometry of weight operand w of an Einsum node
// whose data operand x carries the batch on x.BatchAxis.
func newEinsumGeom(n *graph.Node, w int, x, dy *runtime.View, weightShape []int, B int) (*einsumGeom, error) {
	eq, err := n.Str("equation")
	if err != nil {
		return nil, err
	}
	if len(n.Inputs) != 2 || w < 0 || w > 1 {
		return nil, fmt.Errorf("a weight as operand %d of %d", w, len(n.Inputs))
	}
	full := [][]int{nil, nil}
	full[w], full[1-w] = weightShape, x.Shape
	shapes := make([][]int64, 2)
	ranks := make([]int, 2)
	for k, sh := range full {
		for _, d := range sh {
			shapes[k] = append(shapes[k], int64(d))
		}
		ranks[k] = len(sh)
	}
	sampleShapes := [][]int{nil, nil}
	sampleShapes[w], sampleShapes[1-w] = weightShape, sampleShape(x, B)
	s, err := graph.ParseEinsum(eq, ranks)
	if err != nil {
		return nil, err
	}
	if x.BatchAxis < 0 || dy.BatchAxis < 0 {
		return nil, fmt.Errorf("data or output gradient without a batch axis")
	}
	b := s.Inputs[1-w][x.BatchAxis]
	if s.Output[dy.BatchAxis] != b {
		return nil, fmt.Errorf("the batch is on output axis %d, label %q, not %q", dy.BatchAxis, s.Output[dy.BatchAxis], b)
	}
	e, err := rewrite.SplitEinsum(s, shapes, w, b)
	if err != nil {
		return nil, err
	}
	size := map[rune]int{}
	for i, ls := range s.Inputs {
		for a, l := range ls {
			size[l] = sampleShapes[i][a]
		}
	}
	prod := func(ls []rune) int {
		p := 1
		for _, l := range ls {
			p *= size[l]
		}
		return p
	}
	g := &einsumGeom{G: prod(e.G), T: prod(e.R), D: prod(e.K), P: prod(e.N)}
	g.aIdx = labelOffsets(concatRunes(e.G, e.R, e.K), size, s.Inputs[1-w], sampleShapes[1-w])
	g.gIdx = labelOffsets(concatRunes(e.G, e.R, e.N), size, s.Output, sampleShape(dy, B))
	g.wIdx = labelOffsets(concatRunes(e.G, e.K, e.N), size, s.Inputs[w], weightShape)
	return g, nil
}

// rows gathers sample i's a_i and g_i, group after group, into a and gg:
// the sample's blocks, then the device's index gathers over aMap and gMap.
func (g *einsumGeom) rows(lay runtime.GraphOps, x, dy *runtime.View, B, i int, xs, ys, a, gg []float32) ([]float32, []float32) {
	xs = gatherSample(lay, x, B, i, xs)
	ys = gatherSample(lay, dy, B, i, ys)
	lay.IndexGather(xs, g.aMap, a[:len(g.aIdx)])
	lay.IndexGather(ys, g.gMap, gg[:len(g.gIdx)])
	return xs, ys
}

// inst writes sample i's weight gradient, in the weight's layout, to out
// (scaled by c), from a and gg; tmp holds D·P floats. Each group's D×P
// product lands in the weight's layout through the device's scatter.
func (g *einsumGeom) inst(ops runtime.DPOps, lay runtime.GraphOps, a, gg []float32, c float32, tmp, out []float32) {
	T, D, P := g.T, g.D, g.P
	for gr := 0; gr < g.G; gr++ {
		ops.GemmSerial(true, false, D, P, T, c, a[gr*T*D:(gr+1)*T*D], D, gg[gr*T*P:(gr+1)*T*P], P, 0, tmp, P)
		lay.ScatterReduce(runtime.ScatterReduceNone, tmp[:D*P], g.wIdx[gr*D*P:(gr+1)*D*P], out)
	}
}

// einsumUse is the per-sample rule of an Einsum weight.
func einsumUse(e *Engine, ev *runtime.HookEvent, us *useState) error {
	ls, p := us.linear, us.p
	B := e.cfg.PhysicalBatch
	x, dy := &ev.Inputs[us.use.Data], &ev.DOut
	w := us.use.Operand
	if ls.einsum == nil {
		g, err := newEinsumGeom(ev.Node, w, x, dy, ev.Inputs[w].Shape, B)
		if err != nil {
			return err
		}
		ls.einsum = g
	}
	g := ls.einsum
	xLen, yLen := len(x.Data)/B, len(dy.Data)/B
	if g.G*g.T*g.D != xLen || g.G*g.T*g.P != yLen {
		return fmt.Errorf("samples of %d and %d values for %d groups of %d rows, D=%d, p=%d", xLen, yLen, g.G, g.T, g.D, g.P)
	}
	if g.aMap == nil {
		g.aMap = runtime.NewIndexMap(g.aIdx, xLen, 0)
		g.gMap = runtime.NewIndexMap(g.gIdx, yLen, 0)
		g.hostC = make([]float32, B)
	}
	if e.cfg.Mode == BK && p.ps == nil {
		g.x, g.dy = *x, *dy
		ls.x = x.Data
	}
	size := g.G * g.D * g.P // the operand's: the parameter's unless through a path
	rows := g.G * g.T * (g.D + g.P)
	need := xLen + yLen + rows + 2*g.T*g.T
	if ls.decision == rewrite.Instantiate {
		need = xLen + yLen + rows + g.D*g.P + size
	}
	bufs, err := e.workerBufs(need)
	if err != nil {
		return err
	}
	e.forSamples(e.n, func(wk, i int) {
		buf := bufs[wk]
		xs, ys := buf[:0:xLen], buf[xLen:xLen:xLen+yLen]
		rest := buf[xLen+yLen:]
		a, gg := rest[:g.G*g.T*g.D], rest[g.G*g.T*g.D:rows]
		rest = rest[rows:]
		g.rows(e.lay, x, dy, B, i, xs, ys, a, gg)
		if ls.decision == rewrite.Ghost {
			for gr := 0; gr < g.G; gr++ {
				addGhostNormSq(e.ops, 1, a[gr*g.T*g.D:(gr+1)*g.T*g.D], g.T, g.D, gg[gr*g.T*g.P:(gr+1)*g.T*g.P], g.P, rest, p.normSq[i:i+1])
			}
			return
		}
		full := rest[g.D*g.P : g.D*g.P+size]
		g.inst(e.ops, e.lay, a, gg, 1, rest[:g.D*g.P], full)
		us.addSample(e.ops, i, 0, full)
	})
	return nil
}

// einsumWeightedSum is book-keeping's Σ_i c_i g_i of an Einsum weight,
// one sample at a time from the kept data and output gradient.
func einsumWeightedSum(ls *linearState, c []float32, B int, accum []float32, overwrite bool, scratch *[]float32, _ []float32) error {
	g := ls.einsum
	if g == nil {
		return fmt.Errorf("no Einsum geometry")
	}
	if overwrite {
		ls.lay.Fill(0, accum)
	}
	xLen, yLen := len(g.x.Data)/B, len(g.dy.Data)/B
	rows := g.G * g.T * (g.D + g.P)
	size := g.G * g.D * g.P
	buf, err := growOn(ls.dev, *scratch, xLen+yLen+rows+g.D*g.P+size)
	if err != nil {
		return err
	}
	*scratch = buf
	xs, ys := buf[:0:xLen], buf[xLen:xLen:xLen+yLen]
	a, gg := buf[xLen+yLen:xLen+yLen+g.G*g.T*g.D], buf[xLen+yLen+g.G*g.T*g.D:xLen+yLen+rows]
	tmp, full := buf[xLen+yLen+rows:xLen+yLen+rows+g.D*g.P], buf[xLen+yLen+rows+g.D*g.P:]
	// The factors are step scalars here: one copy to the host through the
	// device's copy (staged where the memory is the device's).
	hc := g.hostC[:B]
	ls.lay.Copy(c[:B], hc)
	for i := 0; i < B; i++ {
		if hc[i] == 0 {
			continue
		}
		g.rows(ls.lay, &g.x, &g.dy, B, i, xs, ys, a, gg)
		g.inst(ls.ops, ls.lay, a, gg, hc[i], tmp, full)
		ls.ops.Add(full, accum)
	}
	return nil
}
