package runtime

import "fmt"

func init() {
	opTable["ConvTranspose"] = buildConvTranspose
}

// buildConvTranspose compiles ConvTranspose as the adjoint of a Conv:
// forward is that Conv's input gradient, the input gradient is that Conv's
// forward, the weight gradient is its weight gradient with the roles of
// input and output gradient swapped.
func buildConvTranspose(p *Plan, nd *node) error {
	x, w, b, err := floatIn3(nd)
	if err != nil {
		return err
	}
	y := nd.out[0]
	if len(x.shape) < 3 || len(x.shape) > 5 || len(w.shape) != len(x.shape) {
		return fmt.Errorf("input %v and weight %v: want 1-3 spatial dims", x.shape, w.shape)
	}
	wp, _, err := nd.g.ConvTransposeWindow(to64(x.shape[2:]), to64(w.shape[2:]))
	if err != nil {
		return err
	}
	group := int(nd.g.IntOr("group", 1))
	cout := w.shape[1] * group
	if want := append([]int{x.shape[0], cout}, toInt(wp.Out)...); !sameInts(want, y.shape) {
		return fmt.Errorf("output shape %v, the attributes give %v", y.shape, want)
	}
	s := &ConvShape{
		N: x.shape[0], C: cout, M: x.shape[1], Group: group,
		In: y.shape[2:], Kernel: w.shape[2:], Strides: toInt(wp.Strides), Dilations: toInt(wp.Dilations), Pads: toInt(wp.Pads),
	}
	if err := s.Init(); err != nil {
		return err
	}
	if w.shape[0] != x.shape[1] || x.shape[1]%group != 0 {
		return fmt.Errorf("weight %v does not match %d input channels in %d groups", w.shape, x.shape[1], group)
	}
	if !sameInts(s.Out, x.shape[2:]) {
		return fmt.Errorf("output_padding beyond the stride is not supported (output %v, input %v)", y.shape, x.shape)
	}
	if b != nil && b.n != cout {
		return fmt.Errorf("bias %v does not match %d output channels", b.shape, cout)
	}
	p.needWS(p.ops.ConvScratchSize(s))
	nd.conv = s // the hook event passes it as TransposedConv
	nd.saveIn[0], nd.saveIn[1] = true, true
	nd.fwd = func() {
		var bias []float32
		if b != nil {
			bias = b.data
		}
		p.ops.ConvTranspose(s, x.data, w.data, bias, y.data, p.ws)
	}
	nd.bwd = func() {
		var db []float32
		if len(nd.dIn) > 2 {
			db = nd.dIn[2]
		}
		p.ops.ConvTransposeBackward(s, x.data, w.data, y.grad, nd.dIn[0], nd.dIn[1], db, p.ws)
	}
	return nil
}
