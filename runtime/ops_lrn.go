package runtime

import "fmt"

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
	y := nd.out[0]
	sh := &LRNShape{N: x.shape[0], C: x.shape[1], Inner: numel(x.shape[2:]), Size: int(size), Alpha: alpha, Beta: beta, Bias: bias}
	p.needWS(x.n) // s of every sample: no per-worker bookkeeping
	nd.saveIn[0] = true
	nd.fwd = func() { p.ops.LRN(sh, x.data, y.data, p.ws) }
	nd.bwd = func() { p.ops.LRNBackward(sh, x.data, y.grad, nd.dIn[0], p.ws) }
	return nil
}
