package runtime

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/workers"
	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// TestParForWorkerPanic: a panic on one of the runtime's persistent
// workers reaches parFor's caller as a *workers.Panic, and the workers go
// on serving later regions.
func TestParForWorkerPanic(t *testing.T) {
	old := blas.Threads()
	blas.SetThreads(4)
	defer blas.SetThreads(old)
	got := func() (r any) {
		defer func() { r = recover() }()
		parFor(1000, 1, func(lo, hi int) {
			if lo == 0 { // the first range runs on a worker
				panic("bad index in a worker")
			}
		})
		return nil
	}()
	if p, ok := got.(*workers.Panic); !ok || p.Value != "bad index in a worker" {
		t.Fatalf("recovered %#v, want a *workers.Panic", got)
	}
	var hits [4]int
	parFor(4, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			hits[i]++
		}
	})
	if hits != [4]int{1, 1, 1, 1} {
		t.Errorf("after the panic parFor covered %v", hits)
	}
}
