package dpengine

import (
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// zerosLike returns zeroed host tensors of the shapes of xs.
func zerosLike(xs [][]float32) [][]float32 {
	out := make([][]float32, len(xs))
	for i, x := range xs {
		out[i] = make([]float32, len(x))
	}
	return out
}

// copyLists returns a deep host copy of xs (nil for nil).
func copyLists(xs [][]float32) [][]float32 {
	if xs == nil {
		return nil
	}
	out := make([][]float32, len(xs))
	for i, x := range xs {
		out[i] = append([]float32(nil), x...)
	}
	return out
}

// TestEngineOnSeparateMemory trains every fixture engine (the modes taken
// in turn, SGD and AdamW alternating) a few steps on
// reference.Separate, whose buffers are copies of the graph's
// initializers, and on reference.Device, which adopts them, with the same
// seed, and checks that
//
//   - before SyncParams the separate engine's initializers are unchanged
//     (its state is in memory of its own, so a host reader that forgot to
//     sync would read stale weights);
//   - its device parameters equal the reference engine's bit for bit (the
//     same arithmetic, only where the state lives differs), and so do the
//     reference engine's initializers (adopted: the same memory);
//   - after SyncParams its initializers equal its device parameters;
//   - after SetParams (a checkpoint restore, which writes the
//     initializers and calls LoadParams) the device holds the restored
//     values.
func TestEngineOnSeparateMemory(t *testing.T) {
	modes := []Mode{BK, Ghost, Instantiate, Mixed, NonDP}
	for fi, name := range engineFixtures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const n = 8
			_, _, _, fill := engineBatch(t, name, n)
			mode := modes[fi%len(modes)]
			cfg := func(dev runtime.Device) Config {
				var o Optimizer = NewAdam(1e-2, 0.01, true)
				if fi%2 == 1 {
					o = &SGD{LR: 1e-2, Momentum: 0.9, WeightDecay: 0.01}
				}
				c := Config{Device: dev, Mode: mode, Clipping: Clipping{Fn: Abadi, R: 0.5}, NoiseMultiplier: 1,
					ExpectedBatch: n, PhysicalBatch: n, Source: NewSeededSource(3), Optimizer: o}
				if mode == NonDP {
					c.NoiseMultiplier = 0
				}
				return c
			}
			ref := buildEngine(t, name, cfg(reference.Device{}))
			sep := buildEngine(t, name, cfg(reference.Separate{}))
			initial := copyLists(sep.HostParams())
			for k, p := range sep.Params() {
				if runtime.SameMemory(p, sep.HostParams()[k]) {
					t.Fatalf("%s: parameter %s: reference.Separate shares the initializer's memory", mode, sep.ParamNames()[k])
				}
				if !runtime.SameMemory(ref.Params()[k], ref.HostParams()[k]) {
					t.Fatalf("%s: parameter %s: reference.Device copied the initializer", mode, ref.ParamNames()[k])
				}
			}
			for step, batch := range [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {1, 3, 5}, {2, 4, 6, 7}} {
				for _, e := range []*Engine{ref, sep} {
					if _, err := e.Step(batch, fill); err != nil {
						t.Fatalf("%s: step %d: %v", mode, step, err)
					}
				}
			}
			names := sep.ParamNames()
			moved := false
			for k, p := range sep.Params() {
				if !numcheck.SameBits(p, ref.Params()[k]) {
					t.Fatalf("%s: parameter %s differs between reference.Separate and reference.Device", mode, names[k])
				}
				if !numcheck.SameBits(ref.HostParams()[k], ref.Params()[k]) {
					t.Fatalf("%s: parameter %s: reference.Device's initializer is not its parameter", mode, names[k])
				}
				if !numcheck.SameBits(sep.HostParams()[k], initial[k]) {
					t.Fatalf("%s: parameter %s: the initializer changed before SyncParams: the memory is not separate", mode, names[k])
				}
				moved = moved || !numcheck.SameBits(p, initial[k])
			}
			if !moved {
				t.Fatalf("%s: the steps did not move the parameters", mode)
			}
			if err := sep.SyncParams(); err != nil {
				t.Fatal(err)
			}
			for k, p := range sep.Params() {
				if !numcheck.SameBits(sep.HostParams()[k], p) {
					t.Fatalf("%s: parameter %s: after SyncParams the initializer is not the device's parameter", mode, names[k])
				}
			}
			if err := sep.SetParams(names, initial); err != nil {
				t.Fatal(err)
			}
			for k, p := range sep.Params() {
				if !numcheck.SameBits(p, initial[k]) {
					t.Fatalf("%s: parameter %s: SetParams did not reach the device", mode, names[k])
				}
			}
		})
	}
}

