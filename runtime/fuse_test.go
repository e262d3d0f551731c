package runtime

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

// fusedCounts counts the plan's fused nodes by operator.
func fusedCounts(p *Plan) map[string]int {
	c := map[string]int{}
	for _, nd := range p.nodes {
		if nd.fused > 0 {
			c[nd.g.OpType]++
		}
	}
	return c
}

// graphCounts counts the graph's nodes by operator.
func graphCounts(g *graph.Graph) map[string]int {
	c := map[string]int{}
	for _, n := range g.Nodes {
		c[n.OpType]++
	}
	return c
}

// Chain builders, in the forms torch 1.13 exports (constants are
// initializers: pass Options.Trainable without them, or they train).

// lnChain adds ReduceMean → Sub → Pow(2) → ReduceMean → Add(eps) → Sqrt →
// Div over the last axis of x.
func lnChain(b *modelBuilder, x, out string) {
	mean := func(in, o string) {
		if b.opset >= 18 {
			b.ints(o+"_axes", []int64{-1}, 1)
			b.node("ReduceMean", []string{in, o + "_axes"}, o)
		} else {
			b.node("ReduceMean", []string{in}, o, aInts("axes", -1))
		}
	}
	b.floats(out+"_two", []float32{2})
	b.floats(out+"_eps", []float32{1e-6})
	mean(x, out+"_m")
	b.node("Sub", []string{x, out + "_m"}, out+"_d")
	b.node("Pow", []string{out + "_d", out + "_two"}, out+"_p")
	mean(out+"_p", out+"_v")
	b.node("Add", []string{out + "_v", out + "_eps"}, out+"_a")
	b.node("Sqrt", []string{out + "_a"}, out+"_s")
	b.node("Div", []string{out + "_d", out + "_s"}, out)
}

// geluChain adds Div(√2) → Erf → Add(1) → Mul(x) → Mul(0.5).
func geluChain(b *modelBuilder, x, out string) {
	b.floats(out+"_r2", []float32{math.Sqrt2})
	b.floats(out+"_one", []float32{1})
	b.floats(out+"_half", []float32{0.5})
	b.node("Div", []string{x, out + "_r2"}, out+"_u")
	b.node("Erf", []string{out + "_u"}, out+"_e")
	b.node("Add", []string{out + "_e", out + "_one"}, out+"_o")
	b.node("Mul", []string{x, out + "_o"}, out+"_m")
	b.node("Mul", []string{out + "_m", out + "_half"}, out)
}

// geluHalfFirst adds the hand-written form x * 0.5 * (1 + erf(x * (1/√2))).
func geluHalfFirst(b *modelBuilder, x, out string) {
	b.floats(out+"_r2", []float32{1 / math.Sqrt2})
	b.floats(out+"_one", []float32{1})
	b.floats(out+"_half", []float32{0.5})
	b.node("Mul", []string{x, out + "_half"}, out+"_h")
	b.node("Mul", []string{out + "_r2", x}, out+"_u")
	b.node("Erf", []string{out + "_u"}, out+"_e")
	b.node("Add", []string{out + "_one", out + "_e"}, out+"_o")
	b.node("Mul", []string{out + "_h", out + "_o"}, out)
}

// geluDynamo adds the dynamo exporter's form (onnxscript's torchlib):
// Div(√2) → Erf → Add(1) → Mul(0.5, ·) → Mul(x, ·).
func geluDynamo(b *modelBuilder, x, out string) {
	b.floats(out+"_r2", []float32{math.Sqrt2})
	b.floats(out+"_one", []float32{1})
	b.floats(out+"_half", []float32{0.5})
	b.node("Div", []string{x, out + "_r2"}, out+"_u")
	b.node("Erf", []string{out + "_u"}, out+"_e")
	b.node("Add", []string{out + "_e", out + "_one"}, out+"_o")
	b.node("Mul", []string{out + "_half", out + "_o"}, out+"_h")
	b.node("Mul", []string{x, out + "_h"}, out)
}

