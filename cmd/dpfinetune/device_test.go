package main

import (
	"strings"
	"testing"
)

// TestDeviceFlag: every command that computes takes --device; an unknown
// or unavailable device is a usage error (exit 2) before any other work —
// here before the required flags are even looked at.
func TestDeviceFlag(t *testing.T) {
	for _, cmd := range []string{"train", "audit", "eval", "predict", "norms", "bench", "plan", "calibrate", "compare"} {
		for dev, want := range map[string]string{
			"cuda":   `--device: device "cuda" is not available`,
			"cuda:1": `--device: device "cuda:1" is not available`,
			"cuda:x": `--device: device "cuda:x": want cuda:N, N a device's ordinal from 0`,
			"cpu:0":  `--device: device "cpu:0": cpu has no ordinals (use --device cpu)`,
			"tpu":    `--device: unknown device "tpu" (this build has: cpu, cuda)`,
		} {
			_, e, code := run(t, cmd, "--device", dev)
			if code != 2 || !strings.Contains(e, want) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
				t.Errorf("%s --device %s: exit %d, stderr %q; want 2 and one line containing %q", cmd, dev, code, e, want)
			}
		}
	}
	_, e, code := run(t, "norms", "--device", "cpu", "--tf32")
	if want := "--tf32: device cpu has no TF32 products (use --device cuda)"; code != 2 || !strings.Contains(e, want) {
		t.Errorf("norms --device cpu --tf32: exit %d, stderr %q; want 2 and %q", code, e, want)
	}
	out, e, code := run(t, "plan", "--device", "cpu", "--model", "../../testdata/models/cnn.onnx", "--input-shape", "1,28,28", "--batch", "4")
	if code != 0 || !strings.Contains(out, "device:      cpu") {
		t.Errorf("plan --device cpu: exit %d, %s\n%s", code, e, out)
	}
}
