package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchCLI runs the bench command on the smallest zoo model: two
// modes, a logical batch of two physical batches and a memory cap, and
// checks the report's structure and invariants (not timings), and the
// CPU profiles of the timed steps, a file a mode and round.
func TestBenchCLI(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	stdout, stderr, code := run(t, "bench", "--model", "zoo:cnn-fmnist", "--batch", "8", "--logical-batch", "16",
		"--steps", "1", "--rounds", "3", "--modes", "nondp,bk", "--max-memory", "64MiB", "--json", "--cpuprofile", prof)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v in %s", err, stdout)
	}
	if rep.Batch != 8 || rep.Logical != 16 || rep.Rounds != 3 || len(rep.Rows) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for i, r := range rep.Rows {
		if want := []string{"nondp", "bk"}[i]; r.Mode != want {
			t.Errorf("row %d mode %q, want %q", i, r.Mode, want)
		}
		if !(r.StepMS > 0) || !(r.SamplesPerSec > 0) || r.HeapBytes <= 0 || r.EstPeakBytes <= 0 {
			t.Errorf("%s: non-positive measurement %+v", r.Mode, r)
		}
		if len(r.RoundsMS) != 3 || r.StepMS != median(r.RoundsMS) {
			t.Errorf("%s: step %v ms, rounds %v: want the median of 3 rounds", r.Mode, r.StepMS, r.RoundsMS)
		}
		if r.MaxBatch <= 0 || !(r.MaxBatchSPS > 0) {
			t.Errorf("%s: no largest batch under 64 MiB: %+v", r.Mode, r)
		}
	}
	if r := rep.Rows[0]; r.TimeRatio != 1 || r.MemRatio != 1 {
		t.Errorf("nondp ratios %v, %v, want 1", r.TimeRatio, r.MemRatio)
	}
	// 16 samples per step: samples/s is 16 over the step time.
	if r := rep.Rows[1]; abs(r.SamplesPerSec*r.StepMS/1000-16) > 1e-6*16 {
		t.Errorf("bk: %v samples/s at %v ms per step of 16", r.SamplesPerSec, r.StepMS)
	}

	isProfile := func(path string) bool {
		b, err := os.ReadFile(path)
		return err == nil && len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b // gzipped protobuf
	}
	for _, suffix := range []string{".nondp", ".bk", ".nondp.r2", ".bk.r2", ".nondp.r3", ".bk.r3"} {
		if !isProfile(prof + suffix) {
			t.Errorf("no CPU profile %s", filepath.Base(prof+suffix))
		}
	}
	if _, err := os.Stat(prof); err == nil {
		t.Errorf("%s written with two modes", filepath.Base(prof))
	}
	one := filepath.Join(t.TempDir(), "bk.prof")
	if _, stderr, code := run(t, "bench", "--model", "zoo:cnn-fmnist", "--batch", "8", "--steps", "1", "--modes", "bk", "--cpuprofile", one); code != 0 || !isProfile(one) {
		t.Errorf("one mode, one round: exit %d (%s), no profile %s", code, stderr, one)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "zoo:cnn-fmnist", "--batch", "8", "--steps", "1", "--modes", "nondp", "--cpuprofile", filepath.Join(t.TempDir(), "none", "p")}, "--cpuprofile"},
		{[]string{"--model", "zoo:cnn-fmnist", "--batch", "8", "--logical-batch", "12"}, "multiple of --batch"},
		{[]string{"--model", "zoo:cnn-fmnist", "--batch", "0"}, "must be positive"},
		{[]string{"--model", "zoo:cnn-fmnist", "--rounds", "0"}, "must be positive"},
		{[]string{"--model", "zoo:cnn-fmnist", "--priority", "fast"}, "--priority must be memory or speed"},
		{[]string{"--model", "zoo:cnn-fmnist", "--modes", "nondp,fast"}, "fast"},
		{[]string{"--batch", "8"}, "--model is required"},
	} {
		_, stderr, code := run(t, append([]string{"bench"}, tc.args...)...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("bench %v: exit %d, stderr %q, want an error containing %q", tc.args, code, stderr, tc.want)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestBenchViews: bench --augment-multiplicity times each sample as its
// views: recorded in the report, and the mode's estimated peak grows with
// the views' activations.
func TestBenchViews(t *testing.T) {
	est := map[string]int64{}
	for _, views := range []string{"1", "3"} {
		stdout, stderr, code := run(t, "bench", "--model", "zoo:cnn-fmnist", "--batch", "8", "--steps", "1", "--modes", "bk", "--augment-multiplicity", views, "--json")
		if code != 0 {
			t.Fatalf("%s views: exit %d: %s", views, code, stderr)
		}
		var rep benchReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v in %s", err, stdout)
		}
		if want := map[string]int64{"1": 0, "3": 3}[views]; rep.Views != want || len(rep.Rows) != 1 || !(rep.Rows[0].StepMS > 0) {
			t.Fatalf("%s views: report %+v", views, rep)
		}
		est[views] = rep.Rows[0].EstPeakBytes
	}
	if est["3"] <= est["1"] {
		t.Errorf("estimated peak %d bytes with three views, %d with one", est["3"], est["1"])
	}
	if _, stderr, code := run(t, "bench", "--model", "zoo:cnn-fmnist", "--augment-multiplicity", "0"); code != 2 || !strings.Contains(stderr, "--augment-multiplicity") {
		t.Errorf("--augment-multiplicity 0: exit %d, %s", code, stderr)
	}
}

// TestBenchLoRAAndEMA: bench --lora trains the adapters and the head
// (fewer trained scalars: a lower estimated peak, no gradient or Adam
// state for the frozen weights), --ema keeps the parameters' average (one
// copy of the trained parameters more in the estimate), both said in the
// report; bad values are refused.
func TestBenchLoRAAndEMA(t *testing.T) {
	est := map[string]int64{}
	for _, tc := range []struct {
		name string
		args []string
	}{{"plain", nil}, {"ema", []string{"--ema", "0.99"}}, {"lora", []string{"--lora", "2"}}} {
		stdout, stderr, code := run(t, append([]string{"bench", "--model", "zoo:cnn-fmnist", "--batch", "8", "--steps", "1", "--modes", "bk", "--json"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.name, code, stderr)
		}
		var rep benchReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v in %s", err, stdout)
		}
		if len(rep.Rows) != 1 || !(rep.Rows[0].StepMS > 0) || (rep.EMA == 0.99) != (tc.name == "ema") || (rep.LoRA == 2) != (tc.name == "lora") {
			t.Fatalf("%s: report %+v", tc.name, rep)
		}
		est[tc.name] = rep.Rows[0].EstPeakBytes
	}
	// The CNN's 26,010 parameters in float32: the average's copy.
	if d := est["ema"] - est["plain"]; d != 4*26010 {
		t.Errorf("the average adds %d bytes to the estimate, want %d", d, 4*26010)
	}
	if est["lora"] >= est["plain"] {
		t.Errorf("estimated peak %d bytes with LoRA, %d training every parameter", est["lora"], est["plain"])
	}
	for _, bad := range [][]string{{"--ema", "1"}, {"--ema", "-0.5"}, {"--lora", "-1"}} {
		if _, stderr, code := run(t, append([]string{"bench", "--model", "zoo:cnn-fmnist"}, bad...)...); code != 2 || !strings.Contains(stderr, bad[0]) {
			t.Errorf("%v: exit %d, %s", bad, code, stderr)
		}
	}
}
