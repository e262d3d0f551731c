package graph

import (
	"errors"
	"fmt"
)

func init() {
	rules["ConvTranspose"] = rule{infer: inferConvTranspose}
}

// ConvTransposeWindow resolves a ConvTranspose node on an input of spatial
// sizes in with a weight of spatial sizes kernel: strides, dilations and
// output_padding default to 1, 1 and 0; with output_shape (spatial sizes,
// or with N and C in front) or auto_pad SAME_* (output = input·stride) the
// pads are the total padding split as the ONNX spec says (the odd unit at
// the end for SAME_UPPER, at the beginning otherwise, as onnxruntime
// does). Out is the output's spatial sizes.
func (n *Node) ConvTransposeWindow(in, kernel []int64) (*WindowParams, []int64, error) {
	r := len(in)
	p, err := n.windowSteps(r, kernel)
	if err != nil {
		return nil, nil, err
	}
	outPad, err := n.Ints("output_padding", make([]int64, r))
	if err != nil {
		return nil, nil, err
	}
	if len(outPad) != r {
		return nil, nil, fmt.Errorf("output_padding %v does not match %d spatial dims", outPad, r)
	}
	for i := 0; i < r; i++ {
		if outPad[i] < 0 || (outPad[i] >= p.Strides[i] && outPad[i] >= p.Dilations[i]) {
			return nil, nil, fmt.Errorf("output_padding %v must be smaller than the stride %v or the dilation %v", outPad, p.Strides, p.Dilations)
		}
	}
	outShape, err := n.Ints("output_shape", nil)
	if err != nil {
		return nil, nil, err
	}
	if len(outShape) == r+2 {
		outShape = outShape[2:]
	}
	if outShape != nil && len(outShape) != r {
		return nil, nil, fmt.Errorf("output_shape %v does not match %d spatial dims", outShape, r)
	}
	autoPad, _ := n.Str("auto_pad")
	pads, err := n.Ints("pads", make([]int64, 2*r))
	if err != nil {
		return nil, nil, err
	}
	if len(pads) != 2*r {
		return nil, nil, fmt.Errorf("pads %v do not match %d spatial dims", pads, r)
	}
	for _, v := range append(append([]int64{}, pads...), outShape...) {
		if v > maxWindow || v < -maxWindow {
			return nil, nil, fmt.Errorf("pads %v or output_shape %v beyond ±%d", pads, outShape, maxWindow)
		}
	}
	switch autoPad {
	case "", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER":
	default:
		return nil, nil, fmt.Errorf("auto_pad %q is not supported", autoPad)
	}
	if autoPad == "VALID" {
		pads = make([]int64, 2*r)
	}
	if outShape == nil && (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
		outShape = make([]int64, r)
		for i := range outShape {
			outShape[i] = in[i] * p.Strides[i]
			if in[i] < 0 {
				outShape[i] = -1
			}
		}
	}
	p.Pads = append([]int64{}, pads...)
	out := make([]int64, r)
	for i := 0; i < r; i++ {
		if in[i] < 0 {
			out[i] = -1
			continue
		}
		if in[i]-1 > (1<<62)/p.Strides[i] {
			return nil, nil, fmt.Errorf("input size %d along axis %d at stride %d overflows the output size", in[i], i, p.Strides[i])
		}
		full := p.Strides[i]*(in[i]-1) + outPad[i] + (kernel[i]-1)*p.Dilations[i] + 1
		if outShape != nil {
			total := full - outShape[i]
			if total < 0 {
				// A larger output takes the extra units at the end, as
				// output_padding does (the spec's output_shape example).
				if -total >= p.Strides[i] {
					return nil, nil, fmt.Errorf("output_shape %v exceeds the %d the input gives along axis %d by a stride or more", outShape, full, i)
				}
				full, total = outShape[i], 0
			}
			if autoPad == "SAME_UPPER" {
				p.Pads[i], p.Pads[i+r] = total/2, total-total/2
			} else {
				p.Pads[i], p.Pads[i+r] = total-total/2, total/2
			}
		}
		if p.Pads[i] < 0 || p.Pads[i+r] < 0 {
			return nil, nil, fmt.Errorf("negative pads %v", p.Pads)
		}
		out[i] = full - p.Pads[i] - p.Pads[i+r]
		if out[i] <= 0 {
			return nil, nil, fmt.Errorf("pads %v leave no output of input %v", p.Pads, in)
		}
	}
	p.Out = out
	return p, outPad, nil
}

func inferConvTranspose(g *Graph, n *Node) error {
	x, w := n.Input(0), n.Input(1)
	if x == nil || w == nil || x.Shape == nil || w.Shape == nil || len(w.Shape) != len(x.Shape) || len(x.Shape) < 3 {
		return errors.New("ConvTranspose needs X and W of the same known rank ≥ 3")
	}
	group, err := n.Int("group")
	if err != nil {
		return err
	}
	c := x.Shape[1].Size
	if group <= 0 || (c >= 0 && w.Shape[0].Size >= 0 && c != w.Shape[0].Size) || (c >= 0 && c%group != 0) {
		return fmt.Errorf("X has %d channels, W %v, group %d: want W.shape[0] = channels, divisible by group", c, w.Shape, group)
	}
	kernel, err := n.Ints("kernel_shape", w.Shape[2:].Ints())
	if err != nil {
		return err
	}
	p, _, err := n.ConvTransposeWindow(x.Shape[2:].Ints(), kernel)
	if err != nil {
		return err
	}
	m := int64(-1)
	if w.Shape[1].Size >= 0 {
		m = w.Shape[1].Size * group
	}
	if b := n.Input(2); b != nil && b.Shape != nil && (len(b.Shape) != 1 || (b.Shape[0].Size >= 0 && m >= 0 && b.Shape[0].Size != m)) {
		return fmt.Errorf("bias shape %v does not match %d output channels", b.Shape, m)
	}
	out := Shape{x.Shape[0], {Size: m}}
	for _, o := range p.Out {
		out = append(out, Dim{Size: o})
	}
	setOut(n, 0, x.DType, out)
	return nil
}
