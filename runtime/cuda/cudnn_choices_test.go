//go:build linux && (amd64 || arm64)

package cuda

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPickAlgo: the heuristics' first fit, or the measurement's fastest
// fit traded for a smaller workspace within dnnFindSlack.
func TestPickAlgo(t *testing.T) {
	fit := func(algo int32, ms float32, mem uint64) dnnAlgoPerf {
		return dnnAlgoPerf{algo: algo, time: ms, memory: mem, determinism: dnnDeterministic, mathType: dnnFMAMath}
	}
	nondet := fit(7, 0.5, 0)
	nondet.determinism = 0
	tf32 := fit(6, 0.6, 0)
	tf32.mathType = dnnTensorOpMath
	failed := fit(5, 0.7, 0)
	failed.status = 3
	huge := fit(4, 0.8, dnnMaxWorkspace+1)
	deflt := fit(3, 1.0, 64<<20)
	deflt.mathType = dnnDefaultMath
	for _, c := range []struct {
		name     string
		perf     []dnnAlgoPerf
		want     int32 // math type
		measured bool
		algo     int32 // −1: none
		any      bool  // nondeterministic algorithms allowed
	}{
		{"none", nil, dnnFMAMath, true, -1, false},
		{"skips the unfit", []dnnAlgoPerf{nondet, tf32, failed, huge, deflt, fit(2, 1.2, 0)}, dnnFMAMath, true, 3, false},
		{"tf32 asked", []dnnAlgoPerf{nondet, tf32, deflt}, dnnTensorOpMath, true, 6, false},
		{"heuristics: the first fit", []dnnAlgoPerf{fit(1, 0, 8<<20), fit(2, 0, 0)}, dnnFMAMath, false, 1, false},
		{"measured: smaller workspace within the slack", []dnnAlgoPerf{fit(1, 1.0, 8<<20), fit(2, 1.04, 1<<20), fit(0, 1.05, 0)}, dnnFMAMath, true, 0, false},
		{"measured: not beyond the slack", []dnnAlgoPerf{fit(1, 1.0, 8<<20), fit(2, 1.2, 0)}, dnnFMAMath, true, 1, false},
		{"measured: the slack from the fastest", []dnnAlgoPerf{fit(1, 1.0, 8<<20), fit(2, 1.05, 4<<20), fit(0, 1.08, 0)}, dnnFMAMath, true, 2, false},
		{"measured: only fits", []dnnAlgoPerf{nondet, fit(1, 1.0, 8<<20)}, dnnFMAMath, true, 1, false},
		{"nondeterministic allowed", []dnnAlgoPerf{nondet, fit(1, 1.0, 8<<20)}, dnnFMAMath, true, 7, true},
		{"nondeterministic allowed, heuristics", []dnnAlgoPerf{fit(1, 0, 8<<20), nondet}, dnnFMAMath, false, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := pickAlgo(c.perf, c.want, c.measured, !c.any)
			got := int32(-1)
			if i >= 0 {
				got = c.perf[i].algo
			}
			if got != c.algo {
				t.Errorf("algorithm %d, want %d", got, c.algo)
			}
		})
	}
}

// TestDNNChoices: the kept choices round-trip, merge with another run's,
// survive a damaged file, and refuse hand-edited nonsense.
func TestDNNChoices(t *testing.T) {
	dir := t.TempDir()
	props := Properties{Name: "GPU", Major: 9, DriverVersion: 13000}
	lib := &cudnn{version: 91900, lib: "libcudnn.so.9"}
	key := dnnChoiceKey(dnnKey{n: 2, c: 3, m: 4, group: 1, rank: 2, in: [3]int{8, 8}, k: [3]int{3, 3}, out: [3]int{6, 6}, st: [3]int{1, 1}, dil: [3]int{1, 1}}, ConvForward)
	if want := "forward n=2 c=3 m=4 group=1 in=[8 8] kernel=[3 3] out=[6 6] strides=[1 1] dilations=[1 1] pads=[0 0] tf32=false"; key != want {
		t.Errorf("key %q, want %q", key, want)
	}
	a := openDNNChoices(dir, props, lib)
	if _, ok := a.get(key); ok {
		t.Fatal("a choice before any was kept")
	}
	b := openDNNChoices(dir, props, lib) // another run, opened at the same time
	a.put(key, dnnChoice{Algo: 6, Workspace: 1 << 20, MS: 0.5})
	b.put("other", dnnChoice{Algo: 2})
	c := openDNNChoices(dir, props, lib)
	if ch, ok := c.get(key); !ok || ch.Algo != 6 || ch.Workspace != 1<<20 {
		t.Errorf("kept %v %v, want algorithm 6 with 1 MiB", ch, ok)
	}
	if ch, ok := c.get("other"); !ok || ch.Algo != 2 {
		t.Errorf("the other run's choice: %v %v", ch, ok)
	}
	if ch, ok := openDNNChoices(dir, Properties{Name: "GPU", Major: 8, DriverVersion: 13000}, lib).get(key); ok {
		t.Errorf("another GPU model took %v", ch)
	}
	c.put("bad", dnnChoice{Algo: 9})
	c.put("greedy", dnnChoice{Algo: 1, Workspace: dnnMaxWorkspace + 1})
	for _, k := range []string{"bad", "greedy"} {
		if ch, ok := openDNNChoices(dir, props, lib).get(k); ok {
			t.Errorf("%s: took %v", k, ch)
		}
	}
	// A damaged file: measured afresh and rewritten.
	if err := os.WriteFile(c.path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := openDNNChoices(dir, props, lib)
	if _, ok := d.get(key); ok {
		t.Error("a choice from a damaged file")
	}
	d.put(key, dnnChoice{Algo: 1})
	if ch, ok := openDNNChoices(dir, props, lib).get(key); !ok || ch.Algo != 1 {
		t.Errorf("after the damaged file: %v %v", ch, ok)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 1 {
		t.Errorf("files %q, want the one GPU model's that kept a choice (no temporary left)", files)
	}
	// No cache directory: kept in memory only.
	e := openDNNChoices("", props, lib)
	e.put(key, dnnChoice{Algo: 1})
	if ch, ok := e.get(key); !ok || ch.Algo != 1 {
		t.Errorf("in memory: %v %v", ch, ok)
	}
}
