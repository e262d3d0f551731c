//go:build linux && (amd64 || arm64)

package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPickAlgo: the heuristics' first fit, or the measurement's fastest
// fit traded for a smaller workspace within dnnFindSlack, and for one
// within dnnSmallWorkspace unless the larger is dnnLargeGain faster.
func TestPickAlgo(t *testing.T) {
	const maxWork = 1 << 30
	fit := func(algo int32, ms float32, mem uint64) dnnAlgoPerf {
		return dnnAlgoPerf{algo: algo, time: ms, memory: mem, determinism: dnnDeterministic, mathType: dnnFMAMath}
	}
	nondet := fit(7, 0.5, 0)
	nondet.determinism = 0
	tf32 := fit(6, 0.6, 0)
	tf32.mathType = dnnTensorOpMath
	failed := fit(5, 0.7, 0)
	failed.status = 3
	huge := fit(4, 0.8, maxWork+1)
	deflt := fit(3, 1.0, 64<<20)
	deflt.mathType = dnnDefaultMath
	large := uint64(dnnSmallWorkspace + 1)
	for _, c := range []struct {
		name     string
		perf     []dnnAlgoPerf
		want     int32 // math type
		measured bool
		algo     int32 // −1: none
		any      bool  // nondeterministic algorithms allowed
		maxWork  uint64
	}{
		{"none", nil, dnnFMAMath, true, -1, false, maxWork},
		{"skips the unfit", []dnnAlgoPerf{nondet, tf32, failed, huge, deflt, fit(2, 1.2, 0)}, dnnFMAMath, true, 3, false, maxWork},
		{"tf32 asked", []dnnAlgoPerf{nondet, tf32, deflt}, dnnTensorOpMath, true, 6, false, maxWork},
		{"heuristics: the first fit", []dnnAlgoPerf{fit(1, 0, 8<<20), fit(2, 0, 0)}, dnnFMAMath, false, 1, false, maxWork},
		{"heuristics: a large workspace within the bound", []dnnAlgoPerf{fit(1, 0, large), fit(2, 0, 0)}, dnnFMAMath, false, 1, false, maxWork},
		{"heuristics: the bound", []dnnAlgoPerf{fit(1, 0, large), fit(2, 0, 0)}, dnnFMAMath, false, 2, false, dnnSmallWorkspace},
		{"measured: smaller workspace within the slack", []dnnAlgoPerf{fit(1, 1.0, 8<<20), fit(2, 1.04, 1<<20), fit(0, 1.05, 0)}, dnnFMAMath, true, 0, false, maxWork},
		{"measured: not beyond the slack", []dnnAlgoPerf{fit(1, 1.0, 8<<20), fit(2, 1.2, 0)}, dnnFMAMath, true, 1, false, maxWork},
		{"measured: the slack from the fastest", []dnnAlgoPerf{fit(1, 1.0, 8<<20), fit(2, 1.05, 4<<20), fit(0, 1.08, 0)}, dnnFMAMath, true, 2, false, maxWork},
		{"measured: only fits", []dnnAlgoPerf{nondet, fit(1, 1.0, 8<<20)}, dnnFMAMath, true, 1, false, maxWork},
		{"measured: a large workspace that pays", []dnnAlgoPerf{fit(5, 1.0, large), fit(1, 1.3, 8<<20), fit(0, 4.0, 0)}, dnnFMAMath, true, 5, false, maxWork},
		{"measured: a large workspace that does not pay", []dnnAlgoPerf{fit(5, 1.0, large), fit(1, 1.2, 8<<20), fit(0, 1.3, 0)}, dnnFMAMath, true, 1, false, maxWork},
		{"measured: the small choice's own slack", []dnnAlgoPerf{fit(5, 1.0, large), fit(1, 1.2, 8<<20), fit(0, 1.24, 0)}, dnnFMAMath, true, 0, false, maxWork},
		{"measured: nothing small", []dnnAlgoPerf{fit(5, 1.0, large), fit(4, 1.1, 2*large)}, dnnFMAMath, true, 5, false, maxWork},
		{"measured: beyond the bound", []dnnAlgoPerf{fit(5, 1.0, large), fit(1, 4.0, 0)}, dnnFMAMath, true, 1, false, dnnSmallWorkspace},
		{"measured: no workspace allowed", []dnnAlgoPerf{fit(1, 1.0, 8<<20)}, dnnFMAMath, true, -1, false, 0},
		{"nondeterministic allowed", []dnnAlgoPerf{nondet, fit(1, 1.0, 8<<20)}, dnnFMAMath, true, 7, true, maxWork},
		{"nondeterministic allowed, heuristics", []dnnAlgoPerf{fit(1, 0, 8<<20), nondet}, dnnFMAMath, false, 1, true, maxWork},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := pickAlgo(c.perf, c.want, c.measured, !c.any, c.maxWork)
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

// TestDNNWorkspaceCap: a sixteenth of the device's memory up to 4 GiB, or
// EnvCUDNNWorkspace's MiB; anything else is named.
func TestDNNWorkspaceCap(t *testing.T) {
	for _, c := range []struct {
		env   string
		total int64
		want  uint64
		bad   bool
	}{
		{"", 80 << 30, 4 << 30, false},
		{"", 16 << 30, 1 << 30, false},
		{"", 4 << 30, 256 << 20, false},
		{"", 0, 0, false},
		{"1024", 80 << 30, 1 << 30, false},
		{"0", 80 << 30, 0, false},
		{"-1", 80 << 30, 0, true},
		{"1.5", 80 << 30, 0, true},
		{"lots", 80 << 30, 0, true},
	} {
		t.Setenv(EnvCUDNNWorkspace, c.env)
		got, err := dnnWorkspaceCap(c.total)
		switch {
		case c.bad && (err == nil || !strings.Contains(err.Error(), EnvCUDNNWorkspace)):
			t.Errorf("%s=%q: %d, %v; want an error naming the variable", EnvCUDNNWorkspace, c.env, got, err)
		case !c.bad && (err != nil || got != c.want):
			t.Errorf("%s=%q on %d bytes: %d, %v; want %d", EnvCUDNNWorkspace, c.env, c.total, got, err, c.want)
		}
	}
}

// TestDNNChoices: the kept choices round-trip, merge with another run's,
// survive a damaged file, and refuse hand-edited nonsense.
func TestDNNChoices(t *testing.T) {
	dir := t.TempDir()
	props := Properties{Name: "GPU", Major: 9, DriverVersion: 13000}
	lib := &cudnn{version: 91900, lib: "libcudnn.so.9", maxWork: 1 << 30}
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
	c.put("greedy", dnnChoice{Algo: 1, Workspace: lib.maxWork + 1})
	for _, k := range []string{"bad", "greedy"} {
		if ch, ok := openDNNChoices(dir, props, lib).get(k); ok {
			t.Errorf("%s: took %v", k, ch)
		}
	}
	// Another workspace bound: a file of its own, measured afresh.
	if ch, ok := openDNNChoices(dir, props, &cudnn{version: lib.version, lib: lib.lib, maxWork: 4 << 30}).get(key); ok {
		t.Errorf("a larger workspace bound took %v, chosen under the smaller", ch)
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
