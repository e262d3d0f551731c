package runtime

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/runtime/blas"
	"github.com/dpfinetune/dpfinetune/runtime/kernels"
	"google.golang.org/protobuf/proto"
)

func compileFixture(t testing.TB, name string, opts *Options) (*Plan, []float32, []int64) {
	t.Helper()
	g, gold := loadFixture(t, name)
	in := gold["input"]
	p, err := CompileForBatch(g, in.Shape[0], nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetInput(0, in.F32); err != nil {
		t.Fatal(err)
	}
	return p, in.F32, gold["labels"].I64
}

func step(t testing.TB, p *Plan, labels []int64, weights []float32, bo *BackwardOptions) []float32 {
	t.Helper()
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	losses := make([]float32, len(labels))
	if err := p.Loss(labels, losses); err != nil {
		t.Fatal(err)
	}
	if err := p.Backward(weights, bo); err != nil {
		t.Fatal(err)
	}
	return losses
}

// TestHooksGivePerSampleGradients checks the DP hooks on the cnn fixture:
// for each Gemm reading a weight (transB = 1, as PyTorch Linear exports)
// the per-sample gradient dY_iᵀ·a_i, and for each Conv dY_i·Im2Col(x_i)ᵀ,
// built from the hook's activation and output gradient, must equal the
// gradient of the plan run with one-hot per-sample weights, and sum to the
// batch gradient.
func TestHooksGivePerSampleGradients(t *testing.T) {
	p, _, labels := compileFixture(t, "cnn", nil)
	n := len(labels)
	type acc struct {
		perSample [][]float32
		name      string
	}
	got := map[string]*acc{}
	called := map[string]int{}
	hook := func(ev *HookEvent) {
		called[ev.Node.OpType]++
		if ev.Node.OpType == "Conv" {
			got[ev.Inputs[1].Name] = &acc{perSample: convPerSample(ev)}
			return
		}
		if ev.Node.OpType != "Gemm" {
			return
		}
		a, w, dy := ev.Inputs[0], ev.Inputs[1], ev.DOut
		if !ev.Params[1] {
			t.Errorf("Gemm %s: weight not marked as parameter", ev.Node.Name)
		}
		out, in := w.Shape[0], w.Shape[1]
		ac := &acc{name: w.Name}
		for i := 0; i < n; i++ {
			g := make([]float32, out*in)
			for o := 0; o < out; o++ {
				for k := 0; k < in; k++ {
					g[o*in+k] = dy.Data[i*out+o] * a.Data[i*in+k]
				}
			}
			ac.perSample = append(ac.perSample, g)
		}
		got[w.Name] = ac
	}
	step(t, p, labels, nil, &BackwardOptions{Hook: hook})
	if called["Gemm"] != 2 || called["Conv"] != 2 || len(p.HookedNodes()) != 4 || p.Batch() != n {
		t.Fatalf("hook calls %v, want 2 Gemm and 2 Conv; HookedNodes %d, Batch %d", called, len(p.HookedNodes()), p.Batch())
	}
	for name, ac := range got {
		sum := make([]float32, len(ac.perSample[0]))
		for _, g := range ac.perSample {
			for j, v := range g {
				sum[j] += v
			}
		}
		if e := relErr(sum, p.Grad(name)); e > 1e-5 {
			t.Errorf("%s: Σ per-sample gradients differs from the batch gradient by %.3g", name, e)
		}
	}
	for i := 0; i < n; i++ {
		w := make([]float32, n)
		w[i] = 1
		step(t, p, labels, w, nil)
		for name, ac := range got {
			if e := relErr(p.Grad(name), ac.perSample[i]); e > 1e-5 {
				t.Errorf("%s sample %d: one-hot weighted gradient differs from the hook's by %.3g", name, i, e)
			}
		}
	}
}

// convPerSample builds per-sample Conv weight gradients from a hook event
// with kernels.Im2Col: dW_{i,g} = dY_{i,g}·colᵀ.
func convPerSample(ev *HookEvent) [][]float32 {
	s := ev.Conv
	x, dy := ev.Inputs[0].Data, ev.DOut.Data
	xs, ys := s.C*s.InSize, s.M*s.T
	mg := s.M / s.Group
	col := make([]float32, s.ColSize())
	var out [][]float32
	for i := 0; i < s.N; i++ {
		dw := make([]float32, s.WeightSize())
		for g := 0; g < s.Group; g++ {
			kernels.Im2Col(s, x[i*xs:(i+1)*xs], g, col)
			for m := 0; m < mg; m++ {
				row := dy[i*ys+(g*mg+m)*s.T:]
				for d := 0; d < s.D; d++ {
					var acc float32
					for t := 0; t < s.T; t++ {
						acc += row[t] * col[d*s.T+t]
					}
					dw[(g*mg+m)*s.D+d] = acc
				}
			}
		}
		out = append(out, dw)
	}
	return out
}

func TestSkipParamGradsAndKeepActivations(t *testing.T) {
	p, _, labels := compileFixture(t, "resnet_eval", &Options{KeepActivations: true})
	step(t, p, labels, nil, nil)
	want := map[string][]float32{}
	for _, name := range p.Params() {
		want[name] = append([]float32(nil), p.Grad(name)...)
		g := p.Grad(name)
		for i := range g {
			g[i] = 42
		}
	}
	// Second backward after one forward: skip parameter gradients, then
	// compute them again.
	hooks := 0
	if err := p.Backward(nil, &BackwardOptions{SkipParamGrads: true, Hook: func(*HookEvent) { hooks++ }}); err != nil {
		t.Fatal(err)
	}
	if hooks == 0 {
		t.Error("no hook calls")
	}
	for _, name := range p.Params() {
		for _, v := range p.Grad(name) {
			if v != 42 {
				t.Fatalf("%s: SkipParamGrads changed the gradient", name)
			}
		}
	}
	if err := p.Backward(nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range p.Params() {
		if e := relErr(p.Grad(name), want[name]); e != 0 {
			t.Errorf("%s: repeated backward differs by %.3g", name, e)
		}
	}

	q, _, labels := compileFixture(t, "cnn", nil)
	step(t, q, labels, nil, nil)
	if err := q.Backward(nil, nil); err == nil || !strings.Contains(err.Error(), "KeepActivations") {
		t.Errorf("second Backward without KeepActivations: error %v", err)
	}
}

// TestNoParamGrads: a plan compiled without parameter gradients has none
// (Grad is nil, no buffers), yet its hooks see the same activations and
// output gradients as a plan run with SkipParamGrads, on fixtures with
// convolutions, shared weights and attention.
func TestNoParamGrads(t *testing.T) {
	for _, fx := range []string{"cnn", "resnet_train", "vit"} {
		t.Run(fx, func(t *testing.T) {
			ref, _, labels := compileFixture(t, fx, nil)
			p, _, _ := compileFixture(t, fx, &Options{NoParamGrads: true})
			want, got := map[string][]float32{}, map[string][]float32{}
			step(t, ref, labels, nil, &BackwardOptions{SkipParamGrads: true, Hook: recordHookValues(want)})
			// No SkipParamGrads: the plan itself must skip them.
			step(t, p, labels, nil, &BackwardOptions{Hook: recordHookValues(got)})
			if len(want) == 0 || len(got) != len(want) {
				t.Fatalf("hooked values: %d with NoParamGrads, %d without", len(got), len(want))
			}
			for k, w := range want {
				if e := relErr(got[k], w); e != 0 {
					t.Errorf("%s differs by %.3g", k, e)
				}
			}
			for _, name := range p.Params() {
				if g := p.Grad(name); g != nil {
					t.Errorf("%s: Grad is not nil (%d elements)", name, len(g))
				}
			}
		})
	}
}

func TestTrainableSubset(t *testing.T) {
	all, _, labels := compileFixture(t, "cnn", nil)
	step(t, all, labels, nil, nil)
	names := all.Params()
	last := names[len(names)-1]
	p, _, _ := compileFixture(t, "cnn", &Options{Trainable: []string{last}})
	if got := p.Params(); len(got) != 1 || got[0] != last {
		t.Fatalf("Params %v, want [%s]", got, last)
	}
	step(t, p, labels, nil, nil)
	if e := relErr(p.Grad(last), all.Grad(last)); e != 0 {
		t.Errorf("%s: gradient differs by %.3g when it is the only trainable parameter", last, e)
	}
	if p.Grad(names[0]) != nil {
		t.Errorf("%s has a gradient but is frozen", names[0])
	}
	if _, err := CompileForBatch(p.Graph(), 2, nil, &Options{Trainable: []string{"nope"}}); err == nil {
		t.Error("unknown trainable name accepted")
	}
}

func TestForwardOnlyMatchesTraining(t *testing.T) {
	p, _, _ := compileFixture(t, "vit", &Options{ForwardOnly: true})
	q, _, _ := compileFixture(t, "vit", nil)
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	if err := q.Forward(); err != nil {
		t.Fatal(err)
	}
	a, _ := p.Output(0)
	b, _ := q.Output(0)
	if e := relErr(a, b); e != 0 {
		t.Errorf("forward-only logits differ by %.3g", e)
	}
	if p.ArenaBytes() >= q.ArenaBytes() {
		t.Errorf("forward-only arena %d ≥ training arena %d", p.ArenaBytes(), q.ArenaBytes())
	}
	if err := p.Backward(nil, nil); err == nil {
		t.Error("Backward on a forward-only plan succeeded")
	}
}

// TestSteadyStateAllocations runs training steps of the cnn and vit
// fixtures at batch 8 and 32 and checks that a step allocates no buffers:
// the allocation count and bytes per step do not grow with the batch, and
// stay at a few small allocations per node (shape iterators and goroutine
// closures of runtime/kernels); the plan's own code and the GEMM calls
// themselves allocate nothing per step. The bound is checked with the
// pure-Go SGEMM backend; with OpenBLAS, GEMMs large enough are split into
// bands run by more goroutines at a larger batch, whose closures make the
// count grow with the batch, so there it is only logged.
func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, backend := range blas.Available() {
		t.Run(backend, func(t *testing.T) {
			prev, err := blas.SetBackend(backend)
			if err != nil {
				t.Fatal(err)
			}
			defer blas.SetBackend(prev)
			testAllocations(t, backend == blas.Go)
		})
	}
}

func testAllocations(t *testing.T, check bool) {
	for _, name := range []string{"cnn", "vit"} {
		t.Run(name, func(t *testing.T) {
			g, gold := loadFixture(t, name)
			labels := gold["labels"].I64
			var allocs [2]float64
			var bytes [2]uint64
			for bi, batch := range []int{8, 32} {
				p, err := CompileForBatch(g, batch, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				lab := make([]int64, batch)
				for i := range lab {
					lab[i] = labels[i%len(labels)]
				}
				losses := make([]float32, batch)
				run := func() {
					if err := p.Forward(); err != nil {
						t.Fatal(err)
					}
					if err := p.Loss(lab, losses); err != nil {
						t.Fatal(err)
					}
					if err := p.Backward(nil, nil); err != nil {
						t.Fatal(err)
					}
				}
				run()
				allocs[bi] = testing.AllocsPerRun(5, run)
				var ms0, ms1 runtimeMemStats
				readMemStats(&ms0)
				for i := 0; i < 5; i++ {
					run()
				}
				readMemStats(&ms1)
				bytes[bi] = (ms1.TotalAlloc - ms0.TotalAlloc) / 5
				t.Logf("batch %d: %.0f allocations, %d bytes per step (%d nodes, arena %d KiB)", batch, allocs[bi], bytes[bi], len(p.nodes), p.ArenaBytes()>>10)
				if check && allocs[bi] > float64(32*len(p.nodes)) {
					t.Errorf("batch %d: %.0f allocations per step for %d nodes", batch, allocs[bi], len(p.nodes))
				}
			}
			if check && (allocs[1] > allocs[0]*1.1+16 || float64(bytes[1]) > float64(bytes[0])*1.1+4096) {
				t.Errorf("per-step allocations grow with the batch: %v allocations, %v bytes", allocs, bytes)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	b := newBuilder(1, 14)
	b.param("a", 2, 3)
	b.node("Hardmax", []string{"a"}, "y")
	g := b.graph(t, "y")
	_, err := Compile(g, nil)
	if err == nil || !strings.Contains(err.Error(), "Hardmax") || !strings.Contains(err.Error(), `"y"`) {
		t.Errorf("unsupported op: error %v, want one naming the node and op", err)
	}

	// Dynamic shapes are refused.
	dyn, _ := loadFixture(t, "cnn")
	if _, err := Compile(dyn, nil); err == nil || !strings.Contains(err.Error(), "static shapes") {
		t.Errorf("dynamic batch: error %v", err)
	}

	// Wrong input length and bad labels are reported.
	p, _, labels := compileFixture(t, "cnn", nil)
	if err := p.SetInput(0, make([]float32, 3)); err == nil || !strings.Contains(err.Error(), "got 3 elements") {
		t.Errorf("SetInput: %v", err)
	}
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	bad := append([]int64(nil), labels...)
	bad[0] = 10
	if err := p.Loss(bad, make([]float32, len(bad))); err == nil || !strings.Contains(err.Error(), "outside [0, 10)") {
		t.Errorf("Loss with label 10: %v", err)
	}
	if err := p.Backward(make([]float32, 2), nil); err == nil {
		t.Error("Backward with 2 weights for batch 8 succeeded")
	}
}

func TestCPUDevice(t *testing.T) {
	var d Device = CPU{}
	b, err := d.Alloc(10)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 10 {
		t.Fatalf("Len %d", b.Len())
	}
	if err := d.CopyIn(b, 8, []float32{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyIn(b, 9, []float32{1, 2}); err == nil {
		t.Error("out-of-range CopyIn accepted")
	}
	out := make([]float32, 3)
	if err := d.CopyOut(out, b, 7); err != nil {
		t.Fatal(err)
	}
	if out[0] != 0 || out[1] != 1 || out[2] != 2 {
		t.Fatalf("CopyOut %v", out)
	}
	ran := false
	if err := d.Run(&CPUKernel{Name: "k", Fn: func() { ran = true }}); err != nil || !ran {
		t.Fatalf("Run: %v %v", err, ran)
	}
}

// TestHooksPerSampleLinear checks the hooks and batch strides on every
// fixture (resnet_train excepted: training-mode BatchNormalization mixes
// samples): every hooked node sees its output gradient and activations
// with a batch stride (except nodes of parameter-only subgraphs), and for every MatMul or Gemm with a 2-D weight the
// per-sample weight gradients Σ_{rows r of sample i} a_rᵀ g_r, with rows
// assigned to samples by BatchStride, sum to the batch gradient and, for
// sample 0, equal the gradient of the plan run with weights e_0. This
// covers ViT attention projections on (T, B, D) and (T·B, D) tensors.
func TestHooksPerSampleLinear(t *testing.T) {
	for _, name := range fixtures {
		if name == "resnet_train" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			p, _, labels := compileFixture(t, name, nil)
			n := len(labels)
			per := map[string][][]float32{}
			uses := map[string]int{}
			hook := func(ev *HookEvent) {
				paramOnly := true
				for j, in := range ev.Inputs {
					if in.Data != nil && !ev.Params[j] && !ev.Derived[j] && p.tensors[p.g.Values[in.Name]].prod >= 0 {
						paramOnly = false
					}
				}
				if ev.DOut.BatchStride <= 0 && !paramOnly {
					t.Errorf("%s %s: output gradient %v has no batch stride", ev.Node.OpType, ev.Node.Name, ev.DOut.Shape)
				}
				for j, in := range ev.Inputs {
					if in.Data != nil && !ev.Params[j] && !ev.Derived[j] && in.BatchStride <= 0 && len(in.Data) > 1 && p.tensors[p.g.Values[in.Name]].prod >= 0 {
						t.Errorf("%s %s: input %d %v has no batch stride", ev.Node.OpType, ev.Node.Name, j, in.Shape)
					}
				}
				op := ev.Node.OpType
				if (op != "MatMul" && op != "Gemm") || !ev.Params[1] || len(ev.Inputs[1].Shape) != 2 || ev.Params[0] {
					return
				}
				if op == "Gemm" && ev.Node.IntOr("transA", 0) != 0 {
					return
				}
				a, w, g := ev.Inputs[0], ev.Inputs[1], ev.DOut
				tB := op == "Gemm" && ev.Node.IntOr("transB", 0) != 0
				K, E := w.Shape[0], w.Shape[1]
				if tB {
					K, E = E, K
				}
				out := make([][]float32, n)
				for i := range out {
					out[i] = make([]float32, K*E)
				}
				for r := 0; r < len(a.Data)/K; r++ {
					i := (r * K / a.BatchStride) % n
					if gi := (r * E / g.BatchStride) % n; gi != i {
						t.Fatalf("%s: row %d is sample %d in the input, %d in the gradient", ev.Node.Name, r, i, gi)
					}
					ar, gr := a.Data[r*K:(r+1)*K], g.Data[r*E:(r+1)*E]
					for k, av := range ar {
						for e, gv := range gr {
							if tB {
								out[i][e*K+k] += av * gv
							} else {
								out[i][k*E+e] += av * gv
							}
						}
					}
				}
				per[w.Name] = out
				uses[w.Name]++
			}
			step(t, p, labels, nil, &BackwardOptions{Hook: hook})
			if len(per) == 0 {
				t.Fatal("no MatMul or Gemm weights")
			}
			for name, ps := range per {
				if uses[name] != 1 {
					delete(per, name)
					continue
				}
				sum := make([]float32, len(ps[0]))
				for _, g := range ps {
					for j, v := range g {
						sum[j] += v
					}
				}
				if e := relErr(sum, p.Grad(name)); e > 1e-5 {
					t.Errorf("%s: Σ per-sample differs from the batch gradient by %.3g", name, e)
				}
			}
			w := make([]float32, n)
			w[0] = 1
			step(t, p, labels, w, nil)
			for name, ps := range per {
				if e := relErr(p.Grad(name), ps[0]); e > 1e-4 {
					t.Errorf("%s: sample 0 differs from the e_0-weighted gradient by %.3g", name, e)
				}
			}
		})
	}
}

// sampleOfRow returns the sample of row r of a 3-D tensor (rows are the
// first two axes) whose batch axis is ax (0 or 1).
func sampleOfRow(r int, shape []int, ax int) int {
	if ax == 0 {
		return r / shape[1]
	}
	return r % shape[1]
}

// TestHooksTokenMatMul checks the hooks of a ViT: for MatMul nodes with a
// weight operand (B,T,D)×(D,E), the per-sample gradient Σ_t a_{i,t}ᵀ g_{i,t}
// and for Add nodes with a bias (E) the per-sample Σ_t g_{i,t} must sum to
// the batch gradient, and sample 0's must match the gradient of the plan
// run with weights e_0. The attention input projections of torchvision's
// ViT run on (T, B, D) tensors, so this also checks View.BatchAxis.
func TestHooksTokenMatMul(t *testing.T) {
	p, _, labels := compileFixture(t, "vit", nil)
	n := len(labels)
	per := map[string][][]float32{}
	tokenMajor := 0
	hook := func(ev *HookEvent) {
		switch {
		case ev.Node.OpType == "MatMul" && ev.Params[1] && len(ev.Inputs[0].Shape) == 3:
			a, w, g := ev.Inputs[0], ev.Inputs[1], ev.DOut
			if a.BatchAxis < 0 || a.BatchAxis != g.BatchAxis {
				t.Errorf("%s: batch axes %d and %d", ev.Node.Name, a.BatchAxis, g.BatchAxis)
				return
			}
			if a.BatchAxis == 1 {
				tokenMajor++
			}
			D, E := w.Shape[0], w.Shape[1]
			out := make([][]float32, n)
			for i := range out {
				out[i] = make([]float32, D*E)
			}
			for r := 0; r < a.Shape[0]*a.Shape[1]; r++ {
				i := sampleOfRow(r, a.Shape, a.BatchAxis)
				ar, gr := a.Data[r*D:], g.Data[r*E:]
				for d := 0; d < D; d++ {
					for e := 0; e < E; e++ {
						out[i][d*E+e] += ar[d] * gr[e]
					}
				}
			}
			per[w.Name] = append(per[w.Name], out...)
		case ev.Node.OpType == "Add" && ev.Params[1] && len(ev.Inputs[1].Shape) == 1 && len(ev.DOut.Shape) == 3:
			b, g := ev.Inputs[1], ev.DOut
			if g.BatchAxis < 0 {
				t.Errorf("%s: no batch axis", ev.Node.Name)
				return
			}
			E := b.Shape[0]
			out := make([][]float32, n)
			for i := range out {
				out[i] = make([]float32, E)
			}
			for r := 0; r < g.Shape[0]*g.Shape[1]; r++ {
				i := sampleOfRow(r, g.Shape, g.BatchAxis)
				for e := 0; e < E; e++ {
					out[i][e] += g.Data[r*E+e]
				}
			}
			per[b.Name] = append(per[b.Name], out...)
		}
	}
	step(t, p, labels, nil, &BackwardOptions{Hook: hook})
	if len(per) < 4 || tokenMajor == 0 {
		t.Fatalf("%d hooked MatMul/Add parameters, %d on (T, B, D) tensors", len(per), tokenMajor)
	}
	for name, ps := range per {
		sum := make([]float32, len(ps[0]))
		for _, g := range ps {
			for j, v := range g {
				sum[j] += v
			}
		}
		if e := relErr(sum, p.Grad(name)); e > 1e-5 {
			t.Errorf("%s: Σ per-sample differs from the batch gradient by %.3g", name, e)
		}
	}
	w := make([]float32, n)
	w[0] = 1
	step(t, p, labels, w, nil)
	for name, ps := range per {
		if e := relErr(p.Grad(name), ps[0]); e > 1e-4 {
			t.Errorf("%s: sample 0 differs from the e_0-weighted gradient by %.3g", name, e)
		}
	}
}

// TestSGDReducesLoss trains the cnn fixture on its golden batch with plain
// SGD, updating parameters in place through Param, and checks that the
// mean loss drops.
func TestSGDReducesLoss(t *testing.T) {
	p, _, labels := compileFixture(t, "cnn", nil)
	mean := func(l []float32) float64 {
		var s float64
		for _, v := range l {
			s += float64(v)
		}
		return s / float64(len(l))
	}
	first := mean(step(t, p, labels, nil, nil))
	last := first
	for it := 0; it < 30; it++ {
		for _, name := range p.Params() {
			w, _ := p.Param(name)
			g := p.Grad(name)
			for i := range w {
				w[i] -= 0.3 * g[i] / float32(len(labels))
			}
		}
		last = mean(step(t, p, labels, nil, nil))
	}
	if !(last < 0.5*first) {
		t.Errorf("mean loss %.4f → %.4f after 30 SGD steps", first, last)
	}
	t.Logf("mean loss %.4f → %.4f", first, last)
}

// TestInplaceUnaryGradients: elementwise backward passes write the input's
// gradient over the output's, so the backward of a chain of n unary ops
// needs one gradient buffer, not two: the peak is the n saved activations
// plus one gradient (n+2 without the aliasing). The gradients through the
// chain stay exact (finite differences), also where a value is read again
// later and its gradient must stay apart.
func TestInplaceUnaryGradients(t *testing.T) {
	live := func(n int) int64 {
		b := newBuilder(3, 14)
		b.param("w", 4, 64)
		prev := "w"
		for i := 0; i < n; i++ {
			op := []string{"Tanh", "Sigmoid", "Relu", "Exp"}[i%4]
			out := fmt.Sprintf("u%d", i)
			b.node(op, []string{prev}, out)
			prev = out
		}
		g := b.graph(t, prev)
		p, err := Compile(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		gradCheckPlan(t, p)
		return p.LiveBytes()
	}
	const buf = 4 * 4 * 64
	for _, n := range []int{2, 8} {
		if got, want := live(n), int64((n+1)*buf); got != want {
			t.Errorf("chain of %d unary ops: %d live bytes, want %d (%d activations and one gradient)", n, got, want, n)
		}
	}
	// A value read again later keeps its gradient apart: y = tanh(w)·w.
	b := newBuilder(4, 14)
	b.param("w", 3, 5)
	b.node("Tanh", []string{"w"}, "t")
	b.node("Sigmoid", []string{"t"}, "s")
	b.node("Mul", []string{"s", "t"}, "y")
	gradCheck(t, b.graph(t, "y"), nil)
}

// TestMaxPoolWithoutArgmax checks that a MaxPool stores no argmax where
// its backward can find the winners again — from its input and output
// where both stay alive until its backward (KeepHooked: the pool feeds a
// trained layer), by running the pool again into an arena buffer where
// its input alone does (the Relu before it keeps its output) and that
// buffer costs the arena less than the argmax — and that the gradients
// are the stored argmax's bit for bit. On vgg every pool runs again and
// the plan holds its argmax's bytes less; on cnn the second pool's
// backward comes where the arena peaks, and it keeps its argmax.
func TestMaxPoolWithoutArgmax(t *testing.T) {
	defer func() { maxPoolRedoOff = false }()
	for _, fx := range []struct {
		name    string
		allRedo bool
	}{{"cnn", false}, {"vgg", true}} {
		t.Run(fx.name, func(t *testing.T) {
			variants := []struct {
				what    string
				redoOff bool
				opts    *Options
			}{
				{"argmax stored", true, nil},
				{"pool run again", false, nil},
				{"from the output", false, &Options{KeepHooked: true}},
			}
			var grads [3]map[string][]float32
			var aux, held [3]int64
			pools, redone := 0, 0
			for i, v := range variants {
				maxPoolRedoOff = v.redoOff
				p, _, labels := compileFixture(t, fx.name, v.opts)
				step(t, p, labels, nil, nil)
				grads[i] = map[string][]float32{}
				for _, pn := range p.Params() {
					grads[i][pn] = append([]float32(nil), p.Grad(pn)...)
				}
				for _, nd := range p.nodes {
					if nd.g.OpType == "MaxPool" {
						aux[i] += nd.auxBytes
						if i == 0 {
							pools++
						}
						if i == 1 && nd.redoItem >= 0 {
							redone++
						}
					}
				}
				held[i] = p.BatchBytes()
			}
			if pools == 0 || aux[0] == 0 || redone == 0 {
				t.Fatalf("%d MaxPool nodes holding %d bytes of argmax, %d run again: the fixture does not exercise the test", pools, aux[0], redone)
			}
			if fx.allRedo && (aux[1] != 0 || held[1] != held[0]-aux[0]) {
				t.Errorf("pool run again: %d bytes of argmax and %d held, against %d and %d stored: want none and that much less", aux[1], held[1], aux[0], held[0])
			}
			if aux[1] >= aux[0] || held[1] > held[0] {
				t.Errorf("pool run again: %d bytes of argmax and %d held, against %d and %d stored: want less argmax, no more held", aux[1], held[1], aux[0], held[0])
			}
			if aux[2] != 0 {
				t.Errorf("from the output: %d bytes of argmax, want none", aux[2])
			}
			for i := 1; i < len(variants); i++ {
				for pn, want := range grads[0] {
					got := grads[i][pn]
					for j := range want {
						if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
							t.Fatalf("%s: %s[%d] = %v, argmax path %v", variants[i].what, pn, j, got[j], want[j])
						}
					}
				}
			}
		})
	}
}

// TestKeepActivationsSecondBackward: with KeepActivations only the values
// a backward reads outlive the forward, so a second Backward after one
// Forward must still give the first one's gradients, bit for bit, and both
// must be the plain plan's (the convolutional fixtures, whose Relu inputs
// and pooled maps are now freed early).
func TestKeepActivationsSecondBackward(t *testing.T) {
	for _, name := range []string{"cnn", "vgg", "resnet_eval", "mobilenet"} {
		t.Run(name, func(t *testing.T) {
			plain, _, labels := compileFixture(t, name, nil)
			step(t, plain, labels, nil, nil)
			kept, _, _ := compileFixture(t, name, &Options{KeepActivations: true})
			step(t, kept, labels, nil, nil)
			first := map[string][]float32{}
			for _, pn := range kept.Params() {
				first[pn] = append([]float32(nil), kept.Grad(pn)...)
			}
			if err := kept.Backward(nil, nil); err != nil {
				t.Fatal(err)
			}
			for _, pn := range kept.Params() {
				want := plain.Grad(pn)
				for j, v := range kept.Grad(pn) {
					if math.Float32bits(v) != math.Float32bits(first[pn][j]) || math.Float32bits(v) != math.Float32bits(want[j]) {
						t.Fatalf("%s[%d]: second backward %v, first %v, plain plan %v", pn, j, v, first[pn][j], want[j])
					}
				}
			}
		})
	}
}

// TestSavesOnlyWhatBackwardReads: a hooked Add or Sub no longer keeps its
// batched operand for the hook, nor Mul and Div an operand their backward
// does not read (a Div by a constant keeps neither its input nor its
// output), so the transformer fixtures' plans hold less at their peak,
// with gradients and per-sample hook data bit for bit those of the plan
// that kept everything.
func TestSavesOnlyWhatBackwardReads(t *testing.T) {
	defer func() { keepAllSaves = false }()
	for _, name := range []string{"vit", "beit", "crossvit", "packedqkv", "resnet_train", "cnn"} {
		t.Run(name, func(t *testing.T) {
			var live [2]int64
			var grads [2]map[string][]float32
			var hooks [2][]float32 // every hooked node's output gradient, in backward order
			for i, keep := range []bool{true, false} {
				keepAllSaves = keep
				p, _, labels := compileFixture(t, name, nil)
				keepAllSaves = false
				bo := hookRecorder(&hooks[i], func(ev *HookEvent, j int) bool { return ev.Params[j] || ev.Derived[j] })
				step(t, p, labels, nil, bo)
				live[i] = p.LiveBytes()
				grads[i] = map[string][]float32{}
				for _, pn := range p.Params() {
					grads[i][pn] = append([]float32(nil), p.Grad(pn)...)
				}
			}
			t.Logf("peak live bytes %d → %d (%.2f×)", live[0], live[1], float64(live[1])/float64(live[0]))
			if live[1] > live[0] {
				t.Errorf("live bytes %d, more than the %d of the plan that keeps everything", live[1], live[0])
			}
			if name == "vit" && live[1] >= live[0] {
				t.Errorf("vit: live bytes %d, not fewer than %d: its biases' Add and attention's Div by √d should keep less", live[1], live[0])
			}
			for pn, want := range grads[0] {
				if !sameBits(grads[1][pn], want) {
					t.Errorf("gradient of %s differs from the plan that keeps everything", pn)
				}
			}
			if len(hooks[0]) == 0 || !sameBits(hooks[0], hooks[1]) {
				t.Errorf("hook data: %d and %d values, or not the same bits", len(hooks[0]), len(hooks[1]))
			}
		})
	}
}

// hookRecorder returns BackwardOptions whose hook appends each hooked
// node's output gradient, then its inputs j for which keep is true, to
// *dst, in the backward's order.
func hookRecorder(dst *[]float32, keep func(ev *HookEvent, j int) bool) *BackwardOptions {
	return &BackwardOptions{Hook: func(ev *HookEvent) {
		*dst = append(*dst, ev.DOut.Data...)
		for j, in := range ev.Inputs {
			if keep(ev, j) {
				*dst = append(*dst, in.Data...)
			}
		}
	}}
}

// sameBits is internal/numcheck.SameBits, which imports this package.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestRecomputesProbabilities: attention's probabilities are recomputed
// in the backward instead of kept (rematerialize), for the same bits —
// gradients and every hook's data — and fewer live bytes, on the
// transformer fixtures; where they are kept (ProbabilitiesKeep, and by
// default on the CPU, which adopts host memory), where there is no
// attention (cnn), or where recomputing would not lower the peak
// (packedqkv), nothing is recomputed.
func TestRecomputesProbabilities(t *testing.T) {
	for _, c := range []struct {
		name string
		want bool // the fixture has an attention the plan recomputes
	}{{"vit", true}, {"vit17", true}, {"crossvit", true}, {"beit", false}, {"cnn", false},
		// Its peak lies where the probabilities are not live: recomputing
		// them would not lower it (320 192 → 312 000 bytes before the
		// residual Adds' gradients went in place, 307 904 → 312 000 after),
		// so the plan keeps them.
		{"packedqkv", false}} {
		t.Run(c.name, func(t *testing.T) {
			var live [2]int64
			var grads [2]map[string][]float32
			var hooks [2][]float32
			var remat [2]int
			for i, how := range []Probabilities{ProbabilitiesKeep, ProbabilitiesRecompute} {
				p, _, labels := compileFixture(t, c.name, &Options{Probabilities: how})
				for _, r := range p.remat {
					remat[i] += len(r)
				}
				// Every input the event defines (HookEvent: not an Add's or
				// Sub's batched operand, whose buffer may be another's).
				bo := hookRecorder(&hooks[i], func(ev *HookEvent, j int) bool {
					switch ev.Node.OpType {
					case "Add", "Sub":
						return ev.Params[j] || ev.Derived[j]
					}
					return true
				})
				// Two steps: the second's forward overwrites what the
				// first's backward recomputed.
				step(t, p, labels, nil, nil)
				hooks[i] = hooks[i][:0]
				step(t, p, labels, nil, bo)
				live[i] = p.LiveBytes()
				grads[i] = map[string][]float32{}
				for _, pn := range p.Params() {
					grads[i][pn] = append([]float32(nil), p.Grad(pn)...)
				}
			}
			t.Logf("%d nodes run again; peak live bytes %d → %d (%.2f×)", remat[1], live[0], live[1], float64(live[1])/float64(live[0]))
			if remat[0] != 0 {
				t.Errorf("ProbabilitiesKeep: %d nodes run again", remat[0])
			}
			if p, _, _ := compileFixture(t, c.name, nil); len(p.remat) != 0 {
				t.Errorf("by default on the CPU: %d nodes run again", len(p.remat))
			}
			if got := remat[1] > 0; got != c.want {
				t.Errorf("%d nodes run again, want some: %v", remat[1], c.want)
			}
			if c.want && live[1] >= live[0] {
				t.Errorf("live bytes %d, not fewer than the %d of the plan that keeps the probabilities", live[1], live[0])
			}
			if !c.want && live[1] != live[0] {
				t.Errorf("live bytes %d, want the %d of the plan that keeps the probabilities", live[1], live[0])
			}
			for pn, want := range grads[0] {
				if !sameBits(grads[1][pn], want) {
					t.Errorf("gradient of %s differs from the plan that keeps the probabilities", pn)
				}
			}
			if len(hooks[0]) == 0 || !sameBits(hooks[0], hooks[1]) {
				t.Errorf("hook data: %d and %d values, or not the same bits", len(hooks[0]), len(hooks[1]))
			}
		})
	}
}

// TestAddGradientInPlace: an Add's gradient for an operand of the output's
// size is the output gradient's buffer itself (inplaceGrad) wherever that
// dies at the Add — the residual connections and the normalizations'
// shifts — and the gradients stay the goldens' (TestGolden compares every
// fixture's).
func TestAddGradientInPlace(t *testing.T) {
	for _, name := range []string{"resnet_train", "vit"} {
		p, _, labels := compileFixture(t, name, nil)
		adds, inPlace := 0, 0
		for _, nd := range p.nodes {
			if nd.g.OpType != "Add" || !nd.needBwd {
				continue
			}
			adds++
			if a, y := nd.in[0], nd.out[0]; a.gradItem >= 0 && a.gradItem == y.gradItem {
				inPlace++
			}
		}
		step(t, p, labels, nil, nil)
		for _, nd := range p.nodes {
			if a, y := nd.in[0], nd.out[0]; nd.g.OpType == "Add" && nd.needBwd && a.gradItem >= 0 && a.gradItem == y.gradItem &&
				&a.grad[0] != &y.grad[0] {
				t.Errorf("%s: Add %s: the gradients share an item, not a buffer", name, nd.g.Name)
			}
		}
		t.Logf("%s: %d of %d Adds' first gradients in place", name, inPlace, adds)
		if inPlace == 0 {
			t.Errorf("%s: none of %d Adds takes its output gradient's buffer", name, adds)
		}
	}
}

// TestReshapeGradientInPlace: a reshape's input gradient is its output
// gradient's buffer wherever that dies at the reshape (the fixtures' every
// reshape with a gradient: ViT's head splits and merges, the CNNs'
// flatten), and where another consumer wrote the input's gradient first
// the output gradient is added into it with no scratch copy (gradIsDy).
// Both equal central differences (gradCheckPlan); TestGolden holds the
// fixtures' gradients to PyTorch's.
func TestReshapeGradientInPlace(t *testing.T) {
	for _, name := range []string{"cnn", "vit", "beit", "crossvit"} {
		p, _, labels := compileFixture(t, name, nil)
		copies := 0
		for _, nd := range p.nodes {
			if !nd.gradIsDy || !nd.needBwd || nd.in[0].gradItem < 0 {
				continue
			}
			copies++
			if x, y := nd.in[0], nd.out[0]; x.gradItem != y.gradItem {
				t.Errorf("%s: %s %s: its input gradient has a buffer of its own", name, nd.g.OpType, nd.g.Name)
			}
		}
		step(t, p, labels, nil, nil)
		for _, nd := range p.nodes {
			if x, y := nd.in[0], nd.out[0]; nd.gradIsDy && nd.needBwd && x.gradItem >= 0 && !SameMemory(x.grad, y.grad) {
				t.Errorf("%s: %s: the gradients share an item, not a buffer", name, nd.g.Name)
			}
		}
		if copies == 0 {
			t.Errorf("%s: no reshape with a gradient", name)
		}
	}

	// e feeds a Reshape (first in the graph) and a Mul (first in the
	// backward): the Reshape's dy is added into e's gradient; m's Flatten is
	// its only consumer: in place.
	b := newBuilder(3, 14)
	b.param("a", 2, 3, 4)
	b.node("Tanh", []string{"a"}, "e")
	b.ints("shp", []int64{2, 12}, 2)
	b.node("Reshape", []string{"e", "shp"}, "r")
	b.node("Mul", []string{"e", "e"}, "m")
	b.node("Flatten", []string{"m"}, "f", aInt("axis", 1))
	b.node("Mul", []string{"r", "f"}, "y")
	p, err := Compile(b.graph(t, "y"), nil)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, nd := range p.nodes {
		switch {
		case !nd.gradIsDy:
		case nd.acc[0] && nd.scratchItem[0] < 0:
			kinds[nd.g.OpType] = "added"
		case nd.acc[0]:
			kinds[nd.g.OpType] = "scratch"
		case nd.in[0].gradItem == nd.out[0].gradItem:
			kinds[nd.g.OpType] = "in place"
		}
	}
	if kinds["Reshape"] != "added" || kinds["Flatten"] != "in place" {
		t.Errorf("Reshape's gradient %q (want added), Flatten's %q (want in place)", kinds["Reshape"], kinds["Flatten"])
	}
	gradCheckPlan(t, p)
}

// TestKeepValues: a value named in Options.KeepValues (here the opset-17
// ViT's LayerNorms' outputs, which the backward does not read) is readable
// with Value after the forward and still holds the forward's output after
// the backward, the same as the graph's own output of it would be; and
// NormStats gives the LayerNormalization's statistics, as its optional
// Mean and InvStdDev outputs give them.
func TestKeepValues(t *testing.T) {
	g, gold := loadFixture(t, "vit17")
	var lns []*graph.Node
	for _, n := range g.Nodes {
		if n.OpType == "LayerNormalization" {
			lns = append(lns, n)
		}
	}
	if len(lns) < 2 {
		t.Fatalf("vit17 has %d LayerNormalizations", len(lns))
	}
	var names []string
	for _, n := range lns {
		names = append(names, n.Outputs[0].Name)
	}
	in := gold["input"]
	p, _, labels := compileFixture(t, "vit17", &Options{KeepValues: names})
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	fwd := map[string][]float32{}
	for _, name := range names {
		fwd[name] = append([]float32(nil), p.Value(name)...)
	}
	losses := make([]float32, len(labels))
	if err := p.Loss(labels, losses); err != nil {
		t.Fatal(err)
	}
	if err := p.Backward(nil, nil); err != nil {
		t.Fatal(err)
	}

	// The oracle: the same graph with every LayerNorm's output, mean and
	// 1/σ as graph outputs.
	g2, _ := loadFixture(t, "vit17")
	for _, n := range g2.Nodes {
		if n.OpType != "LayerNormalization" {
			continue
		}
		for len(n.Outputs) < 3 {
			v := &graph.Value{Name: fmt.Sprintf("%s/stat%d", n.Name, len(n.Outputs)), DType: graph.Float32, Producer: n}
			g2.Values[v.Name] = v
			n.Outputs = append(n.Outputs, v)
		}
		g2.Outputs = append(g2.Outputs, n.Outputs...)
	}
	q, err := CompileForBatch(g2, in.Shape[0], nil, &Options{ForwardOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SetInput(0, in.F32); err != nil {
		t.Fatal(err)
	}
	if err := q.Forward(); err != nil {
		t.Fatal(err)
	}
	for k, name := range names {
		want, _ := q.Output(1 + 3*k)
		wantMean, _ := q.Output(2 + 3*k)
		wantInv, _ := q.Output(3 + 3*k)
		if got := p.Value(name); !sameBits(got, want) || !sameBits(fwd[name], want) {
			t.Errorf("%s: kept value differs from the graph output after the forward or the backward", name)
		}
		mean, inv := p.NormStats(name)
		if !sameBits(mean, wantMean) || !sameBits(inv, wantInv) {
			t.Errorf("%s: NormStats differ from the Mean and InvStdDev outputs", name)
		}
	}
	if v := p.Value(lns[0].Inputs[0].Name); v != nil {
		t.Errorf("Value of a value not kept: %d floats, want nil", len(v))
	}
	if _, err := CompileForBatch(g, in.Shape[0], nil, &Options{KeepValues: []string{"no such value"}}); err == nil || !strings.Contains(err.Error(), "KeepValues") {
		t.Errorf("an unknown kept value: %v", err)
	}
}

// TestLayerNormStatsNoGradient: a LayerNormalization whose InvStdDev
// output feeds the loss through a path that needs its gradient is
// refused at compile time, naming the node and the output; the same
// output read where no gradient is wanted compiles and computes (the
// conformance cases hold its values).
func TestLayerNormStatsNoGradient(t *testing.T) {
	b := newBuilder(4, 17)
	b.param("a", 3, 8)
	b.floats("sc", []float32{1, 1, 1, 1, 1, 1, 1, 1}, 8)
	b.nodes = append(b.nodes, &onnxpb.NodeProto{Name: proto.String("ln"), OpType: proto.String("LayerNormalization"),
		Input: []string{"a", "sc"}, Output: []string{"yn", "mean", "inv"}})
	b.node("Mul", []string{"yn", "inv"}, "y")
	_, err := Compile(b.graph(t, "y"), nil)
	if err == nil || !strings.Contains(err.Error(), "needs a gradient") || !strings.Contains(err.Error(), "inv") {
		t.Errorf("InvStdDev on the gradient's path: %v, want a refusal naming it", err)
	}
	if _, err := Compile(b.graph(t, "y"), &Options{ForwardOnly: true}); err != nil {
		t.Errorf("forward only: %v", err)
	}
}

// TestSkipParamGradsDerived: with SkipParamGrads the nodes computing from
// parameters alone (BEiT's relative-position bias gathered from its
// table, ViT's class token expanded over the batch) run no backward and
// fire no hook, and every other hook sees the activations and output
// gradient of a full backward pass.
func TestSkipParamGradsDerived(t *testing.T) {
	for _, fx := range []string{"vit", "beit"} {
		t.Run(fx, func(t *testing.T) {
			p, _, labels := compileFixture(t, fx, &Options{KeepActivations: true})
			full, skip := map[string][]float32{}, map[string][]float32{}
			step(t, p, labels, nil, &BackwardOptions{Hook: recordHookValues(full)})
			if err := p.Backward(nil, &BackwardOptions{SkipParamGrads: true, Hook: recordHookValues(skip)}); err != nil {
				t.Fatal(err)
			}
			skipped := 0
			for _, nd := range p.nodes {
				if !nd.hooked {
					continue
				}
				_, fired := skip[nd.g.Name+"/dy"]
				if nd.paramOnly() {
					skipped++
					if fired {
						t.Errorf("%s computes from parameters alone: its hook fired", nd.g.Name)
					}
				} else if !fired {
					t.Errorf("%s: no hook", nd.g.Name)
				}
			}
			if skipped == 0 {
				t.Fatal("no hooked node computes from parameters alone")
			}
			for k, v := range skip {
				if e := relErr(v, full[k]); e != 0 {
					t.Errorf("%s differs by %.3g from a full backward", k, e)
				}
			}
		})
	}
}

// recordHookValues is a hook that copies each event's output gradient
// (key "node/dy") and inputs ("node/inJ") into into.
func recordHookValues(into map[string][]float32) HookFunc {
	return func(ev *HookEvent) {
		key := ev.Node.Name
		into[key+"/dy"] = append([]float32(nil), ev.DOut.Data...)
		for j, in := range ev.Inputs {
			into[fmt.Sprintf("%s/in%d", key, j)] = append([]float32(nil), in.Data...)
		}
	}
}
