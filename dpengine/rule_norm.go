package dpengine

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The scale and bias of native normalization nodes: LayerNormalization
// (opset 17), GroupNormalization (opset 18, per-group or per-channel
// affine) and InstanceNormalization. With x̂ the normalized input of a
// sample (recomputed here from its input, as the runtime computes it),
// sample i's gradient is Σ g·x̂ for the scale and Σ g for the bias, summed
// over the positions that share a parameter element.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: normOperand}, "LayerNormalization", "GroupNormalization", "InstanceNormalization")
}

// normGeom is how a normalization node splits one sample into rows of L
// normalized elements and which parameter element element j of row r
// uses.
type normGeom struct {
	L       int
	perRow  bool // parameter element = row % G (opset-18 per-group affine)
	G, CpG  int  // rows per sample (groups); channels per group
	S       int  // spatial size
	channel bool // parameter element = channel of the element
}

func (n *normGeom) pidx(row, j int) int {
	switch {
	case n.perRow:
		return row % n.G
	case n.channel:
		return (row%n.G)*n.CpG + j/n.S
	}
	return j
}

func normGeometry(ev *runtime.HookEvent, nParams int) (normGeom, error) {
	x := &ev.Inputs[0]
	shape := x.Shape
	switch op := ev.Node.OpType; op {
	case "LayerNormalization":
		a := int(ev.Node.IntOr("axis", -1))
		if a < 0 {
			a += len(shape)
		}
		if a < 0 || a >= len(shape) || a <= x.BatchAxis {
			return normGeom{}, fmt.Errorf("LayerNormalization axis %d with the batch on axis %d of %v", a, x.BatchAxis, shape)
		}
		L := 1
		for _, d := range shape[a:] {
			L *= d
		}
		if nParams != L {
			return normGeom{}, fmt.Errorf("LayerNormalization scale/bias of %d elements for rows of %d", nParams, L)
		}
		return normGeom{L: L}, nil
	case "GroupNormalization", "InstanceNormalization":
		if x.BatchAxis != 0 || len(shape) < 2 {
			return normGeom{}, fmt.Errorf("%s input %v with the batch on axis %d", op, shape, x.BatchAxis)
		}
		C, S := shape[1], 1
		for _, d := range shape[2:] {
			S *= d
		}
		G := C
		if op == "GroupNormalization" {
			g, err := ev.Node.Int("num_groups")
			if err != nil {
				return normGeom{}, err
			}
			G = int(g)
		}
		if G <= 0 || C%G != 0 {
			return normGeom{}, fmt.Errorf("%d channels do not split into %d groups", C, G)
		}
		n := normGeom{L: C / G * S, G: G, CpG: C / G, S: S, channel: true}
		switch {
		case nParams == G && G != C:
			n.perRow, n.channel = true, false // opset-18 per-group scale and bias
		case nParams != C:
			return normGeom{}, fmt.Errorf("%s scale/bias of %d elements for %d channels", op, nParams, C)
		}
		return n, nil
	}
	return normGeom{}, fmt.Errorf("no normalization rule for %s", ev.Node.OpType)
}

// normOperand is sample s.i's gradient with respect to the scale (input 1)
// or the bias (input 2) of a normalization node.
func normOperand(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error {
	if s.k != 1 && s.k != 2 {
		return fmt.Errorf("%s input %d is not a scale or bias", ev.Node.OpType, s.k)
	}
	x := &ev.Inputs[0]
	if x.BatchAxis < 0 {
		return fmt.Errorf("%s input has no batch axis", ev.Node.OpType)
	}
	n, err := normGeometry(ev, len(s.out))
	if err != nil {
		return err
	}
	eps := 1e-5
	if ev.Node.Attr("epsilon") != nil {
		e, err := ev.Node.Float("epsilon")
		if err != nil {
			return err
		}
		eps = float64(e)
	}
	sc.self = gatherSample(x, s.B, s.i, sc.self)
	xi, gi := sc.self, s.gi
	if len(xi) != len(gi) || len(xi)%n.L != 0 {
		return fmt.Errorf("%s input of %d and output gradient of %d elements per sample for rows of %d", ev.Node.OpType, len(xi), len(gi), n.L)
	}
	if cap(sc.acc) < len(s.out) {
		sc.acc = make([]float64, len(s.out))
	}
	acc := sc.acc[:len(s.out)]
	clear(acc)
	for row := 0; row < len(xi)/n.L; row++ {
		xr, gr := xi[row*n.L:(row+1)*n.L], gi[row*n.L:(row+1)*n.L]
		if s.k == 2 {
			for j, g := range gr {
				acc[n.pidx(row, j)] += float64(g)
			}
			continue
		}
		// x̂ exactly as the runtime's forward computes it (rowNorm).
		var sum float64
		for _, v := range xr {
			sum += float64(v)
		}
		m := sum / float64(n.L)
		var ss float64
		for _, v := range xr {
			d := float64(v) - m
			ss += d * d
		}
		mf, ivf := float32(m), float32(1/math.Sqrt(ss/float64(n.L)+eps))
		for j, g := range gr {
			acc[n.pidx(row, j)] += float64(g * (xr[j] - mf) * ivf)
		}
	}
	for k, v := range acc {
		s.out[k] = float32(v)
	}
	return nil
}
