// Package workers is the WaitGroup of dpfinetune's parallel loops, with one
// difference: a panic in a worker goroutine is caught there and raised
// again in the goroutine that waits, once every worker is done.
//
// Without it a panic in a worker — an out-of-range index reached through a
// malformed model, say — ends the process with Go's crash output, past the
// recover in the command that started the work; with it the command reports
// a bug with the worker's stack and its documented exit status.
package workers

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// Group waits for a set of worker goroutines. Each worker calls Add(1)
// before it starts and defers Done; Wait waits for all of them. The zero
// Group is ready to use, and a Group may be reused after Wait returns.
type Group struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	panic *Panic
}

// Panic is the value Wait panics with when a worker panicked: the first
// worker panic's value and that worker's stack.
type Panic struct {
	Value any
	Stack []byte
}

// Error makes a Panic print as the worker's panic with its stack.
func (p *Panic) Error() string {
	return fmt.Sprintf("worker goroutine panicked: %v\n%s", p.Value, p.Stack)
}

// Add adds n workers.
func (g *Group) Add(n int) { g.wg.Add(n) }

// Done marks a worker finished; it must be deferred by the worker itself
// (defer g.Done()), so that it can recover the worker's panic.
func (g *Group) Done() {
	if r := recover(); r != nil {
		g.mu.Lock()
		if g.panic == nil {
			g.panic = &Panic{Value: r, Stack: debug.Stack()}
		}
		g.mu.Unlock()
	}
	g.wg.Done()
}

// Wait waits for every worker, then, if one panicked, clears the Group and
// panics with a *Panic in the calling goroutine.
func (g *Group) Wait() {
	g.wg.Wait()
	if p := g.panic; p != nil {
		g.panic = nil
		panic(p)
	}
}
