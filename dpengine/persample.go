package dpengine

import (
	"fmt"
	"math"
	"sync"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/blas"
	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

// useGroup is the set of parameter uses that read the same operand of the
// same consumer node: usually one, several when a derived operand (a qkv
// bias concatenated from q_bias and v_bias) carries several parameters.
type useGroup struct {
	output  string // consumer's first output: the hook key
	op      string
	operand int
	uses    []*useState
	// sub back-propagates the operand's per-sample gradient through the
	// parameter-only path to the parameters (nil for direct uses).
	sub     *runtime.Plan
	subOut  []float32 // operand-shaped per-sample gradient
	subBase []float32 // zero-filled operand-shaped buffer for batched operands
}

// serialOpBelow is the per-sample output-gradient size below which the
// kernels operandGrad calls run on one core (twice their elementwise
// grain, 2¹⁵), so that elementwiseGroup splits samples over the cores
// instead. A variable for tests only.
var serialOpBelow = 1 << 16

// opScratch is one worker's buffers for operandGrad: the operand-shaped
// result and the gathered sample slices it works on.
type opScratch struct {
	buf, gi, other, self, d, q []float32
}

type useState struct {
	use    *rewrite.Use
	p      *param
	linear *linearState
}

// forSamples runs fn(w, i) for i in [0, n) on up to kernels.Workers()
// goroutines; w identifies the worker, so fn can use per-worker buffers.
// Each sample is handled by exactly one worker, which therefore owns that
// sample's norm and per-sample gradient slots.
func forSamples(n int, fn func(w, i int)) {
	forSamplesOn(kernels.Workers(), n, fn)
}

// forSamplesOn is forSamples on at most workers goroutines.
func forSamplesOn(workers, n int, fn func(w, i int)) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				fn(w, i)
			}
		}(w)
	}
	wg.Wait()
}

// workerBufs returns per-worker scratch slices of at least size elements,
// reused across layers and steps (grown to the largest layer's need).
func workerBufs(bufs *[][]float32, workers, size int) [][]float32 {
	if len(*bufs) < workers || len((*bufs)[0]) < size {
		*bufs = make([][]float32, workers)
		for w := range *bufs {
			(*bufs)[w] = make([]float32, size)
		}
	}
	return *bufs
}

// linearState is a linear use's layer and book-keeping storage.
type linearState struct {
	layer    *rewrite.Layer
	decision rewrite.Decision
	// bk: the layer's input and output gradient as the runtime holds
	// them (Options.KeepHooked keeps them alive until the next Forward):
	// for Conv (N, C, …) and (N, M, …); for Gemm/MatMul rows of D and p
	// features, sample of row r given by the batch stride.
	x, dy             []float32
	xStride, dyStride int
	conv              *kernels.ConvShape
	T                 int
	// weightLayoutPD is true when the parameter is laid out p×D (Conv,
	// Gemm with transB) rather than D×p (MatMul, Gemm without transB).
	weightLayoutPD bool
	alpha          float32
}

// needPerSample reports whether a parameter keeps B per-sample gradients.
func needPerSample(cfg Config, rp *rewrite.Param) bool {
	if rp.Shared || cfg.Mode == Instantiate {
		return true
	}
	for _, u := range rp.Uses {
		if u.Kind == rewrite.KindElementwise && (cfg.Mode == BK || len(u.Path) > 0) {
			return true
		}
		// Book-keeping keeps a layer's output gradient (T·p per group and
		// sample) and input for Σ_i C_i a_iᵀg_i; where the instantiated
		// per-sample gradient (p·D) is no larger, keeping it instead saves
		// memory and the second pass over the layer (D ≤ T: early conv
		// layers with large feature maps).
		if u.Kind == rewrite.KindLinear && cfg.Mode == BK && u.Layer != nil && u.Layer.Decision == rewrite.Instantiate && u.Layer.D <= u.Layer.T {
			return true
		}
	}
	return false
}

