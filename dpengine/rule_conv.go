package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Conv weights (1-D/2-D/3-D, groups, depthwise) and Conv biases.

func init() {
	registerLinear(&linearRule{perSample: convUse, weightedSum: convWeightedSum}, "Conv")
	registerElementwise(&elementwiseRule{operandGrad: convBiasOperand, batch: convBias}, "Conv")
}

// convUse handles a Conv weight: a_i is the unfolded input of sample i and
// group g (T×D), and the output gradient of the group is already laid out
// p×T, i.e. g_iᵀ.
func convUse(e *Engine, ev *runtime.HookEvent, us *useState) error {
	return convUseOn(e, us, ev.Conv, &ev.Inputs[0], &ev.DOut)
}

// convUseOn is convUse for the convolution s with input x and output
// gradient dy (a ConvTranspose passes the Conv it is the adjoint of, its
// output gradient as x and its input as dy).
func convUseOn(e *Engine, us *useState, s *runtime.ConvShape, x, dy *runtime.View) error {
	ls, p := us.linear, us.p
	if s == nil {
		return fmt.Errorf("no convolution geometry")
	}
	if x.BatchAxis != 0 || dy.BatchAxis != 0 {
		return fmt.Errorf("convolution without a leading batch axis")
	}
	B := s.N
	groups := max(s.Group, 1)
	T, D := s.T, s.D
	P := s.M / groups
	inLen, outLen := len(x.Data)/B, len(dy.Data)/B
	ls.conv = s
	if e.cfg.Mode == BK && p.ps == nil {
		// The input and output gradient stay alive (KeepHooked) for
		// Σ_i C_i g_i once the clip factors are known.
		ls.x, ls.dy = x.Data, dy.Data
	}
	size := s.M * s.D // the operand's: the parameter's unless through a path
	if s.IsDepthwise() {
		// A depthwise group is one input channel and its M/C output
		// channels of K taps: the per-sample gradient (M·K values) comes
		// directly from the input planes and the output gradient,
		// without unfolding or a GEMM per group, whatever the layer's
		// ghost/instantiate decision (both give this norm).
		if size != s.M*s.K {
			return fmt.Errorf("depthwise weight of %d values, want %d", size, s.M*s.K)
		}
		scratch := e.ops.DepthwiseScratchSize(s)
		bufs, err := e.workerBufs(scratch + size)
		if err != nil {
			return err
		}
		e.forSamples(e.n, func(w, i int) {
			buf := bufs[w]
			inst := buf[scratch : scratch+size]
			e.ops.DepthwisePerSampleGrad(s, x.Data[i*inLen:(i+1)*inLen], dy.Data[i*outLen:(i+1)*outLen], inst, buf[:scratch])
			us.addSample(e.ops, i, 0, inst)
		})
		return nil
	}
	// Each sample's input is unfolded as col = a_iᵀ (D×T, the runtime's
	// im2col layout, which the gather-map path fills fastest); then
	// a_i a_iᵀ = colᵀcol and g_iᵀa_i = gT·colᵀ.
	plane := s.PlaneSize()
	need := plane + T*D + 2*T*T
	if ls.decision == rewrite.Instantiate {
		need = plane + T*D + P*D
	}
	bufs, err := e.workerBufs(need)
	if err != nil {
		return err
	}
	e.forSamples(e.n, func(w, i int) {
		buf := bufs[w]
		pl, col, rest := buf[:plane], buf[plane:plane+T*D], buf[plane+T*D:]
		xi := x.Data[i*inLen : (i+1)*inLen]
		for gr := 0; gr < groups; gr++ {
			e.ops.Im2ColPlane(s, xi, gr, col, pl)
			gT := dy.Data[i*outLen+gr*P*T : i*outLen+(gr+1)*P*T]
			if ls.decision == rewrite.Ghost {
				aa, gg := rest[:T*T], rest[T*T:2*T*T]
				e.ops.GemmSerial(true, false, T, T, D, 1, col, T, col, T, 0, aa, T)
				e.ops.GemmSerial(true, false, T, T, P, 1, gT, T, gT, T, 0, gg, T)
				p.normSq[i] += e.ops.Dot(aa, gg) // host write: a device accumulation
				continue
			}
			inst := rest[:P*D]
			e.ops.GemmSerial(false, true, P, D, T, 1, gT, T, col, T, 0, inst, D)
			us.addSample(e.ops, i, gr*P*D, inst)
		}
	})
	return nil
}

