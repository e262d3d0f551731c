package runtime

import (
	"math"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

// TestHookBuffers checks Options.HookBuffers on fixtures whose arenas
// reuse memory (a CNN; a ViT with its attention probabilities recomputed,
// whose items have two intervals): every hooked node asked for a buffer
// gets Batch()·k floats (HookBuffer), none where it asked for none; a
// pattern each hook writes into its buffer is intact after Backward, so
// no later buffer of the backward pass shares its memory; the pass's
// gradients are the plan's without hook buffers bit for bit, so no buffer
// overwrote an activation or gradient; the buffers take memory the
// backward pass has freed (the live peak grows by less than their sum
// where the hooks run after the peak);
// and Compile refuses them with KeepActivations.
func TestHookBuffers(t *testing.T) {
	for _, c := range []struct {
		name string
		// freed: the buffers' hooks run after the backward's peak (not so
		// on the small CNN, whose peak is at its second convolution's).
		freed bool
	}{{"cnn", false}, {"resnet_train", true}, {"vit", true}} {
		name := c.name
		t.Run(name, func(t *testing.T) {
			base := Options{Probabilities: ProbabilitiesRecompute}
			ref, _, labels := compileFixture(t, name, &base)
			step(t, ref, labels, nil, nil)
			// k per sample: a different size per node of the first half
			// (whose hooks run late in the backward, as an early layer's
			// per-sample gradients), none for the first and the rest.
			k := map[string]int{}
			hooked := ref.HookedNodes()
			if len(hooked) < 4 {
				t.Fatalf("%d hooked nodes: the fixture does not exercise the test", len(hooked))
			}
			withBuf := 0
			for i, n := range hooked {
				k[n.Outputs[0].Name] = 0
				if i > 0 && i < len(hooked)/2 {
					k[n.Outputs[0].Name] = 37 * i
					withBuf++
				}
			}
			opts := base
			opts.HookBuffers = func(n *graph.Node) int { return k[n.Outputs[0].Name] }
			p, _, _ := compileFixture(t, name, &opts)
			N := p.Batch()
			var sum int64
			for _, n := range hooked {
				out := n.Outputs[0].Name
				buf := p.HookBuffer(out)
				if want := N * k[out]; len(buf) != want {
					t.Fatalf("HookBuffer(%q): %d floats, want %d", out, len(buf), want)
				}
				sum += 4 * int64(len(buf))
			}
			if p.HookBuffer("no such output") != nil {
				t.Error("HookBuffer of an unknown output is not nil")
			}
			pattern := func(node, j int) float32 { return float32(node) + float32(j%1000)/1024 }
			ord := map[string]int{}
			for i, n := range hooked {
				ord[n.Outputs[0].Name] = i
			}
			seen := 0
			hook := func(ev *HookEvent) {
				out := ev.Node.Outputs[0].Name
				buf := p.HookBuffer(out)
				for j := range buf {
					buf[j] = pattern(ord[out], j)
				}
				seen++
			}
			step(t, p, labels, nil, &BackwardOptions{Hook: hook})
			if seen != len(hooked) {
				t.Fatalf("%d hook events, %d hooked nodes", seen, len(hooked))
			}
			for _, n := range hooked {
				out := n.Outputs[0].Name
				for j, v := range p.HookBuffer(out) {
					if v != pattern(ord[out], j) {
						t.Fatalf("hook buffer of %q[%d] = %v after Backward, the hook wrote %v", out, j, v, pattern(ord[out], j))
					}
				}
			}
			for _, pn := range ref.Params() {
				want, got := ref.Grad(pn), p.Grad(pn)
				for j := range want {
					if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
						t.Fatalf("gradient %s[%d] = %v with hook buffers, %v without", pn, j, got[j], want[j])
					}
				}
			}
			if grow := p.LiveBytes() - ref.LiveBytes(); c.freed && grow >= sum {
				t.Errorf("live peak %d → %d bytes with %d bytes of hook buffers: want them partly in freed memory", ref.LiveBytes(), p.LiveBytes(), sum)
			}
			if ref.ArenaBuffers()+withBuf != p.ArenaBuffers() {
				t.Errorf("%d arena buffers with %d hook buffers, %d without", p.ArenaBuffers(), withBuf, ref.ArenaBuffers())
			}
		})
	}
	g, gold := loadFixture(t, "cnn")
	for _, o := range []Options{{KeepActivations: true}, {ForwardOnly: true}} {
		o.HookBuffers = func(*graph.Node) int { return 1 }
		if _, err := CompileForBatch(g, gold["input"].Shape[0], nil, &o); err == nil || !strings.Contains(err.Error(), "HookBuffers") {
			t.Errorf("HookBuffers with %+v: %v, want refused", o, err)
		}
	}
}