// buildUses indexes the plan's parameter uses by consumer node and
// prepares path sub-plans.
func (e *Engine) buildUses(cg *graph.Graph) error {
	B := e.cfg.PhysicalBatch
	type key struct{ out, operand string }
	byKey := map[key]*useGroup{}
	for _, rp := range e.rp.Params {
		if rp.Kind == rewrite.KindFrozen {
			continue
		}
		p := e.byName[rp.Name]
		if p == nil {
			return fmt.Errorf("dpengine: trainable parameter %q is not in the compiled plan", rp.Name)
		}
		if needPerSample(e.cfg, rp) {
			p.ps = make([]float32, B*len(p.data))
		}
		for _, u := range rp.Uses {
			k := key{u.Output, u.OperandValue}
			g := byKey[k]
			if g == nil {
				g = &useGroup{output: u.Output, op: u.Op, operand: u.Operand}
				byKey[k] = g
				e.groups[u.Output] = append(e.groups[u.Output], g)
			}
			us := &useState{use: u, p: p}
			if u.Kind == rewrite.KindLinear {
				if len(u.Path) > 0 {
					return fmt.Errorf("dpengine: linear use of %q through %d shape ops is not supported", rp.Name, len(u.Path))
				}
				ls := &linearState{layer: u.Layer, decision: u.Layer.Decision}
				switch {
				case e.cfg.Mode == Ghost:
					ls.decision = rewrite.Ghost
				case e.cfg.Mode == Instantiate || rp.Shared:
					ls.decision = rewrite.Instantiate
				}
				us.linear = ls
				p.linear = append(p.linear, ls)
			}
			g.uses = append(g.uses, us)
		}
	}
	for _, gs := range e.groups {
		for _, g := range gs {
			if len(g.uses[0].use.Path) == 0 {
				continue
			}
			var names []string
			for _, u := range g.uses {
				if len(u.use.Path) == 0 {
					return fmt.Errorf("dpengine: operand %q of %s mixes direct and derived parameters", g.uses[0].use.OperandValue, g.output)
				}
				names = append(names, u.p.name)
			}
			sub, err := cg.Extract(g.uses[0].use.OperandValue)
			if err != nil {
				return fmt.Errorf("dpengine: %w", err)
			}
			g.sub, err = runtime.Compile(sub, &runtime.Options{Trainable: names, KeepActivations: true})
			if err != nil {
				return fmt.Errorf("dpengine: path of %v: %w", names, err)
			}
			if err := g.sub.Forward(); err != nil {
				return fmt.Errorf("dpengine: path of %v: %w", names, err)
			}
			out, _ := g.sub.Output(0)
			g.subOut = make([]float32, len(out))
		}
	}
	return nil
}