// geluTanhChain adds torch's export of gelu(approximate="tanh").
func geluTanhChain(b *modelBuilder, x, out string) {
	b.floats(out+"_k", []float32{0.044715})
	b.floats(out+"_b", []float32{float32(math.Sqrt(2 / math.Pi))})
	b.floats(out+"_one", []float32{1})
	b.floats(out+"_half", []float32{0.5})
	b.node("Mul", []string{x, x}, out+"_sq")
	b.node("Mul", []string{x, out + "_sq"}, out+"_cu")
	b.node("Mul", []string{out + "_k", out + "_cu"}, out+"_kc")
	b.node("Add", []string{x, out + "_kc"}, out+"_in")
	b.node("Mul", []string{out + "_b", out + "_in"}, out+"_bi")
	b.node("Tanh", []string{out + "_bi"}, out+"_t")
	b.node("Add", []string{out + "_one", out + "_t"}, out+"_o")
	b.node("Mul", []string{x, out + "_o"}, out+"_m")
	b.node("Mul", []string{out + "_half", out + "_m"}, out)
}

// graphIO is modelBuilder.graph with graph input x0 (2, 3, 8) and
// several graph outputs.
func (b *modelBuilder) graphIO(t testing.TB, outs ...string) *graph.Graph {
	t.Helper()
	return b.build(t, "x0", []int64{2, 3, 8}, outs...)
}

// compileWithInput compiles g and fills its input x0 with a fixed pattern
// (rows of different means and scales).
func compileWithInput(t testing.TB, g *graph.Graph, opts *Options) *Plan {
	t.Helper()
	p, err := Compile(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := p.Input(0)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*1.3))*float32(1+i/8) + float32(i/8%3) - 1
	}
	return p
}

// runBoth compiles g with and without fusion, runs forward and a backward
// from a fixed random output gradient, and returns the max relative
// difference over the outputs and the trainable gradients.
func runBoth(t *testing.T, g *graph.Graph, opts Options) (fused *Plan, diff float64) {
	t.Helper()
	var plans [2]*Plan
	for i := range plans {
		o := opts
		o.NoFusion = i == 1
		p := compileWithInput(t, g, &o)
		if err := p.Forward(); err != nil {
			t.Fatal(err)
		}
		y, _ := p.Output(0)
		dy := make([]float32, len(y))
		for j := range dy {
			dy[j] = float32(math.Sin(float64(j)*0.7)) + 0.3
		}
		if err := p.BackwardFrom(dy, nil); err != nil {
			t.Fatal(err)
		}
		plans[i] = p
	}
	for i := 0; i < plans[0].NumOutputs(); i++ {
		a, _ := plans[0].Output(i)
		b, _ := plans[1].Output(i)
		diff = math.Max(diff, relErr(a, b))
	}
	for _, name := range plans[1].Params() {
		diff = math.Max(diff, relErr(plans[0].Grad(name), plans[1].Grad(name)))
	}
	return plans[0], diff
}

