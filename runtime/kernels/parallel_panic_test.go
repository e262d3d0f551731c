package kernels

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/workers"
	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// TestWorkerPanicReachesCaller: a panic in a worker goroutine of a parallel
// kernel is raised again in the calling goroutine (where a command's
// recover reports it as a bug) instead of ending the process, and the
// workers' pool keeps working afterwards.
func TestWorkerPanicReachesCaller(t *testing.T) {
	old := blas.Threads()
	blas.SetThreads(4)
	defer blas.SetThreads(old)
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"parallelFor", func() {
			parallelFor(1000, 1, func(lo, hi int) {
				if lo == 0 { // the first range runs on a worker goroutine
					panic("index out of range in a worker")
				}
			})
		}},
		{"parallelWorkers", func() {
			parallelWorkers(4, 1000, func(w, lo, hi int) {
				if w == 2 {
					panic("index out of range in a worker")
				}
			})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := func() (r any) {
				defer func() { r = recover() }()
				c.run()
				return nil
			}()
			wp, ok := got.(*workers.Panic)
			if !ok || wp.Value != "index out of range in a worker" || len(wp.Stack) == 0 {
				t.Fatalf("recovered %#v, want a *workers.Panic with the worker's value and stack", got)
			}
			parallelFor(1000, 1, func(lo, hi int) {})
			parallelWorkers(4, 1000, func(w, lo, hi int) {})
		})
	}
}