// clipPhysical runs the DP backward pass(es) of one physical batch and adds
// Σ_i C_i g_i to every parameter's accumulator.
func (e *Engine) clipPhysical(B int) error {
	clear(e.normSq)
	for _, p := range e.params {
		clear(p.normSq)
		clear(p.ps)
	}
	e.hookErr = nil
	opts := &runtime.BackwardOptions{Hook: e.hook, SkipParamGrads: true}
	if err := e.plan.Backward(e.weights, opts); err != nil {
		return err
	}
	if e.hookErr != nil {
		return e.hookErr
	}
	// Norms of parameters that kept per-sample gradients.
	for _, p := range e.params {
		if p.ps == nil {
			continue
		}
		size := len(p.data)
		for i := 0; i < B; i++ {
			p.normSq[i] = sumSq(p.ps[i*size : (i+1)*size])
		}
	}
	// Clip factors: flat over all parameters, or per parameter.
	n := e.n
	K := float64(len(e.params))
	for i := 0; i < B; i++ {
		var tot float64
		for _, p := range e.params {
			tot += p.normSq[i]
		}
		e.normSq[i] = tot
	}
	if e.cfg.PerLayer {
		c := e.cfg.Clipping
		c.R /= math.Sqrt(K)
		for k, p := range e.params {
			for i := 0; i < B; i++ {
				f := float32(0)
				if i < n {
					f = float32(c.Factor(math.Sqrt(p.normSq[i])))
				}
				e.factors[k][i] = f
			}
		}
	}
	f := e.factors[0]
	for i := 0; i < B; i++ {
		norm := math.Sqrt(e.normSq[i])
		if i >= n {
			if !e.cfg.PerLayer {
				f[i] = 0
			}
			continue
		}
		if math.IsNaN(norm) || math.IsInf(norm, 0) {
			e.nonFinite++
		}
		if !e.cfg.PerLayer {
			f[i] = float32(e.cfg.Clipping.Factor(norm))
			if f[i] < 1 {
				e.clipped++
			}
		}
	}
	switch e.cfg.Mode {
	case Ghost, Mixed:
		// The second backward pass on Σ_i C_i L_i gives Σ_i C_i g_i for
		// every parameter (the paper's Algorithm 1, last line).
		if err := e.plan.Backward(f, nil); err != nil {
			return err
		}
		for _, p := range e.params {
			if p.fresh {
				copy(p.accum, e.plan.Grad(p.name))
				p.fresh = false
				continue
			}
			addTo(p.accum, e.plan.Grad(p.name))
		}
		return nil
	}
	for k, p := range e.params {
		fk := f
		if e.cfg.PerLayer {
			fk = e.factors[k]
		}
		if p.ps != nil {
			p.settle()
			size := len(p.data)
			for i := 0; i < n; i++ {
				if fk[i] != 0 {
					kernels.Axpy(fk[i], p.ps[i*size:(i+1)*size], p.accum)
				}
			}
			continue
		}
		for _, ls := range p.linear {
			if err := ls.weightedSum(fk, B, p.accum, p.fresh, &e.bkScratch, e.plan.Scratch()); err != nil {
				return fmt.Errorf("dpengine: %s: %w", p.name, err)
			}
			p.fresh = false
		}
		p.settle() // no linear use: nothing was written
	}
	return nil
}

// hook receives the runtime's backward events.
func (e *Engine) hook(ev *runtime.HookEvent) {
	if e.hookErr != nil || len(ev.Node.Outputs) == 0 || ev.Node.Outputs[0] == nil {
		return
	}
	for _, g := range e.groups[ev.Node.Outputs[0].Name] {
		var err error
		if g.uses[0].linear != nil {
			err = e.linearUse(ev, g.uses[0])
		} else {
			err = e.elementwiseGroup(ev, g)
		}
		if err != nil {
			e.hookErr = fmt.Errorf("dpengine: node %s: %w", ev.Node, err)
			return
		}
	}
}

// gatherSample copies sample i's elements of v (N samples) into dst and
// returns it; the samples' shape is v.Shape with the batch axis set to 1.
func gatherSample(v *runtime.View, N, i int, dst []float32) []float32 {
	stride := v.BatchStride
	blocks := len(v.Data) / stride
	dst = dst[:0]
	for b := i; b < blocks; b += N {
		dst = append(dst, v.Data[b*stride:(b+1)*stride]...)
	}
	return dst
}

// scatterSample writes src (sample i's elements) into the zeroed full
// tensor dst with v's layout.
func scatterSample(stride, N, i int, src, dst []float32) {
	blocks := len(dst) / stride
	k := 0
	for b := i; b < blocks; b += N {
		copy(dst[b*stride:(b+1)*stride], src[k:k+stride])
		k += stride
	}
}

func sampleShape(v *runtime.View) []int {
	s := append([]int(nil), v.Shape...)
	if v.BatchAxis >= 0 {
		s[v.BatchAxis] = 1
	}
	return s
}