// TestFusedGradCheck builds each chain form after a parameter-dependent
// input (x = x0·w) and before a parameter (the LayerNorm γ), checks that
// it fuses, that fused and unfused plans agree, and the fused gradients
// against central differences.
func TestFusedGradCheck(t *testing.T) {
	cases := []struct {
		name  string
		opset int64
		chain func(b *modelBuilder, x, out string)
		op    string
	}{
		{"layernorm", 14, lnChain, fusedNormalize},
		{"layernorm_opset18", 18, lnChain, fusedNormalize},
		{"gelu", 14, geluChain, fusedGelu},
		{"gelu_half_first", 14, geluHalfFirst, fusedGelu},
		{"gelu_dynamo", 18, geluDynamo, fusedGelu},
		{"gelu_tanh", 14, geluTanhChain, fusedGeluTanh},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(3, c.opset)
			b.param("w", 8)
			b.param("gamma", 8)
			b.node("Mul", []string{"x0", "w"}, "x")
			c.chain(b, "x", "n")
			b.node("Mul", []string{"n", "gamma"}, "y")
			g := b.graphIO(t, "y")
			opts := Options{Trainable: []string{"w", "gamma"}}
			p, diff := runBoth(t, g, opts)
			if n := fusedCounts(p); n[c.op] != 1 || len(n) != 1 {
				t.Fatalf("fused nodes %v, want one %s", n, c.op)
			}
			if len(p.nodes) != 3 {
				t.Errorf("plan has %d nodes, want Mul, %s, Mul", len(p.nodes), c.op)
			}
			if diff > 1e-5 {
				t.Errorf("fused and unfused plans differ by %.3g", diff)
			}
			gradCheckPlan(t, compileWithInput(t, g, &opts))
		})
	}
}

// TestFusionSafety checks that chains whose intermediate values something
// outside could observe are left alone, and that the result is then the
// unfused one.
func TestFusionSafety(t *testing.T) {
	trainable := []string{"w"}
	base := func(b *modelBuilder) {
		b.param("w", 8)
		b.node("Mul", []string{"x0", "w"}, "x")
	}
	cases := []struct {
		name      string
		build     func(b *modelBuilder) []string // graph outputs
		trainable []string
		want      map[string]int
	}{
		{"control", func(b *modelBuilder) []string {
			base(b)
			lnChain(b, "x", "n")
			geluChain(b, "n", "y")
			return []string{"y"}
		}, trainable, map[string]int{fusedNormalize: 1, fusedGelu: 1}},
		{"intermediate_is_output", func(b *modelBuilder) []string {
			base(b)
			lnChain(b, "x", "n")
			geluChain(b, "n", "y")
			return []string{"y", "n_d", "y_e"}
		}, trainable, map[string]int{}},
		{"intermediate_read_outside", func(b *modelBuilder) []string {
			base(b)
			lnChain(b, "x", "n")
			b.node("Add", []string{"n", "n_s"}, "n2")
			geluChain(b, "n2", "g")
			b.node("Mul", []string{"g", "g_e"}, "y")
			return []string{"y"}
		}, trainable, map[string]int{}},
		{"constants_trainable", func(b *modelBuilder) []string {
			base(b)
			lnChain(b, "x", "n")
			geluChain(b, "n", "y")
			return []string{"y"}
		}, nil, map[string]int{}}, // nil: every float initializer trains
		{"input_is_parameter", func(b *modelBuilder) []string {
			b.param("x", 2, 3, 8)
			lnChain(b, "x", "n")
			geluChain(b, "x", "g")
			b.node("Add", []string{"n", "g"}, "s")
			b.node("Mul", []string{"s", "x0"}, "y")
			return []string{"y"}
		}, []string{"x"}, map[string]int{}},
		{"input_is_derived", func(b *modelBuilder) []string {
			b.param("v", 2, 3, 8)
			b.param("w", 8)
			b.node("Mul", []string{"v", "w"}, "x")
			lnChain(b, "x", "n")
			geluChain(b, "x", "g")
			b.node("Add", []string{"n", "g"}, "s")
			b.node("Mul", []string{"s", "x0"}, "y")
			return []string{"y"}
		}, []string{"v", "w"}, map[string]int{}},
		{"not_last_axis", func(b *modelBuilder) []string {
			base(b)
			b.floats("two", []float32{2})
			b.floats("eps", []float32{1e-5})
			b.node("ReduceMean", []string{"x"}, "m", aInts("axes", 1))
			b.node("Sub", []string{"x", "m"}, "d")
			b.node("Pow", []string{"d", "two"}, "p")
			b.node("ReduceMean", []string{"p"}, "v", aInts("axes", 1))
			b.node("Add", []string{"v", "eps"}, "a")
			b.node("Sqrt", []string{"a"}, "s")
			b.node("Div", []string{"d", "s"}, "y")
			return []string{"y"}
		}, trainable, map[string]int{}},
		{"wrong_constant", func(b *modelBuilder) []string {
			base(b)
			b.floats("r3", []float32{float32(math.Sqrt(3))})
			b.floats("one", []float32{1})
			b.floats("half", []float32{0.5})
			b.node("Div", []string{"x", "r3"}, "u")
			b.node("Erf", []string{"u"}, "e")
			b.node("Add", []string{"e", "one"}, "o")
			b.node("Mul", []string{"x", "o"}, "m")
			b.node("Mul", []string{"m", "half"}, "y")
			return []string{"y"}
		}, trainable, map[string]int{}},
		{"eps_not_scalar", func(b *modelBuilder) []string {
			base(b)
			b.floats("two", []float32{2})
			b.floats("eps", []float32{1e-5, 1e-5, 1e-5}, 3, 1)
			b.node("ReduceMean", []string{"x"}, "m", aInts("axes", -1))
			b.node("Sub", []string{"x", "m"}, "d")
			b.node("Pow", []string{"d", "two"}, "p")
			b.node("ReduceMean", []string{"p"}, "v", aInts("axes", -1))
			b.node("Add", []string{"v", "eps"}, "a")
			b.node("Sqrt", []string{"a"}, "s")
			b.node("Div", []string{"d", "s"}, "y")
			return []string{"y"}
		}, trainable, map[string]int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(5, 14)
			outs := c.build(b)
			g := b.graphIO(t, outs...)
			p, diff := runBoth(t, g, Options{Trainable: c.trainable})
			if got := fusedCounts(p); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("fused nodes %v, want %v", got, c.want)
			}
			if diff > 1e-5 {
				t.Errorf("fused and unfused plans differ by %.3g", diff)
			}
		})
	}
}

