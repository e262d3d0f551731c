package runtime

import (
	"fmt"
	"math"
)

func init() {
	opTable["LRN"] = buildLRN
}

// buildLRN compiles local response normalization across channels (the
// Caffe-era AlexNet and GoogLeNet exports):
//
//	s_c = bias + α/size · Σ_{c′ ∈ W(c)} x_{c′}²,  y_c = x_c · s_c^(−β)
//
// with W(c) = [c − ⌊(size−1)/2⌋, c + ⌈(size−1)/2⌉] clipped to the channels.
// Backward: dx_j = dy_j·s_j^(−β) − 2αβ/size · x_j · Σ_{c: j ∈ W(c)} dy_c·x_c·s_c^(−β−1).
func buildLRN(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	if len(x.shape) < 2 {
		return fmt.Errorf("input %v has no channel axis", x.shape)
	}
	size, err := nd.g.Int("size")
	if err != nil {
		return err
	}
	if size <= 0 {
		return fmt.Errorf("size %d must be positive", size)
	}
	alpha := float64(attrF(nd, "alpha", 1e-4))
	beta := float64(attrF(nd, "beta", 0.75))
	bias := float64(attrF(nd, "bias", 1))
	N, C := x.shape[0], x.shape[1]
	inner := numel(x.shape[2:])
	lo, hi := int(size-1)/2, int(size)/2 // window [c−lo, c+hi]
	y := nd.out[0]
	scale := alpha / float64(size)
	// scales writes s_c for every element of sample i into s.
	scales := func(i int, s []float32) {
		xd := x.data[i*C*inner : (i+1)*C*inner]
		for k := 0; k < inner; k++ {
			for c := 0; c < C; c++ {
				var sum float64
				for q := max(0, c-lo); q <= min(C-1, c+hi); q++ {
					v := float64(xd[q*inner+k])
					sum += v * v
				}
				s[c*inner+k] = float32(bias + scale*sum)
			}
		}
	}
	per := C * inner
	p.needWS(N * per) // s of every sample: no per-worker bookkeeping
	nd.saveIn[0] = true
	fwd := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s := p.ws[i*per : (i+1)*per]
			scales(i, s)
			xd, yd := x.data[i*per:(i+1)*per], y.data[i*per:(i+1)*per]
			for j, v := range xd {
				yd[j] = v * float32(math.Pow(float64(s[j]), -beta))
			}
		}
	}
	bwd := func(lo0, hi0 int) {
		for i := lo0; i < hi0; i++ {
			s := p.ws[i*per : (i+1)*per]
			scales(i, s)
			xd, dy, dx := x.data[i*per:(i+1)*per], y.grad[i*per:(i+1)*per], nd.dIn[0][i*per:(i+1)*per]
			// s_c is read once per element: overwrite it with
			// t_c = dy_c·x_c·s_c^(−β−1) for the window sums.
			for j := range xd {
				sj := float64(s[j])
				pw := math.Pow(sj, -beta)
				dx[j] = dy[j] * float32(pw)
				s[j] = dy[j] * xd[j] * float32(pw/sj)
			}
			for k := 0; k < inner; k++ {
				for j := 0; j < C; j++ {
					// c with j ∈ W(c): c − lo ≤ j ≤ c + hi, i.e. c ∈ [j−hi, j+lo].
					var acc float64
					for c := max(0, j-hi); c <= min(C-1, j+lo); c++ {
						acc += float64(s[c*inner+k])
					}
					dx[j*inner+k] -= float32(2 * scale * beta * float64(xd[j*inner+k]) * acc)
				}
			}
		}
	}
	grain := grainFor(per * int(size))
	nd.fwd = func() { parFor(N, grain, fwd) }
	nd.bwd = func() { parFor(N, grain, bwd) }
	return nil
}
