package rewrite

import "testing"

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
		})
	}
}