// linearUse handles the weight of a Conv, Gemm or MatMul.
func (e *Engine) linearUse(ev *runtime.HookEvent, us *useState) error {
	ls, p := us.linear, us.p
	B := e.cfg.PhysicalBatch
	dout := &ev.DOut
	if dout.BatchAxis < 0 {
		return fmt.Errorf("output gradient has no batch axis")
	}
	switch ev.Node.OpType {
	case "Conv":
		return e.convUse(ev, us)
	case "Gemm", "MatMul":
	default:
		return fmt.Errorf("no per-sample rule for %s weights", ev.Node.OpType)
	}
	data := &ev.Inputs[us.use.Data]
	if data.BatchAxis < 0 {
		return fmt.Errorf("input %q has no batch axis", data.Name)
	}
	ls.alpha = 1
	ls.weightLayoutPD = false
	if ev.Node.OpType == "Gemm" {
		if a, err := ev.Node.Float("alpha"); err == nil {
			ls.alpha = a
		}
		if ta, _ := ev.Node.Int("transA"); ta != 0 {
			return fmt.Errorf("Gemm with transA=1 is not supported for per-sample gradients")
		}
		if tb, _ := ev.Node.Int("transB"); tb != 0 {
			ls.weightLayoutPD = true
		}
	}
	if us.use.Operand != 1 {
		return fmt.Errorf("%s parameter as operand %d is not supported", ev.Node.OpType, us.use.Operand)
	}
	D, P := int(ls.layer.D), int(ls.layer.P)
	T := len(data.Data) / B / D
	if T*B*D != len(data.Data) || T*B*P != len(dout.Data) {
		return fmt.Errorf("unexpected shapes %v and %v for D=%d p=%d", data.Shape, dout.Shape, D, P)
	}
	ls.T = T
	if e.cfg.Mode == BK && p.ps == nil {
		ls.x, ls.xStride = data.Data, data.BatchStride
		ls.dy, ls.dyStride = dout.Data, dout.BatchStride
	}
	size := len(p.data)
	need := T*D + T*P + 2*T*T
	if ls.decision == rewrite.Instantiate {
		need = T*D + T*P + size
	}
	bufs := workerBufs(&e.normScratch, kernels.Workers(), need)
	forSamples(e.n, func(w, i int) {
		buf := bufs[w]
		a := gatherSample(data, B, i, buf[:0:T*D])
		g := gatherSample(dout, B, i, buf[T*D:T*D:T*D+T*P])
		rest := buf[T*D+T*P:]
		if ls.decision == rewrite.Ghost {
			p.normSq[i] += float64(ls.alpha*ls.alpha) * GhostNormSq(a, T, D, g, P, rest)
			return
		}
		inst := rest[:size]
		if ls.weightLayoutPD {
			blas.SgemmSerial(true, false, P, D, T, ls.alpha, g, P, a, D, 0, inst, D)
		} else {
			blas.SgemmSerial(true, false, D, P, T, ls.alpha, a, D, g, P, 0, inst, P)
		}
		if p.ps != nil {
			addTo(p.ps[i*size:(i+1)*size], inst)
		} else {
			p.normSq[i] += sumSq(inst)
		}
	})
	return nil
}

