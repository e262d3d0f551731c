package kernels

import (
	"fmt"
	"math"
)

// PoolShape describes an N-D pooling window (ONNX MaxPool / AveragePool,
// 1 ≤ d ≤ 3 spatial dimensions) over N×C×In tensors. Fill the exported
// inputs and call Init.
type PoolShape struct {
	N, C            int   // batch and channels
	In              []int // input spatial dims
	Kernel          []int // window dims
	Strides         []int // nil means all 1
	Dilations       []int // nil means all 1
	Pads            []int // [begin_1..begin_d, end_1..end_d]; nil means 0
	CeilMode        bool  // ceil instead of floor for the output size
	CountIncludePad bool  // AveragePool: divide by the window size clipped to the padded input

	// Derived by Init.
	Out    []int // output spatial dims
	T      int   // output spatial size
	InSize int   // input spatial size

	g geom3
}

// Init validates the shape and fills Out, T and InSize.
func (p *PoolShape) Init() error {
	if p.N < 0 || p.C < 1 {
		return fmt.Errorf("kernels: pool N=%d C=%d invalid", p.N, p.C)
	}
	g, out, err := initGeom(p.In, p.Kernel, p.Strides, p.Dilations, p.Pads, p.CeilMode)
	if err != nil {
		return err
	}
	p.g, p.Out = g, out
	p.T = g.out[0] * g.out[1] * g.out[2]
	p.InSize = g.in[0] * g.in[1] * g.in[2]
	return nil
}

func (p *PoolShape) check() {
	if !p.g.ready {
		panic("kernels: PoolShape used before Init")
	}
}

// taps returns the window taps [klo, khi) of output position o along axis
// a whose input index o·s − pb + k·d lies in [lo, hi).
func (g *geom3) taps(a, o, lo, hi int) (klo, khi int) {
	base := o*g.s[a] - g.pb[a]
	d := g.d[a]
	// smallest k with base + k·d ≥ lo
	if base < lo {
		klo = (lo - base + d - 1) / d
	}
	// largest k with base + k·d < hi, plus one
	if hi-1-base < 0 {
		return klo, klo
	}
	khi = min(g.k[a], (hi-1-base)/d+1)
	if khi < klo {
		khi = klo
	}
	return klo, khi
}

// MaxPoolForward computes y = max over each window (padding excluded) and,
// when argmax is non-nil (N·C·T elements), the flat index within the input
// plane (∏In) of each maximum for the backward pass; the first maximum wins
// ties. A window with no input element gives −Inf and index −1.
func MaxPoolForward(p *PoolShape, x, y []float32, argmax []int32) {
	p.check()
	planes := p.N * p.C
	checkLen("x", x, planes*p.InSize)
	checkLen("y", y, planes*p.T)
	if argmax != nil && len(argmax) < planes*p.T {
		panic("kernels: argmax too short")
	}
	g := &p.g
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			xp := x[pl*p.InSize : (pl+1)*p.InSize]
			yp := y[pl*p.T : (pl+1)*p.T]
			var ap []int32
			if argmax != nil {
				ap = argmax[pl*p.T : (pl+1)*p.T]
			}
			t := 0
			for od := 0; od < g.out[0]; od++ {
				d0, d1 := g.taps(0, od, 0, g.in[0])
				for oh := 0; oh < g.out[1]; oh++ {
					h0, h1 := g.taps(1, oh, 0, g.in[1])
					for ow := 0; ow < g.out[2]; ow++ {
						w0, w1 := g.taps(2, ow, 0, g.in[2])
						best := float32(math.Inf(-1))
						bi := int32(-1)
						for kd := d0; kd < d1; kd++ {
							id := od*g.s[0] - g.pb[0] + kd*g.d[0]
							for kh := h0; kh < h1; kh++ {
								ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
								row := (id*g.in[1] + ih) * g.in[2]
								for kw := w0; kw < w1; kw++ {
									iw := ow*g.s[2] - g.pb[2] + kw*g.d[2]
									// A NaN wins and stays, as in PyTorch.
									if v := xp[row+iw]; bi < 0 || v > best || v != v && best == best {
										best, bi = v, int32(row+iw)
									}
								}
							}
						}
						yp[t] = best
						if ap != nil {
							ap[t] = bi
						}
						t++
					}
				}
			}
		}
	})
}

// MaxPoolBackward routes dy to the argmax positions recorded by
// MaxPoolForward: dx (N·C·InSize) is overwritten.
func MaxPoolBackward(p *PoolShape, dy []float32, argmax []int32, dx []float32) {
	p.check()
	planes := p.N * p.C
	checkLen("dy", dy, planes*p.T)
	checkLen("dx", dx, planes*p.InSize)
	if len(argmax) < planes*p.T {
		panic("kernels: argmax too short")
	}
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			dxp := dx[pl*p.InSize : (pl+1)*p.InSize]
			clear(dxp)
			ap := argmax[pl*p.T : (pl+1)*p.T]
			for t, g := range dy[pl*p.T : (pl+1)*p.T] {
				if i := ap[t]; i >= 0 {
					dxp[i] += g
				}
			}
		}
	})
}

