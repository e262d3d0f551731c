package reference_test

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestAdoptHost checks that reference.Device adopts host memory (like the
// CPU) and reference.Separate copies it into memory of its own, which is
// what makes Separate catch a forgotten Plan.SyncParams.
func TestAdoptHost(t *testing.T) {
	host := []float32{1, 2, 3, 4}
	b, err := runtime.AdoptHost(reference.Device{}, host)
	if err != nil {
		t.Fatal(err)
	}
	if !runtime.SameMemory(host, b.Floats()) {
		t.Fatal("reference.Device copied a host slice it should adopt")
	}
	s, err := runtime.AdoptHost(reference.Separate{}, host)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.SameMemory(host, s.Floats()) {
		t.Fatal("reference.Separate adopted a host slice: its memory must be its own")
	}
	out := make([]float32, len(host))
	if err := (reference.Separate{}).CopyOut(out, s, 0); err != nil {
		t.Fatal(err)
	}
	for i := range host {
		if out[i] != host[i] {
			t.Fatalf("copy %v, want %v", out, host)
		}
	}
	f, err := runtime.AllocFloat64(reference.Separate{}, 5)
	if err != nil || len(f) != 5 {
		t.Fatalf("AllocFloat64 on the reference backend: %d elements, %v", len(f), err)
	}
	if _, err := runtime.GraphOpsOf(reference.Separate{}); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.DPOpsOf(reference.Separate{}); err != nil {
		t.Fatal(err)
	}
}
