package dpengine

import (
	"fmt"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestEinsumBatched holds the batched Einsum weight rules (einsumBatched
// for the norms and instantiated gradients, weightedSumBatched for
// book-keeping's sum) on a one-worker device with memory of its own to the
// CPU's per-sample loops, on the rules graph "einsum": a token Linear read
// in place, a per-head weight (a group label) transposed a chunk at a
// time, an output gradient whose batch is on axis 1 (taken whole) and a
// weight as the first operand; in ghost, instantiate and bk mode, on the
// reference backend and the guarded CUDA emulation (no host read of a
// device value). With the default scratch every Einsum use runs one
// chunk; with a scratch of a few samples the chunked paths run more
// chunks; with none they fall back to the per-sample loop. Each time the
// per-sample norms and the clipped sums equal the CPU's.
func TestEinsumBatched(t *testing.T) {
	defer func(s int) { batchedScratch = s }(batchedScratch)
	models := map[string]func() (*graph.Graph, []int64){"einsum": rulesModels(t)["einsum"], "einsum_ghost": einsumGhostModel(t)}
	for name, build := range models {
		t.Run(name, func(t *testing.T) { einsumBatchedOn(t, build) })
	}
}

// einsumGhostModel is a graph of Einsum weights whose layers are all
// ghost layers (2T² < pD), so that book-keeping takes each one's
// weighted sum from its kept data and output gradient
// (weightedSumBatched): a per-head weight on data whose batch is
// outermost (transposed group-major a chunk at a time), a per-head weight
// on data whose heads are outermost and batch second (group-major as it
// lies, taken whole), an output whose batch is on axis 1 (taken whole),
// and a weight as the first operand laid out (N, K).
func einsumGhostModel(t *testing.T) func() (*graph.Graph, []int64) {
	return func() (*graph.Graph, []int64) {
		m := newTestModel(14)
		x := m.node("Reshape", []string{"input", m.ints("heads", -1, 2, 2, 4)}, "r1") // (b, t, h, d)
		x = m.node("Einsum", []string{x, m.param("w1", 2, 4, 6)}, "e1", strAttr("equation", "bthd,hde->bthe"))
		x = m.node("Tanh", []string{x}, "t1")
		x = m.node("Transpose", []string{x}, "tr1", intsAttr("perm", 2, 0, 1, 3)) // (h, b, t, e)
		x = m.node("Einsum", []string{x, m.param("w4", 2, 6, 6)}, "e4", strAttr("equation", "hbte,hef->hbtf"))
		x = m.node("Tanh", []string{x}, "t4")
		x = m.node("Transpose", []string{x}, "tr4", intsAttr("perm", 1, 2, 0, 3)) // (b, t, h, f)
		x = m.node("Einsum", []string{x, m.param("w2", 6, 8)}, "e2", strAttr("equation", "bthe,ef->tbhf"))
		x = m.node("Tanh", []string{x}, "t2")
		x = m.node("Transpose", []string{x}, "tr2", intsAttr("perm", 1, 0, 2, 3))
		x = m.node("Einsum", []string{m.param("w3", 5, 8), x}, "e3", strAttr("equation", "ke,bthe->bthk"))
		x = m.node("ReduceMean", []string{x}, "pool", intsAttr("axes", 1, 2), intAttr("keepdims", 0))
		x = m.node("Gemm", []string{x, m.param("fc.w", 5, 3), m.param("fc.b", 3)}, "logits")
		return m.graph(t, []int64{2, 8}, x, 3), []int64{2, 8}
	}
}

func einsumBatchedOn(t *testing.T, build func() (*graph.Graph, []int64)) {
	// Two physical batches of 3 make the logical batch: the second's
	// weighted sums add to the first's (overwrite false).
	const n, B = 6, 3
	_, sample := build()
	sl := 1
	for _, d := range sample {
		sl *= int(d)
	}
	x := testInput(n*sl, 0.7)
	y := []int64{0, 2, 1, 2, 1, 0}
	batch := []int{0, 1, 2, 3, 4, 5}
	fill := func(idx []int, xs []float32, ys []int64) error {
		for k, i := range idx {
			copy(xs[k*sl:(k+1)*sl], x[i*sl:(i+1)*sl])
			ys[k] = y[i]
		}
		return nil
	}
	devices := []runtime.Device{reference.Separate{}}
	if gpu := guardedCUDA(t); gpu != nil {
		devices = append(devices, gpu)
	}
	engine := func(mode Mode, dev runtime.Device) *Engine {
		g, _ := build()
		rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: sample, Batch: B}})
		if err != nil {
			t.Fatal(err)
		}
		cfg := compareConfig(dev, mode, Clipping{Fn: Abadi, R: 1e-4}, false, "sgd", B)
		cfg.ExpectedBatch = n
		e, err := New(g, rp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// chunks counts, per Einsum weight, the chunks its batched rules
	// ran, and the chunks one physical batch's run of them all would be:
	// one for the norms of each, and in bk one more for the weighted sum
	// of each whose data and output gradient bk keeps (a ghost layer; an
	// instantiated one keeps its per-sample gradients).
	chunks := func(e *Engine) (k map[string]int, total, once int) {
		k = map[string]int{}
		for _, gs := range e.groups {
			for _, g := range gs {
				for _, us := range g.uses {
					if ls := us.linear; ls != nil && ls.einsum != nil {
						k[us.p.name] = ls.einsum.chunks
						total += ls.einsum.chunks
						once++
						if e.cfg.Mode == BK && us.p.ps == nil {
							once++
						}
					}
				}
			}
		}
		return k, total, once
	}
	const def = 1 << 24
	for _, mode := range []Mode{Ghost, Instantiate, BK} {
		for _, dev := range devices {
			byScratch := map[int]map[string]int{}
			for _, scratch := range []int{def, 160, 80, 0} {
				batchedScratch = scratch
				label := fmt.Sprintf("%s/%s/scratch %d", mode, dev.Name(), scratch)
				got := engine(mode, dev)
				if _, ok := dev.(reference.Separate); ok {
					// ClippedSum on one physical batch, then a Step on two.
					compareEngines(t, label, engine(mode, runtime.CPU{}), got, x[:B*sl], y[:B], batch, fill)
				} else {
					// The device's memory is read through its copies:
					// ClippedSum's results, on two batches in turn.
					cpu := engine(mode, runtime.CPU{})
					clippedSumsAgree(t, label, cpu, got, x[:B*sl], y[:B])
					clippedSumsAgree(t, label, cpu, got, x[B*sl:], y[B:])
				}
				var k, once int
				byScratch[scratch], k, once = chunks(got)
				switch {
				case scratch == def && k != 3*once && k != 2*once:
					t.Errorf("%s: %d chunks, not two or three physical batches' %d", label, k, once)
				case scratch == def && got.sampleLoops != 0:
					t.Errorf("%s: %d per-sample loops", label, got.sampleLoops)
				case scratch == 0 && got.sampleLoops == 0:
					t.Errorf("%s: no per-sample loop without scratch", label)
				}
			}
			// A scratch of a few samples runs some weight in more
			// chunks (another may fall back to the per-sample loop).
			more := false
			for p, k := range byScratch[def] {
				more = more || byScratch[160][p] > k || byScratch[80][p] > k
			}
			if !more {
				t.Errorf("%s/%s: chunks by scratch %v: no weight ran more chunks in a small scratch", mode, dev.Name(), byScratch)
			}
		}
	}
}

// clippedSumsAgree holds got's ClippedSum on x and y — per-sample norms,
// each parameter's per-sample norms and clipped sums — to want's (the
// CPU's), with compareEngines' tolerance.
func clippedSumsAgree(t *testing.T, label string, want, got *Engine, x []float32, y []int64) {
	t.Helper()
	wantSum, wantNorms, err := want.ClippedSum(x, y)
	if err != nil {
		t.Fatal(err)
	}
	sums, norms, err := got.ClippedSum(x, y)
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	if r := numcheck.RelErr(norms, wantNorms, 0); r > refTolerance {
		t.Errorf("%s: per-sample norms differ from the CPU's by %.3g", label, r)
	}
	wantPN, pn := want.ParamNorms(), got.ParamNorms()
	pnFloor, sumFloor := 1e-3*numcheck.Largest(wantPN), 1e-3*numcheck.Largest(wantSum)
	for p, w := range wantSum {
		if r := numcheck.RelErr(pn[p], wantPN[p], pnFloor); r > refTolerance {
			t.Errorf("%s: norms of %s differ from the CPU's by %.3g", label, p, r)
		}
		if r := numcheck.RelErr(sums[p], w, sumFloor); r > refTolerance {
			t.Errorf("%s: clipped sum of %s differs from the CPU's by %.3g", label, p, r)
		}
	}
}
