package kernels

import (
	"sync"

	"github.com/dpfinetune/dpfinetune/internal/workers"
	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// Workers returns the number of goroutines kernels split work over; it
// follows blas.Threads (set with blas.SetThreads).
func Workers() int { return blas.Threads() }

// parallelFor calls fn on contiguous sub-ranges of [0, n) covering it, on up
// to Workers() goroutines, giving each at least grain items. The split is
// static so that per-range results (and any later combination of them) are
// reproducible. The last range runs in the calling goroutine.
func parallelFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := Workers()
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
	g := groupPool.Get().(*group)
	for i := 0; i < w-1; i++ {
		spawn(task{fn: fn, lo: i * n / w, hi: (i + 1) * n / w, g: g})
	}
	fn((w-1)*n/w, n)
	g.Wait()
	groupPool.Put(g)
}

// parallelWorkers runs fn(w, lo, hi) for w in [0, workers) with [lo, hi) a
// static split of [0, n). Worker 0 runs in the calling goroutine.
func parallelWorkers(workers, n int, fn func(w, lo, hi int)) {
	if workers > n {
		workers = n
	}
	if workers <= 1 {
		if n > 0 {
			fn(0, 0, n)
		}
		return
	}
	g := groupPool.Get().(*group)
	for i := 1; i < workers; i++ {
		spawn(task{wfn: fn, w: i, lo: i * n / workers, hi: (i + 1) * n / workers, g: g})
	}
	fn(0, 0, n/workers)
	g.Wait()
	groupPool.Put(g)
}

// task is one range of a parallelFor (fn) or parallelWorkers (wfn) call.
type task struct {
	fn        func(lo, hi int)
	wfn       func(w, lo, hi int)
	w, lo, hi int
	g         *group
}

// A group is one parallel call's workers (workers.Group: a panic in a
// worker is raised again in the caller once all are done, where the
// command's recover reports it as a bug instead of the process ending
// with Go's crash output).
type group = workers.Group

// Tasks reach their goroutines through a channel, and WaitGroups are
// recycled, so that a parallel call allocates nothing itself: a goroutine
// started on a closure over its range, and a WaitGroup escaping to it,
// cost two allocations per call and goroutine, which the steady-state
// allocation tests count. Each spawn starts one goroutine for one task;
// which task it takes does not matter, so a full channel only makes the
// sender wait for goroutines that are already started.
var (
	tasks     = make(chan task, 64)
	groupPool = sync.Pool{New: func() any { return new(group) }}
)

func spawn(t task) {
	t.g.Add(1)
	go runTask()
	tasks <- t
}

func runTask() {
	t := <-tasks
	defer t.g.Done()
	if t.fn != nil {
		t.fn(t.lo, t.hi)
	} else {
		t.wfn(t.w, t.lo, t.hi)
	}
}

// elementwiseGrain is the smallest slice worth handing to another goroutine
// for cheap per-element work.
const elementwiseGrain = 1 << 15

// scratchPool recycles the private accumulators of parallel reductions, so
// that steady-state calls do not allocate.
var scratchPool = sync.Pool{New: func() any { return new([]float32) }}

func getScratch(n int) *[]float32 {
	p := scratchPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// reduceParallel runs rowFn over rows [0, nrows) of a reduction into t
// (nt elements, zeroed here). When the rows are many compared with the
// target, workers accumulate into private copies that are added to t in
// worker order afterwards (deterministic for a given worker count);
// otherwise it runs serially.
func reduceParallel(nrows, rowLen, nt int, t []float32, rowFn func(lo, hi int, dst []float32)) {
	clear(t[:nt])
	w := Workers()
	work := nrows * rowLen
	if w > 1 && work >= 2*elementwiseGrain && nt*8 <= work {
		w = min(w, work/elementwiseGrain)
	} else {
		w = 1
	}
	if w <= 1 || nrows < w {
		rowFn(0, nrows, t)
		return
	}
	bufs := getScratch((w - 1) * nt)
	priv := *bufs
	clear(priv)
	parallelWorkers(w, nrows, func(k, lo, hi int) {
		dst := t
		if k > 0 {
			dst = priv[(k-1)*nt : k*nt]
		}
		rowFn(lo, hi, dst)
	})
	for k := 1; k < w; k++ {
		for i, v := range priv[(k-1)*nt : k*nt] {
			t[i] += v
		}
	}
	scratchPool.Put(bufs)
}
