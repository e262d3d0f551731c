package graph

import "fmt"

// broadcastShapes applies numpy broadcasting to shapes. Unknown dims
// broadcast against 1 and against themselves; a known mismatch is an error.
func broadcastShapes(shapes ...Shape) (Shape, error) {
	rank := 0
	for _, s := range shapes {
		if s == nil {
			return nil, nil
		}
		if len(s) > rank {
			rank = len(s)
		}
	}
	out := make(Shape, rank)
	for i := range out {
		out[i] = Dim{Size: 1}
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			o := &out[off+i]
			switch {
			case d.Size == 1:
			case o.Size == 1:
				*o = d
			case d.Size < 0 || o.Size < 0:
				if o.Size < 0 && d.Size > 0 {
					*o = d
				}
			case d.Size != o.Size:
				return nil, fmt.Errorf("shapes %v cannot be broadcast (axis %d: %d vs %d)", shapes, off+i, o.Size, d.Size)
			}
		}
	}
	return out, nil
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(axis int64, rank int) (int, error) {
	a := axis
	if a < 0 {
		a += int64(rank)
	}
	if a < 0 || a >= int64(rank) {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	return int(a), nil
}

// stridesOf returns row-major strides in elements.
func stridesOf(shape []int64) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= int(shape[i])
	}
	return st
}

func numel(shape []int64) int {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	return n
}

// broadcastIndex returns, for every element of out, the flat index of the
// element of a tensor of shape in that broadcasts onto it.
func broadcastIndex(out, in []int64) []int {
	n := numel(out)
	idx := make([]int, n)
	inSt := stridesOf(in)
	off := len(out) - len(in)
	coord := make([]int64, len(out))
	for i := 0; i < n; i++ {
		j := 0
		for k := off; k < len(out); k++ {
			if in[k-off] != 1 {
				j += int(coord[k]) * inSt[k-off]
			}
		}
		idx[i] = j
		for k := len(out) - 1; k >= 0; k-- {
			coord[k]++
			if coord[k] < out[k] {
				break
			}
			coord[k] = 0
		}
	}
	return idx
}

// convOutSize returns the output length of a convolution or pooling window
// along one axis.
func convOutSize(in, k, stride, dil, padBegin, padEnd int64, ceil bool) int64 {
	eff := dil*(k-1) + 1
	num := in + padBegin + padEnd - eff
	if num < 0 {
		return 0
	}
	if !ceil {
		return num/stride + 1
	}
	out := (num+stride-1)/stride + 1
	// As PyTorch and onnxruntime do: the last window must start inside the
	// input or the left padding, not entirely in the right padding.
	if (out-1)*stride >= in+padBegin {
		out--
	}
	return out
}

// ResolveAutoPad returns explicit begin/end pads for auto_pad SAME_UPPER,
// SAME_LOWER or VALID (NOTSET returns pads unchanged). pads is laid out as
// ONNX has it: all begins, then all ends.
func ResolveAutoPad(autoPad string, in, kernel, strides, dilations, pads []int64) ([]int64, error) {
	r := len(kernel)
	out := make([]int64, 2*r)
	switch autoPad {
	case "NOTSET", "":
		if len(pads) == 0 {
			return out, nil
		}
		if len(pads) != 2*r {
			return nil, fmt.Errorf("pads has %d values, want %d", len(pads), 2*r)
		}
		copy(out, pads)
		return out, nil
	case "VALID":
		return out, nil
	case "SAME_UPPER", "SAME_LOWER":
		for i := 0; i < r; i++ {
			if in[i] < 0 {
				return nil, fmt.Errorf("auto_pad %s needs a known input size", autoPad)
			}
			o := (in[i] + strides[i] - 1) / strides[i]
			total := (o-1)*strides[i] + dilations[i]*(kernel[i]-1) + 1 - in[i]
			if total < 0 {
				total = 0
			}
			small, big := total/2, total-total/2
			if autoPad == "SAME_UPPER" {
				out[i], out[i+r] = small, big
			} else {
				out[i], out[i+r] = big, small
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown auto_pad %q", autoPad)
}

// maxWindow bounds each kernel size, stride, dilation and pad.
const maxWindow = 1 << 31

// WindowParams are the resolved attributes of a Conv or pooling node.
type WindowParams struct {
	Kernel, Strides, Dilations []int64
	// Pads are begins then ends, as in ONNX.
	Pads     []int64
	CeilMode bool
	Out      []int64 // output spatial sizes
}

// windowSteps reads a window's strides and dilations (default 1) for r
// spatial dims and checks them with the kernel: lengths r, positive, and
// at most maxWindow, so that the window arithmetic (dilation·(kernel−1),
// stride·(input−1), input + pads) cannot overflow — no real window comes
// near 2³¹.
func (n *Node) windowSteps(r int, kernel []int64) (*WindowParams, error) {
	ones := make([]int64, r)
	for i := range ones {
		ones[i] = 1
	}
	var err error
	p := &WindowParams{Kernel: kernel}
	if p.Strides, err = n.Ints("strides", ones); err != nil {
		return nil, err
	}
	if p.Dilations, err = n.Ints("dilations", ones); err != nil {
		return nil, err
	}
	if len(p.Strides) != r || len(p.Dilations) != r || len(kernel) != r {
		return nil, fmt.Errorf("node %s: kernel %v, strides %v, dilations %v do not match %d spatial dims", n, kernel, p.Strides, p.Dilations, r)
	}
	for i := 0; i < r; i++ {
		if p.Strides[i] <= 0 || p.Dilations[i] <= 0 || kernel[i] <= 0 {
			return nil, fmt.Errorf("node %s: kernel %v, strides %v and dilations %v must be positive", n, kernel, p.Strides, p.Dilations)
		}
		if p.Strides[i] > maxWindow || p.Dilations[i] > maxWindow || kernel[i] > maxWindow {
			return nil, fmt.Errorf("node %s: kernel %v, strides %v or dilations %v over %d", n, kernel, p.Strides, p.Dilations, maxWindow)
		}
	}
	return p, nil
}

// Window resolves the window attributes of a Conv, ConvTranspose, MaxPool
// or AveragePool node for an input with the given spatial sizes, applying
// rank-dependent defaults and auto_pad.
func (n *Node) Window(spatial []int64, kernel []int64) (*WindowParams, error) {
	r := len(spatial)
	p, err := n.windowSteps(r, kernel)
	if err != nil {
		return nil, err
	}
	pads, err := n.Ints("pads", nil)
	if err != nil {
		return nil, err
	}
	autoPad, _ := n.Str("auto_pad")
	if p.Pads, err = ResolveAutoPad(autoPad, spatial, kernel, p.Strides, p.Dilations, pads); err != nil {
		return nil, fmt.Errorf("node %s: %w", n, err)
	}
	for _, v := range p.Pads {
		if v < 0 || v > maxWindow {
			return nil, fmt.Errorf("node %s: pads %v must lie in [0, %d]", n, p.Pads, maxWindow)
		}
	}
	p.CeilMode = n.IntOr("ceil_mode", 0) != 0
	p.Out = make([]int64, r)
	for i := 0; i < r; i++ {
		if spatial[i] < 0 {
			p.Out[i] = -1
			continue
		}
		p.Out[i] = convOutSize(spatial[i], kernel[i], p.Strides[i], p.Dilations[i], p.Pads[i], p.Pads[i+r], p.CeilMode)
		if p.Out[i] <= 0 {
			return nil, fmt.Errorf("node %s: window %v does not fit input %v with pads %v", n, kernel, spatial, p.Pads)
		}
	}
	return p, nil
}