// avgDivisor returns the number of taps the average of output position
// (od, oh, ow) divides by: taps inside the input, or with CountIncludePad
// taps inside the padded input [−pb, in+pe) (which ceil mode can exceed, as
// in PyTorch).
func (p *PoolShape) avgDivisor(od, oh, ow int) float32 {
	g := &p.g
	if !p.CountIncludePad {
		d0, d1 := g.taps(0, od, 0, g.in[0])
		h0, h1 := g.taps(1, oh, 0, g.in[1])
		w0, w1 := g.taps(2, ow, 0, g.in[2])
		return float32((d1 - d0) * (h1 - h0) * (w1 - w0))
	}
	d0, d1 := g.taps(0, od, -g.pb[0], g.in[0]+g.pe[0])
	h0, h1 := g.taps(1, oh, -g.pb[1], g.in[1]+g.pe[1])
	w0, w1 := g.taps(2, ow, -g.pb[2], g.in[2]+g.pe[2])
	return float32((d1 - d0) * (h1 - h0) * (w1 - w0))
}

// AveragePoolForward computes the window averages (ONNX AveragePool,
// including dilations and count_include_pad). A window with no element
// gives 0.
func AveragePoolForward(p *PoolShape, x, y []float32) {
	p.check()
	planes := p.N * p.C
	checkLen("x", x, planes*p.InSize)
	checkLen("y", y, planes*p.T)
	g := &p.g
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			xp := x[pl*p.InSize : (pl+1)*p.InSize]
			yp := y[pl*p.T : (pl+1)*p.T]
			t := 0
			for od := 0; od < g.out[0]; od++ {
				d0, d1 := g.taps(0, od, 0, g.in[0])
				for oh := 0; oh < g.out[1]; oh++ {
					h0, h1 := g.taps(1, oh, 0, g.in[1])
					for ow := 0; ow < g.out[2]; ow++ {
						w0, w1 := g.taps(2, ow, 0, g.in[2])
						var s float32
						for kd := d0; kd < d1; kd++ {
							id := od*g.s[0] - g.pb[0] + kd*g.d[0]
							for kh := h0; kh < h1; kh++ {
								ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
								row := (id*g.in[1] + ih) * g.in[2]
								for kw := w0; kw < w1; kw++ {
									s += xp[row+ow*g.s[2]-g.pb[2]+kw*g.d[2]]
								}
							}
						}
						if div := p.avgDivisor(od, oh, ow); div > 0 {
							s /= div
						}
						yp[t] = s
						t++
					}
				}
			}
		}
	})
}

// AveragePoolBackward spreads each dy over its window's input taps divided
// by the forward divisor; dx is overwritten.
func AveragePoolBackward(p *PoolShape, dy, dx []float32) {
	p.check()
	planes := p.N * p.C
	checkLen("dy", dy, planes*p.T)
	checkLen("dx", dx, planes*p.InSize)
	g := &p.g
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			dxp := dx[pl*p.InSize : (pl+1)*p.InSize]
			clear(dxp)
			dyp := dy[pl*p.T : (pl+1)*p.T]
			t := 0
			for od := 0; od < g.out[0]; od++ {
				d0, d1 := g.taps(0, od, 0, g.in[0])
				for oh := 0; oh < g.out[1]; oh++ {
					h0, h1 := g.taps(1, oh, 0, g.in[1])
					for ow := 0; ow < g.out[2]; ow++ {
						w0, w1 := g.taps(2, ow, 0, g.in[2])
						v := dyp[t]
						t++
						div := p.avgDivisor(od, oh, ow)
						if div == 0 {
							continue
						}
						v /= div
						for kd := d0; kd < d1; kd++ {
							id := od*g.s[0] - g.pb[0] + kd*g.d[0]
							for kh := h0; kh < h1; kh++ {
								ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
								row := (id*g.in[1] + ih) * g.in[2]
								for kw := w0; kw < w1; kw++ {
									dxp[row+ow*g.s[2]-g.pb[2]+kw*g.d[2]] += v
								}
							}
						}
					}
				}
			}
		}
	})
}

// GlobalAveragePool averages each of the planes (N·C of them, each of
// spatial elements) of x into y, summing in float64.
func GlobalAveragePool(planes, spatial int, x, y []float32) {
	checkLen("x", x, planes*spatial)
	checkLen("y", y, planes)
	parallelFor(planes, max(1, elementwiseGrain/max(1, spatial)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			var s float64
			for _, v := range x[pl*spatial : (pl+1)*spatial] {
				s += float64(v)
			}
			y[pl] = float32(s / float64(spatial))
		}
	})
}

// GlobalAveragePoolBackward spreads dy/spatial over each plane of dx.
func GlobalAveragePoolBackward(planes, spatial int, dy, dx []float32) {
	checkLen("dy", dy, planes)
	checkLen("dx", dx, planes*spatial)
	parallelFor(planes, max(1, elementwiseGrain/max(1, spatial)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			v := dy[pl] / float32(spatial)
			row := dx[pl*spatial : (pl+1)*spatial]
			for i := range row {
				row[i] = v
			}
		}
	})
}