// convWeightedSum is book-keeping's Σ_i c_i g_i of a Conv weight: the
// convolution's own weight-gradient kernel on the kept input and the
// output gradient scaled per sample (see linearState.weightedSum).
func convWeightedSum(ls *linearState, c []float32, B int, accum []float32, overwrite bool, scratch *[]float32, ws []float32) error {
	outLen := len(ls.dy) / B
	for i := 0; i < B; i++ {
		ls.ops.Scale(c[i], ls.dy[i*outLen:(i+1)*outLen])
	}
	return convWeightGradInto(ls, accum, overwrite, scratch, ws)
}

// convWeightGradInto runs the convolution's weight-gradient kernel on the
// kept ls.x and ls.dy (already scaled per sample) and writes the result to
// accum (overwrite) or adds it there, with the kernel's workspace taken from
// ws when large enough, else from scratch.
func convWeightGradInto(ls *linearState, accum []float32, overwrite bool, scratch *[]float32, ws []float32) error {
	need := ls.ops.ConvWorkspaceSize(ls.conv)
	dwLen := len(accum)
	if overwrite {
		dwLen = 0
	}
	extra := 0
	if len(ws) < need {
		extra = need
	}
	buf, err := growOn(ls.dev, *scratch, dwLen+extra)
	if err != nil {
		return err
	}
	*scratch = buf
	dw := (*scratch)[:dwLen]
	if extra > 0 {
		ws = (*scratch)[dwLen:]
	}
	if overwrite {
		dw = accum
	}
	ls.ops.ConvWeightGrad(ls.conv, ls.x, ls.dy, dw, ws)
	if !overwrite {
		ls.ops.Add(dw, accum)
	}
	return nil
}

// convBias handles the commonest elementwise parameter, a convolution's
// bias read by nothing else: sample i's gradient is its output gradient
// summed over positions, read in place and split over the cores. The
// general path (a gathered copy and one sequential sum per channel, on one
// core) cost 34 ms of a 730 ms book-keeping step of VGG-19 at batch 16.
// It reports false, doing nothing, for any other case.
func convBias(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	if len(g.uses) != 1 || g.sub != nil || g.uses[0].use.Operand != 2 {
		return false
	}
	p, dy := g.uses[0].p, &ev.DOut
	M := len(p.data)
	B := e.cfg.PhysicalBatch
	if dy.BatchAxis != 0 || dy.BatchStride*B != len(dy.Data) || M == 0 || dy.BatchStride%M != 0 {
		return false
	}
	stride := dy.BatchStride
	var bufs [][]float32
	if p.ps == nil {
		var err error
		if bufs, err = e.workerBufs(M); err != nil {
			return false // the general path reports it
		}
	}
	e.forSamples(e.n, func(w, i int) {
		row := dy.Data[i*stride : (i+1)*stride]
		if p.ps != nil {
			e.ops.AddRunSums(row, p.ps[i*M:(i+1)*M])
			return
		}
		gi := bufs[w][:M]
		e.lay.Fill(0, gi)
		e.ops.AddRunSums(row, gi)
		p.normSq[i] += e.ops.SumSq(gi) // host write: a device accumulation
	})
	return true
}

// convBiasOperand is sample s.i's gradient with respect to a Conv's bias:
// the output gradient summed over positions, per channel.
func convBiasOperand(_ *runtime.HookEvent, s sampleGrad, _ *opScratch) error {
	if s.k != 2 {
		return fmt.Errorf("Conv operand %d is not a bias", s.k)
	}
	M := s.opShape[0]
	T := len(s.gi) / M
	out := s.out[:M]
	s.lay.Fill(0, out)
	s.ops.AddRunSums(s.gi[:M*T], out) // as convBias sums
	return nil
}
