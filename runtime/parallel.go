package runtime

import (
	"sync"

	"github.com/dpfinetune/dpfinetune/internal/workers"
	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

// The runtime's own kernels (pooling, normalization, softmax) split work
// over kernels.Workers() goroutines, the same count the kernels and SGEMM
// use, so the two never oversubscribe the cores. The workers are
// persistent and the work function is compiled once per node, so a
// parallel region allocates nothing.
var pool struct {
	mu      sync.Mutex    // one parallel region at a time
	wg      workers.Group // a worker's panic is raised again in parFor's caller
	tasks   chan task
	started int
}

type task struct {
	fn     func(lo, hi int)
	lo, hi int
}

func worker() {
	for t := range pool.tasks {
		run(t)
	}
}

func run(t task) {
	defer pool.wg.Done()
	t.fn(t.lo, t.hi)
}

// parFor calls fn on a static split of [0, n) into contiguous ranges of
// at least grain items, one per worker; the last range runs in the calling
// goroutine. fn must not call parFor.
func parFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := kernels.Workers()
	if grain < 1 {
		grain = 1
	}
	if m := n / grain; m < w {
		w = m
	}
	if w <= 1 {
		fn(0, n)
		return
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.tasks == nil {
		pool.tasks = make(chan task, 64)
	}
	for pool.started < w-1 {
		go worker()
		pool.started++
	}
	pool.wg.Add(w - 1)
	for i := 0; i < w-1; i++ {
		pool.tasks <- task{fn, i * n / w, (i + 1) * n / w}
	}
	fn((w-1)*n/w, n)
	pool.wg.Wait()
}

// grainFor returns a grain (in items) so that each parallel range holds
// at least about 16K elements of work, items of size per elements each.
func grainFor(per int) int { return max(1, (1<<14)/max(per, 1)) }