// TestEngineAdoptsOnCPU checks that on the CPU the engine's parameters are
// the graph's initializers (no copy of the model), so that SyncParams and
// LoadParams cost nothing there.
func TestEngineAdoptsOnCPU(t *testing.T) {
	e := buildEngine(t, "cnn", Config{Mode: BK, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: 8, PhysicalBatch: 8,
		Source: NewSeededSource(1), Optimizer: NewAdam(1e-3, 0, false)})
	host := e.HostParams()
	for k, p := range e.Params() {
		if !runtime.SameMemory(p, host[k]) {
			t.Fatalf("parameter %s: the CPU engine copied the initializer", e.ParamNames()[k])
		}
	}
	if err := e.SyncParams(); err != nil {
		t.Fatal(err)
	}
	if err := e.LoadParams(); err != nil {
		t.Fatal(err)
	}
}

// TestNonFiniteParam: the device's count finds a NaN or an infinity in
// any parameter, naming the first such parameter, and nothing in a finite
// model: on the CPU, and on a device whose parameters are one block
// (reference.Separate, as a GPU), where one count covers them all.
func TestNonFiniteParam(t *testing.T) {
	for _, dev := range []runtime.Device{nil, reference.Separate{}} {
		e := buildEngine(t, "cnn", Config{Device: dev, Mode: Ghost, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: 8,
			PhysicalBatch: 8, Source: NewSeededSource(1), Optimizer: &SGD{LR: 0.1}})
		if e.whole != (dev != nil) {
			t.Fatalf("device %v: parameters in one block %v", dev, e.whole)
		}
		if name := e.NonFiniteParam(); name != "" {
			t.Fatalf("a fresh model has a non-finite parameter %q", name)
		}
		names, params := e.ParamNames(), e.Params()
		last := len(params) - 1
		params[last][len(params[last])-1] = float32(math.Inf(-1))
		if name := e.NonFiniteParam(); name != names[last] {
			t.Fatalf("NonFiniteParam = %q, want %q (−Inf)", name, names[last])
		}
		params[0][0] = float32(math.NaN())
		if name := e.NonFiniteParam(); name != names[0] {
			t.Fatalf("NonFiniteParam = %q, want %q (NaN)", name, names[0])
		}
	}
}

// TestCopyGradient: CopyGradient copies a range of the private gradient
// to the host, equal to the device view Gradient, and refuses an unknown
// parameter or a range outside it.
func TestCopyGradient(t *testing.T) {
	e := buildEngine(t, "cnn", Config{Mode: Ghost, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: 8,
		PhysicalBatch: 8, Source: NewSeededSource(1), Optimizer: &SGD{LR: 0.1}})
	name := e.ParamNames()[0]
	g := e.Gradient(name)
	for i := range g {
		g[i] = float32(i)
	}
	dst := make([]float32, 3)
	if !e.CopyGradient(name, 2, dst) || dst[0] != 2 || dst[2] != 4 {
		t.Fatalf("CopyGradient(%q, 2) = %v", name, dst)
	}
	if e.CopyGradient("no such parameter", 0, dst) || e.CopyGradient(name, len(g)-2, dst) || e.CopyGradient(name, -1, dst) {
		t.Fatal("CopyGradient accepted a parameter or range outside the model")
	}
}