// hookRecord keeps copies of what a hook saw.
type hookRecord struct {
	inputs [][]float32
	dout   []float32
	batch  string // batch axes and strides of the inputs and DOut
}

func recordHooks(into map[string]*hookRecord) HookFunc {
	return func(ev *HookEvent) {
		r := &hookRecord{dout: append([]float32(nil), ev.DOut.Data...)}
		for _, in := range ev.Inputs {
			r.inputs = append(r.inputs, append([]float32(nil), in.Data...))
			r.batch += fmt.Sprintf("%d/%d ", in.BatchAxis, in.BatchStride)
		}
		r.batch += fmt.Sprintf("→ %d/%d", ev.DOut.BatchAxis, ev.DOut.BatchStride)
		into[ev.Node.Name] = r
	}
}

// TestFusionFixtures compiles the transformer fixtures with and without
// fusion and checks that every decomposed LayerNorm and GELU fused, and
// that logits, losses, gradients and what the DP hooks see agree: a
// plain step, then (KeepActivations, KeepHooked) a hooked pass with
// parameter gradients skipped followed by a weighted second pass, as
// ghost clipping runs them.
func TestFusionFixtures(t *testing.T) {
	for _, name := range []string{"vit", "beit", "crossvit"} {
		t.Run(name, func(t *testing.T) {
			g, gold := loadFixture(t, name)
			in, labels := gold["input"], gold["labels"].I64
			n := len(labels)
			gc := graphCounts(g)
			type result struct {
				p      *Plan
				logits []float32
				losses []float32
				grads  map[string][]float32
				hooks  map[string]*hookRecord
				second map[string][]float32
			}
			var res [2]result
			for i := range res {
				opts := &Options{NoFusion: i == 1, KeepActivations: true, KeepHooked: true}
				p, err := CompileForBatch(g, in.Shape[0], nil, opts)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.SetInput(0, in.F32); err != nil {
					t.Fatal(err)
				}
				r := result{p: p, grads: map[string][]float32{}, hooks: map[string]*hookRecord{}, second: map[string][]float32{}}
				r.losses = step(t, p, labels, nil, nil)
				out, _ := p.Output(0)
				r.logits = append([]float32(nil), out...)
				for _, pn := range p.Params() {
					r.grads[pn] = append([]float32(nil), p.Grad(pn)...)
				}
				// Hooked pass, then a second weighted backward after the
				// same forward.
				r.losses = step(t, p, labels, nil, &BackwardOptions{Hook: recordHooks(r.hooks), SkipParamGrads: true})
				w := make([]float32, n)
				for j := range w {
					w[j] = 0.25 + float32(j%3)*0.5
				}
				if err := p.Backward(w, nil); err != nil {
					t.Fatal(err)
				}
				for _, pn := range p.Params() {
					r.second[pn] = append([]float32(nil), p.Grad(pn)...)
				}
				res[i] = r
			}
			fc := fusedCounts(res[0].p)
			if fc[fusedNormalize] != gc["Sqrt"] || fc[fusedGelu] != gc["Erf"] || fc[fusedNormalize] == 0 || fc[fusedGelu] == 0 {
				t.Errorf("fused %v; the graph has %d Sqrt (LayerNorm chains) and %d Erf", fc, gc["Sqrt"], gc["Erf"])
			}
			if name == "vit" && fc[fusedSplit] != gc["Slice"]/3 { // q, k, v of each attention
				t.Errorf("fused %v; the graph has %d Slice", fc, gc["Slice"])
			}
			for _, nd := range res[0].p.nodes {
				switch nd.g.OpType {
				case "Pow", "Sqrt", "Erf":
					t.Errorf("node %s (%s) left unfused", nd.g.Name, nd.g.OpType)
				}
			}
			t.Logf("fused %v; plan %d nodes (unfused %d); arena %d KiB (unfused %d KiB)", fc, len(res[0].p.nodes), len(res[1].p.nodes),
				res[0].p.ArenaBytes()>>10, res[1].p.ArenaBytes()>>10)
			if e := relErr(res[0].logits, res[1].logits); e > 1e-5 {
				t.Errorf("logits differ by %.3g", e)
			}
			if e := relErr(res[0].losses, res[1].losses); e > 1e-5 {
				t.Errorf("losses differ by %.3g", e)
			}
			// Gradients that are analytically zero (attention key biases:
			// softmax ignores them) are float noise of order 1e-9 of the
			// largest; they only have to stay noise. The others are
			// compared relative to their largest element, floored at 1e-4
			// of the model's largest gradient.
			var largest float64
			for _, gr := range res[1].grads {
				largest = math.Max(largest, maxAbs(gr))
			}
			var names []string
			for pn := range res[1].grads {
				names = append(names, pn)
			}
			sort.Strings(names)
			worst := 0.0
			for _, pn := range names {
				for _, pair := range [][2][]float32{{res[0].grads[pn], res[1].grads[pn]}, {res[0].second[pn], res[1].second[pn]}} {
					if maxAbs(pair[1]) < 1e-6*largest {
						if maxAbs(pair[0]) >= 1e-6*largest {
							t.Errorf("gradient %s: %.3g with fusion, noise (%.3g) without", pn, maxAbs(pair[0]), maxAbs(pair[1]))
						}
						continue
					}
					e := relErrFloor(pair[0], pair[1], 1e-4*largest)
					worst = math.Max(worst, e)
					if e > 1e-5 {
						t.Errorf("gradient %s differs by %.3g (max |g| %.3g, largest %.3g)", pn, e, maxAbs(pair[1]), largest)
					}
				}
			}
			// The same nodes are hooked and see the same values; under
			// SkipParamGrads no hook fires on a node computing from
			// parameters alone.
			h0, h1 := res[0].p.HookedNodes(), res[1].p.HookedNodes()
			fire := 0
			for _, nd := range res[1].p.nodes {
				if nd.hooked && !nd.paramOnly() {
					fire++
				}
			}
			if len(h0) != len(h1) || len(res[0].hooks) != len(res[1].hooks) || fire != len(res[1].hooks) {
				t.Fatalf("hooked nodes: fused %d (%d events), unfused %d (%d events, %d expected)", len(h0), len(res[0].hooks), len(h1), len(res[1].hooks), fire)
			}
			for i := range h0 {
				if h0[i].Name != h1[i].Name {
					t.Errorf("hooked node %d: fused %s, unfused %s", i, h0[i].Name, h1[i].Name)
				}
			}
			for node, r1 := range res[1].hooks {
				r0 := res[0].hooks[node]
				if r0 == nil {
					t.Errorf("hook on %s not called with fusion", node)
					continue
				}
				if r0.batch != r1.batch {
					t.Errorf("hook %s: batch axes/strides %s with fusion, %s without", node, r0.batch, r1.batch)
				}
				if e := relErr(r0.dout, r1.dout); e > 1e-5 {
					t.Errorf("hook %s: output gradient differs by %.3g", node, e)
				}
				for j := range r1.inputs {
					if e := relErr(r0.inputs[j], r1.inputs[j]); e > 1e-5 {
						t.Errorf("hook %s: input %d differs by %.3g", node, j, e)
					}
				}
			}
			t.Logf("max gradient difference %.3g over %d parameters, %d hooked nodes", worst, len(names), len(h0))
		})
	}
}

