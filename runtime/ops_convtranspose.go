package runtime

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

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
	s := &kernels.ConvShape{
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
	p.needWS(kernels.ConvWorkspaceSize(s))
	nd.conv = s // the hook event passes it as TransposedConv
	nd.saveIn[0], nd.saveIn[1] = true, true
	plane := numel(y.shape[2:])
	nd.fwd = func() {
		kernels.ConvBackward(s, nil, w.data, x.data, y.data, nil, nil, p.ws)
		if b == nil {
			return
		}
		for i := 0; i < s.N; i++ {
			for c := 0; c < cout; c++ {
				row := y.data[(i*cout+c)*plane : (i*cout+c+1)*plane]
				bc := b.data[c]
				for k := range row {
					row[k] += bc
				}
			}
		}
	}
	nd.bwd = func() {
		dy := y.grad
		if dx := nd.dIn[0]; dx != nil {
			kernels.ConvForward(s, dy, w.data, nil, dx, p.ws)
		}
		if dw := nd.dIn[1]; dw != nil {
			kernels.ConvBackward(s, dy, w.data, x.data, nil, dw, nil, p.ws)
		}
		if len(nd.dIn) > 2 && nd.dIn[2] != nil {
			db := nd.dIn[2]
			for c := 0; c < cout; c++ {
				var acc float64
				for i := 0; i < s.N; i++ {
					var part float32
					for _, v := range dy[(i*cout+c)*plane : (i*cout+c+1)*plane] {
						part += v
					}
					acc += float64(part)
				}
				db[c] = float32(acc)
			}
		}
	}
	return nil
}
