package rewrite

import (
	"encoding/json"
	"testing"
)

// TestMemoryAtTerms checks the estimate's terms against the formulas of
// docs/REWRITES.md on fixtures with convolutions, Linear layers,
// elementwise parameters, (vit) token-shaped layers and parameters behind
// paths (beit, packedqkv): gradient copies per mode, the per-sample terms
// of every DP mode, and that totals add up.
func TestMemoryAtTerms(t *testing.T) {
	man := readManifest(t)
	for _, name := range []string{"cnn", "vgg", "mobilenet", "vit", "beit", "packedqkv"} {
		t.Run(name, func(t *testing.T) {
			sample := fixtureSample(name)
			if fx, ok := man.Fixtures[name]; ok && len(fx.InputShape) > 1 {
				sample = fx.InputShape[1:]
			}
			const b = 8
			p, err := Prepare(loadFixture(t, name), Options{PlanOptions: PlanOptions{InputShape: sample, Batch: b}})
			if err != nil {
				t.Fatal(err)
			}
			nt := p.Trainable.Scalars
			var inst, bk, elem, kept int64
			for _, l := range p.Layers {
				inst += l.Groups * l.PD
				if l.Shared || l.Mapped || (l.Decision == Instantiate && l.D <= l.T) {
					bk += l.Groups * l.PD
				} else {
					bk += l.Groups * l.T * l.P
				}
			}
			for _, prm := range p.Params {
				if !prm.Trainable() {
					continue
				}
				keeps := prm.Shared
				for _, u := range prm.Uses {
					if u.Kind == KindElementwise {
						elem += prm.Size
						keeps = keeps || len(u.Path) > 0
					}
				}
				if keeps {
					kept += prm.Size
				}
			}
			got := map[string]ModeMemory{}
			for _, m := range p.MemoryAt(b) {
				got[m.Mode] = m
				if sum := m.Weights + m.Gradients + m.Optimizer + m.Activations + m.PerSample + m.Transient; sum != m.Total {
					t.Errorf("%s: terms add to %d, total %d", m.Mode, sum, m.Total)
				}
			}
			for mode, copies := range map[string]int64{ModeNonDP: 2, ModeGhost: 2, ModeMixed: 2, ModeInstantiate: 1, ModeBK: 1} {
				if g := got[mode].Gradients; g != 4*copies*nt {
					t.Errorf("%s: gradients %d bytes, want %d copies of %d scalars", mode, g, copies, nt)
				}
			}
			if g, w := got[ModeInstantiate].PerSample, 4*b*(inst+elem)+4*b; g != w {
				t.Errorf("instantiate per-sample %d, want %d", g, w)
			}
			if g, w := got[ModeBK].PerSample, 4*b*(bk+elem)+4*b; g != w {
				t.Errorf("bk per-sample %d, want %d", g, w)
			}
			// Ghost and mixed keep the per-sample gradients of shared
			// parameters (packedqkv's qkv_weight and qkv_bias) and of
			// elementwise parameters behind a path (beit's q/v biases and
			// bias tables) for their norms.
			for _, mode := range []string{ModeGhost, ModeMixed} {
				if g, w := got[mode].PerSample, 4*b*kept+4*b; g != w {
					t.Errorf("%s per-sample %d, want %d", mode, g, w)
				}
			}
			if (name == "beit" || name == "packedqkv") && kept == 0 {
				t.Errorf("no parameter keeps per-sample gradients in ghost mode")
			}
			// The optimizer's two moments, and with the parameters'
			// average a third copy, in every mode; nothing else changes.
			avg := *p
			avg.Averaged = true
			for k, m := range avg.MemoryAt(b) {
				plain := p.MemoryAt(b)[k]
				if plain.Optimizer != 8*nt || m.Optimizer != 12*nt || m.Total-plain.Total != 4*nt {
					t.Errorf("%s: optimizer %d bytes, %d with the average (total +%d), want %d and %d (+%d)", m.Mode, plain.Optimizer, m.Optimizer, m.Total-plain.Total, 8*nt, 12*nt, 4*nt)
				}
			}
		})
	}
}

// TestCompiledActivationsAt checks the compiled activation figure's
// formula: a line in the batch plus the workspace, which grows by whole
// multiples of the batch it was measured at.
func TestCompiledActivationsAt(t *testing.T) {
	c := CompiledActivations{PerSample: 1000, Fixed: 50, Scratch: 300, ScratchBatch: 8}
	for _, tc := range []struct{ b, want int64 }{
		{1, 50 + 1000 + 300},
		{8, 50 + 8000 + 300},
		{9, 50 + 9000 + 600},
		{16, 50 + 16000 + 600},
		{17, 50 + 17000 + 900},
	} {
		if got := c.At(tc.b); got != tc.want {
			t.Errorf("At(%d) = %d, want %d", tc.b, got, tc.want)
		}
	}
	if got := (CompiledActivations{PerSample: 4, Scratch: 7}).At(100); got != 407 {
		t.Errorf("without a scratch batch: At(100) = %d, want 407", got)
	}
}

// TestMemoryAtCompiled: a mode with compiled activations takes its
// activation term from them, the others keep the count of every
// activation; book-keeping's kept output gradients, buffers of the
// compiled plan, leave its per-sample term; SetCompiled refreshes Memory;
// and the figures survive the plan's JSON, so that a report's plan
// estimates what the run did.
func TestMemoryAtCompiled(t *testing.T) {
	const b = 8
	p, err := Prepare(loadFixture(t, "vit"), Options{PlanOptions: PlanOptions{InputShape: []int64{3, 32, 32}, Batch: b}})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]ModeMemory{}
	for _, m := range p.Memory {
		before[m.Mode] = m
	}
	var out int64
	for _, l := range p.Layers {
		if !(l.Shared || l.Mapped || (l.Decision == Instantiate && l.D <= l.T)) {
			out += l.Groups * l.T * l.P
		}
	}
	if out == 0 {
		t.Fatal("no layer keeps its output gradient in bk: the fixture does not exercise the test")
	}
	compiled := map[string]CompiledActivations{
		ModeNonDP: {PerSample: 1000, Fixed: 24, Scratch: 4096, ScratchBatch: b},
		ModeBK:    {PerSample: 2000, Fixed: 48, Scratch: 4096, ScratchBatch: b},
	}
	p.SetCompiled(compiled)
	round, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(round, &back); err != nil {
		t.Fatal(err)
	}
	for _, pl := range []*Plan{p, &back} {
		for i, m := range pl.MemoryAt(b) {
			if pl.Memory[i] != m {
				t.Errorf("Memory[%d] = %+v, MemoryAt(%d) = %+v", i, pl.Memory[i], b, m)
			}
			old := before[m.Mode]
			switch c, ok := compiled[m.Mode]; {
			case ok && m.Activations != c.At(b):
				t.Errorf("%s: activations %d, compiled %d", m.Mode, m.Activations, c.At(b))
			case !ok && m.Activations != 4*b*pl.ActivationsPerSample:
				t.Errorf("%s: activations %d, want every activation: %d", m.Mode, m.Activations, 4*b*pl.ActivationsPerSample)
			}
			wantPS := old.PerSample
			if m.Mode == ModeBK {
				wantPS -= 4 * b * out
			}
			if m.PerSample != wantPS || m.Total != m.Weights+m.Gradients+m.Optimizer+m.Activations+m.PerSample+m.Transient {
				t.Errorf("%s: per-sample %d (want %d), total %d: %+v", m.Mode, m.PerSample, wantPS, m.Total, m)
			}
		}
	}
}
