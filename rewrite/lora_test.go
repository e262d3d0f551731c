package rewrite

import (
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// loraPlan prepares a fixture with LoRA adapters.
func loraPlan(t *testing.T, name string, opts Options) *Plan {
	t.Helper()
	g := loadFixture(t, name)
	opts.InputShape, opts.Batch = fixtureSample(name), 4
	p, err := Prepare(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoRAPlan: what a LoRA plan trains and freezes, and why — the
// adapters (linear, trainable), the classifier head in full, the adapted
// weights frozen naming their adapter, everything else frozen unless
// --train selects it; --freeze still freezes an adapter; --lora-target
// picks layers; a fresh head is trained, not adapted; a Linear exported
// without constant folding (a MatMul reading its weight through a
// Transpose) is adapted; grouped convolutions are reported, not adapted,
// and a weight that is no parameter is left alone (it once panicked);
// A is drawn within ±1/√fan_in by the seed and B is zero.
func TestLoRAPlan(t *testing.T) {
	kinds := func(p *Plan) (trained, frozen map[string]string) {
		trained, frozen = map[string]string{}, map[string]string{}
		for _, prm := range p.Params {
			if prm.Trainable() {
				trained[prm.Name] = string(prm.Kind)
			} else {
				frozen[prm.Name] = prm.Reason
			}
		}
		return
	}
	adapters := []string{"features.0.lora_A", "features.0.lora_B", "features.3.lora_A", "features.3.lora_B", "classifier.1.lora_A", "classifier.1.lora_B"}
	head := []string{"classifier.3.weight", "classifier.3.bias"}
	for _, tc := range []struct {
		name    string
		opts    Options
		trained []string
		// frozen maps a frozen parameter to a word its reason has.
		frozen map[string]string
	}{
		{"default", Options{LoRA: LoRAOptions{Rank: 4}}, append(adapters, head...),
			map[string]string{"features.0.weight": "features.0.lora_A", "classifier.1.weight": "adapted by LoRA", "features.0.bias": "--lora", "classifier.1.bias": "--train REGEX"}},
		{"train biases", Options{PlanOptions: PlanOptions{Train: regexp.MustCompile(`bias`)}, LoRA: LoRAOptions{Rank: 4}},
			append(append(adapters, head...), "features.0.bias", "features.3.bias", "classifier.1.bias"),
			map[string]string{"features.3.weight": "adapted by LoRA"}},
		{"freeze an adapter", Options{PlanOptions: PlanOptions{Freeze: regexp.MustCompile(`features\.0\.lora`)}, LoRA: LoRAOptions{Rank: 4}},
			append(adapters[2:], head...), map[string]string{"features.0.lora_A": "--freeze", "features.0.weight": "adapted"}},
		{"target", Options{LoRA: LoRAOptions{Rank: 4, Target: regexp.MustCompile(`^features\.3\.`)}},
			append([]string{"features.3.lora_A", "features.3.lora_B"}, head...),
			map[string]string{"features.0.weight": "--lora", "classifier.1.weight": "--lora", "features.3.weight": "adapted"}},
		{"fresh head", Options{NumClasses: 5, LoRA: LoRAOptions{Rank: 4}}, append(adapters, head...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loraPlan(t, "cnn", tc.opts)
			trained, frozen := kinds(p)
			names := make([]string, 0, len(trained))
			for n := range trained {
				names = append(names, n)
			}
			slices.Sort(names)
			want := slices.Clone(tc.trained)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Errorf("trained %v, want %v", names, want)
			}
			for name, word := range tc.frozen {
				if !strings.Contains(frozen[name], word) {
					t.Errorf("%s frozen for %q, want a reason with %q", name, frozen[name], word)
				}
			}
			for _, a := range p.Adapters {
				if trained[a.A] != "" && trained[a.A] != string(KindLinear) {
					t.Errorf("%s is %s, want linear", a.A, trained[a.A])
				}
			}
		})
	}

	t.Run("init", func(t *testing.T) {
		draw := func(seed uint64) ([]float32, []float32) {
			g := loadFixture(t, "cnn")
			if _, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: fixtureSample("cnn"), Batch: 4}, LoRA: LoRAOptions{Rank: 4, Seed: seed}}); err != nil {
				t.Fatal(err)
			}
			return g.Values["classifier.1.lora_A"].Const.F32, g.Values["classifier.1.lora_B"].Const.F32
		}
		a1, b1 := draw(1)
		a1again, _ := draw(1)
		a2, _ := draw(2)
		bound := float32(1 / math.Sqrt(512))
		var top float32
		for _, v := range a1 {
			top = max(top, float32(math.Abs(float64(v))))
		}
		if top > bound || top < 0.9*bound {
			t.Errorf("A's largest |element| %g, want within (0.9, 1]·1/√512 = %g", top, bound)
		}
		if slices.ContainsFunc(b1, func(v float32) bool { return v != 0 }) {
			t.Error("B is not zero: the adapted model would not compute what it did")
		}
		if !slices.Equal(a1, a1again) || slices.Equal(a1, a2) {
			t.Error("A is not a function of the seed")
		}
	})

	t.Run("transposed", func(t *testing.T) {
		p := loraPlan(t, "vit_nofold", Options{LoRA: LoRAOptions{Rank: 2}})
		var bases []string
		for _, a := range p.Adapters {
			bases = append(bases, a.Base)
		}
		for _, w := range []string{"encoder.layers.encoder_layer_0.self_attention.in_proj_weight", "encoder.layers.encoder_layer_1.mlp.3.weight"} {
			if !slices.Contains(bases, w) {
				t.Errorf("%s (read through a Transpose) not adapted: %v", w, bases)
			}
		}
		if a := p.Param("encoder.layers.encoder_layer_0.mlp.0.lora_A"); a == nil || !slices.Equal(a.Shape, []int64{32, 2}) {
			t.Errorf("mlp.0's A: %+v, want (32, 2): the transposed weight's input features", a)
		}
	})

	t.Run("grouped", func(t *testing.T) {
		p := loraPlan(t, "mobilenet", Options{LoRA: LoRAOptions{Rank: 2}})
		found := false
		for _, c := range p.Changes {
			if c.Pass == "lora" && c.Action == "not adapted" && strings.Contains(c.Reason, "groups") {
				found = true
				if prm := p.Param(c.Target); prm == nil || prm.Trainable() {
					t.Errorf("%s: not adapted, yet trained", c.Target)
				}
			}
		}
		if !found {
			t.Error("no grouped convolution reported as not adapted")
		}
	})

	t.Run("constant weight", func(t *testing.T) {
		// An initializer that is no parameter (torch.export's buffers)
		// read as a weight: a constant, neither adapted nor trained.
		g := loadFixture(t, "cnn")
		g.Values["features.0.weight"].NoGradient = true
		p, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: fixtureSample("cnn"), Batch: 4}, LoRA: LoRAOptions{Rank: 2}})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range p.Adapters {
			if a.Base == "features.0.weight" {
				t.Errorf("a constant weight adapted: %+v", a)
			}
		}
		if len(p.Adapters) != 2 {
			t.Errorf("%d adapters, want the other two layers'", len(p.Adapters))
		}
	})

	for _, tc := range []struct {
		opts LoRAOptions
		want string
	}{
		{LoRAOptions{Rank: -1}, "rank must be positive"},
		{LoRAOptions{Rank: 2, Alpha: -1}, "alpha must be positive"},
		{LoRAOptions{Rank: 2, Target: regexp.MustCompile("nothing")}, "adapts no layer"},
	} {
		g := loadFixture(t, "cnn")
		if _, _, err := AddLoRA(g, tc.opts, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.opts, err, tc.want)
		}
	}
}