// convUse handles a Conv weight: a_i is the unfolded input of sample i and
// group g (T×D), and the output gradient of the group is already laid out
// p×T, i.e. g_iᵀ.
func (e *Engine) convUse(ev *runtime.HookEvent, us *useState) error {
	ls, p := us.linear, us.p
	s := ev.Conv
	if s == nil {
		return fmt.Errorf("no convolution geometry")
	}
	x, dy := &ev.Inputs[0], &ev.DOut
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
	size := len(p.data)
	if s.IsDepthwise() {
		// A depthwise group is one input channel and its M/C output
		// channels of K taps: the per-sample gradient (M·K values) comes
		// directly from the input planes and the output gradient,
		// without unfolding or a GEMM per group, whatever the layer's
		// ghost/instantiate decision (both give this norm).
		if size != s.M*s.K {
			return fmt.Errorf("depthwise weight of %d values, want %d", size, s.M*s.K)
		}
		scratch := kernels.DepthwiseScratchSize(s)
		bufs := workerBufs(&e.normScratch, kernels.Workers(), scratch+size)
		forSamples(e.n, func(w, i int) {
			buf := bufs[w]
			inst := buf[scratch : scratch+size]
			kernels.DepthwisePerSampleGrad(s, x.Data[i*inLen:(i+1)*inLen], dy.Data[i*outLen:(i+1)*outLen], inst, buf[:scratch])
			if p.ps != nil {
				addTo(p.ps[i*size:(i+1)*size], inst)
			} else {
				p.normSq[i] += sumSq(inst)
			}
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
	bufs := workerBufs(&e.normScratch, kernels.Workers(), need)
	forSamples(e.n, func(w, i int) {
		buf := bufs[w]
		pl, col, rest := buf[:plane], buf[plane:plane+T*D], buf[plane+T*D:]
		xi := x.Data[i*inLen : (i+1)*inLen]
		for gr := 0; gr < groups; gr++ {
			kernels.Im2ColPlane(s, xi, gr, col, pl)
			gT := dy.Data[i*outLen+gr*P*T : i*outLen+(gr+1)*P*T]
			if ls.decision == rewrite.Ghost {
				aa, gg := rest[:T*T], rest[T*T:2*T*T]
				blas.SgemmSerial(true, false, T, T, D, 1, col, T, col, T, 0, aa, T)
				blas.SgemmSerial(true, false, T, T, P, 1, gT, T, gT, T, 0, gg, T)
				var dot float64
				for k, v := range aa {
					dot += float64(v) * float64(gg[k])
				}
				p.normSq[i] += dot
				continue
			}
			inst := rest[:P*D]
			blas.SgemmSerial(false, true, P, D, T, 1, gT, T, col, T, 0, inst, D)
			if p.ps != nil {
				addTo(p.ps[i*size+gr*P*D:i*size+(gr+1)*P*D], inst)
			} else {
				p.normSq[i] += sumSq(inst)
			}
		}
	})
	return nil
}

// weightedSum adds Σ_i c_i g_i of a linear use to accum (or, if
// overwrite, writes it there) from the kept input and output gradient
// (book-keeping), scaling the kept output
// gradient in place (nothing reads it after this). scratch is shared by
// all layers (they run one after the other) and ws is the plan's idle
// kernel workspace: a buffer per layer would add a whole model's worth of
// weight-gradient copies and convolution workspaces to book-keeping's
// memory (111 MB on ResNet-18 at batch 32, half of the non-private step's).
func (ls *linearState) weightedSum(c []float32, B int, accum []float32, overwrite bool, scratch *[]float32, ws []float32) error {
	if len(ls.x) == 0 {
		return fmt.Errorf("no kept activations")
	}
	if ls.conv != nil {
		s := ls.conv
		outLen := len(ls.dy) / B
		for i := 0; i < B; i++ {
			scale(ls.dy[i*outLen:(i+1)*outLen], c[i])
		}
		need := kernels.ConvWorkspaceSize(s)
		dwLen := len(accum)
		if overwrite {
			dwLen = 0
		}
		extra := 0
		if len(ws) < need {
			extra = need
		}
		*scratch = grow(*scratch, dwLen+extra)
		dw := (*scratch)[:dwLen]
		if extra > 0 {
			ws = (*scratch)[dwLen:]
		}
		if overwrite {
			dw = accum
		}
		kernels.ConvBackward(s, ls.x, nil, ls.dy, nil, dw, nil, ws)
		if !overwrite {
			addTo(accum, dw)
		}
		return nil
	}
	D, P := int(ls.layer.D), int(ls.layer.P)
	rows := len(ls.dy) / P
	// Σ_i c_i g_iᵀa_i = Σ_rows (c_{sample(row)} g_row)ᵀ a_row: scale each
	// output-gradient row by its sample's factor and take one GEMM over
	// all rows, whatever the layout of the batch in them.
	scaled := ls.dy
	for r := 0; r < rows; r++ {
		ci := c[(r*P/ls.dyStride)%B] * ls.alpha
		scale(scaled[r*P:(r+1)*P], ci)
	}
	beta := float32(1)
	if overwrite {
		beta = 0
	}
	if ls.weightLayoutPD {
		blas.Sgemm(true, false, P, D, rows, 1, scaled, P, ls.x, D, beta, accum, D)
	} else {
		blas.Sgemm(true, false, D, P, rows, 1, ls.x, D, scaled, P, beta, accum, P)
	}
	return nil
}

// convBias handles the commonest elementwise parameter, a convolution's
// bias read by nothing else: sample i's gradient is its output gradient
// summed over positions, read in place and split over the cores. The
// general path (a gathered copy and one sequential sum per channel, on one
// core) cost 34 ms of a 730 ms book-keeping step of VGG-19 at batch 16.
// It reports false, doing nothing, for any other case.
func (e *Engine) convBias(ev *runtime.HookEvent, g *useGroup) bool {
	if ev.Node.OpType != "Conv" || len(g.uses) != 1 || g.sub != nil || g.uses[0].use.Operand != 2 {
		return false
	}
	p, dy := g.uses[0].p, &ev.DOut
	M := len(p.data)
	B := e.cfg.PhysicalBatch
	if dy.BatchAxis != 0 || dy.BatchStride*B != len(dy.Data) || M == 0 || dy.BatchStride%M != 0 {
		return false
	}
	stride := dy.BatchStride
	T := stride / M
	forSamples(e.n, func(_, i int) {
		row := dy.Data[i*stride : (i+1)*stride]
		var sq float64
		for m := 0; m < M; m++ {
			s := sum4(row[m*T : (m+1)*T])
			if p.ps != nil {
				p.ps[i*M+m] += s
			} else {
				sq += float64(s) * float64(s)
			}
		}
		if p.ps == nil {
			p.normSq[i] += sq
		}
	})
	return true
}

// sum4 sums x with four running sums, so that the additions do not wait
// on one another.
func sum4(x []float32) float32 {
	var a, b, c, d float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a += x[i]
		b += x[i+1]
		c += x[i+2]
		d += x[i+3]
	}
	for ; i < len(x); i++ {
		a += x[i]
	}
	return (a + b) + (c + d)
}

// elementwiseGroup computes the per-sample gradients of the parameters
// behind one elementwise operand.
func (e *Engine) elementwiseGroup(ev *runtime.HookEvent, g *useGroup) error {
	B := e.cfg.PhysicalBatch
	u := g.uses[0].use
	if e.convBias(ev, g) {
		return nil
	}
	opView := &ev.Inputs[u.Operand]
	opShape := opView.Shape
	opLen := len(opView.Data)
	if opView.Data == nil {
		opLen = 1
		for _, d := range opShape {
			opLen *= d
		}
	}
	batched := opView.BatchAxis >= 0
	perSample := opLen
	if batched {
		perSample = opLen / B
	}
	workers := 1
	if g.sub == nil && len(ev.DOut.Data)/B < serialOpBelow {
		// Samples are independent and each owns its norm and
		// per-sample gradient slots: split them over the cores. Only
		// for small samples (the LayerNorm affines and biases of a
		// ViT): the kernels split a large sample's work themselves, and
		// splitting samples on top of that made MobileNetV2's GroupNorm
		// affines slower.
		workers = max(1, min(kernels.Workers(), e.n))
	}
	if len(e.opScratch) < workers {
		e.opScratch = append(e.opScratch, make([]opScratch, workers-len(e.opScratch))...)
		e.opErrs = make([]error, len(e.opScratch))
	}
	for w := range e.opScratch[:workers] {
		e.opScratch[w].buf = grow(e.opScratch[w].buf, perSample)
	}
	if g.sub == nil {
		us := g.uses[0]
		size := len(us.p.data)
		errs := e.opErrs
		clear(errs)
		forSamplesOn(workers, e.n, func(w, i int) {
			sc := &e.opScratch[w]
			if errs[w] != nil {
				return
			}
			if err := e.operandGrad(ev, u, i, sc.buf, sc); err != nil {
				errs[w] = err
				return
			}
			if us.p.ps != nil {
				addTo(us.p.ps[i*size:(i+1)*size], sc.buf)
			} else {
				us.p.normSq[i] += sumSq(sc.buf)
			}
		})
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	sc := &e.opScratch[0]
	buf := sc.buf
	for i := 0; i < e.n; i++ {
		if err := e.operandGrad(ev, u, i, buf, sc); err != nil {
			return err
		}
		dy := buf
		if batched {
			if g.subBase == nil {
				g.subBase = make([]float32, opLen)
			}
			clear(g.subBase)
			scatterSample(opView.BatchStride, B, i, buf, g.subBase)
			dy = g.subBase
		}
		if err := g.sub.BackwardFrom(dy, nil); err != nil {
			return err
		}
		for _, us := range g.uses {
			grad := g.sub.Grad(us.p.name)
			addTo(us.p.ps[i*len(us.p.data):(i+1)*len(us.p.data)], grad)
		}
	}
	return nil
}

// operandGrad writes sample i's gradient with respect to the operand (its
// own shape, batch axis at 1 for batched operands) to out.
func (e *Engine) operandGrad(ev *runtime.HookEvent, u *rewrite.Use, i int, out []float32, sc *opScratch) error {
	B := e.cfg.PhysicalBatch
	dout := &ev.DOut
	if dout.BatchAxis < 0 {
		return fmt.Errorf("output gradient has no batch axis")
	}
	sc.gi = gatherSample(dout, B, i, sc.gi)
	gi := sc.gi
	gShape := sampleShape(dout)
	opView := &ev.Inputs[u.Operand]
	opShape := sampleShape(opView)
	k := u.Operand
	switch ev.Node.OpType {
	case "Add", "Sub", "Mul", "Div":
		d := gi
		other := &ev.Inputs[1-k]
		if ev.Node.OpType == "Sub" && k == 1 {
			scale(d, -1)
		}
		if ev.Node.OpType == "Mul" || ev.Node.OpType == "Div" {
			ov, oShape := other.Data, other.Shape
			if other.BatchAxis >= 0 {
				sc.other = gatherSample(other, B, i, sc.other)
				ov, oShape = sc.other, sampleShape(other)
			}
			sc.d = grow(sc.d, len(gi))
			d = sc.d
			switch {
			case ev.Node.OpType == "Mul":
				kernels.Binary(kernels.Mul, gi, gShape, ov, oShape, d, gShape)
			case k == 0: // d(a/b)/da = 1/b
				kernels.Binary(kernels.Div, gi, gShape, ov, oShape, d, gShape)
			default: // d(a/b)/db = -a/b² = -(a/b)/b
				self := opView.Data
				sShape := opView.Shape
				if opView.BatchAxis >= 0 {
					sc.self = gatherSample(opView, B, i, sc.self)
					self, sShape = sc.self, opShape
				}
				sc.q = grow(sc.q, len(gi))
				q := sc.q
				kernels.Binary(kernels.Div, ov, oShape, self, sShape, q, gShape)
				kernels.Binary(kernels.Div, q, gShape, self, sShape, q, gShape)
				kernels.Binary(kernels.Mul, gi, gShape, q, gShape, d, gShape)
				scale(d, -1)
			}
		}
		kernels.ReduceToShape(d, gShape, out, opShape)
	case "Conv":
		if k != 2 {
			return fmt.Errorf("Conv operand %d is not a bias", k)
		}
		M := opShape[0]
		T := len(gi) / M
		for m := 0; m < M; m++ {
			out[m] = sum4(gi[m*T : (m+1)*T]) // as convBias sums
		}
	case "Gemm":
		if k != 2 {
			return fmt.Errorf("Gemm operand %d is not the bias C", k)
		}
		if beta, err := ev.Node.Float("beta"); err == nil && beta != 1 {
			scale(gi, beta)
		}
		p := gShape[len(gShape)-1]
		kernels.ReduceToShape(gi, []int{len(gi) / p, p}, out, opShape)
	case "Concat":
		axis, err := ev.Node.Int("axis")
		if err != nil {
			return err
		}
		ax := int(axis)
		if ax < 0 {
			ax += len(gShape)
		}
		off := 0
		for j := 0; j < k; j++ {
			off += ev.Inputs[j].Shape[ax]
		}
		sliceAxis(gi, gShape, ax, off, opShape[ax], out)
	default:
		return fmt.Errorf("no per-sample rule for a parameter operand of %s", ev.Node.OpType)
	}
	return nil
}

// grow returns b resized to n elements, reallocating only when too small.
func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// sliceAxis copies x[..., off:off+n, ...] (along axis) to out.
func sliceAxis(x []float32, shape []int, axis, off, n int, out []float32) {
	outer, inner := 1, 1
	for _, d := range shape[:axis] {
		outer *= d
	}
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	dim := shape[axis]
	k := 0
	for o := 0; o < outer; o++ {
		src := x[(o*dim+off)*inner : (o*dim+off+n)*inner]
		k += copy(out[k:], src)
	}
}
