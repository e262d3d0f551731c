package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchCLI runs the bench command on the smallest zoo model: two
// modes, a logical batch of two physical batches and a memory cap, and
// checks the report's structure and invariants (not timings).
func TestBenchCLI(t *testing.T) {
	stdout, stderr, code := run(t, "bench", "--model", "zoo:cnn-fmnist", "--batch", "8", "--logical-batch", "16",
		"--steps", "1", "--rounds", "3", "--modes", "nondp,bk", "--max-memory", "64MiB", "--json")
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

	for _, tc := range []struct {
		args []string
		want string
	}{
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