// TestFusedSplit checks the fusion of disjoint Slice consumers into one
// split: along the last and a middle axis, with gaps, an output that does
// not reach the loss, and an input that also has another consumer;
// overlapping slices stay separate.
func TestFusedSplit(t *testing.T) {
	slice := func(b *modelBuilder, x, out string, axis, start, end int64) {
		b.ints(out+"_s", []int64{start}, 1)
		b.ints(out+"_e", []int64{end}, 1)
		b.ints(out+"_a", []int64{axis}, 1)
		b.node("Slice", []string{x, out + "_s", out + "_e", out + "_a"}, out)
	}
	cases := []struct {
		name  string
		build func(b *modelBuilder)
		want  int // fused splits
	}{
		{"qkv_last_axis", func(b *modelBuilder) {
			slice(b, "x", "q", -1, 0, 3)
			slice(b, "x", "k", -1, 3, 6)
			slice(b, "x", "v", -1, 6, 8)
			b.node("Mul", []string{"q", "k"}, "qk")
			b.node("Concat", []string{"qk", "v"}, "y", aInt("axis", -1))
		}, 1},
		{"middle_axis_gap_unused_other_consumer", func(b *modelBuilder) {
			slice(b, "x", "a", 1, 0, 1)
			slice(b, "x", "c", 1, 2, 3)
			slice(b, "x", "unused", 1, 1, 2) // no path to the output
			b.node("Mul", []string{"a", "c"}, "ac")
			b.node("Add", []string{"ac", "x"}, "y") // broadcast over axis 1
		}, 1},
		{"overlapping", func(b *modelBuilder) {
			slice(b, "x", "a", -1, 0, 5)
			slice(b, "x", "c", -1, 3, 8)
			b.node("Mul", []string{"a", "c"}, "y")
		}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(4, 14)
			b.param("w", 8)
			b.node("Mul", []string{"x0", "w"}, "x")
			c.build(b)
			g := b.graphIO(t, "y")
			opts := Options{Trainable: []string{"w"}}
			p, diff := runBoth(t, g, opts)
			if got := fusedCounts(p)[fusedSplit]; got != c.want {
				t.Errorf("%d fused splits, want %d", got, c.want)
			}
			if diff > 1e-6 {
				t.Errorf("fused and unfused plans differ by %.3g", diff)
			}
			gradCheckPlan(t, compileWithInput(t, g, &opts))
		})
	}
}
