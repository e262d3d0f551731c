package workers

import (
	"strings"
	"testing"
)

func TestWaitRaisesWorkerPanic(t *testing.T) {
	var g Group
	got := func() (r any) {
		defer func() { r = recover() }()
		for i := 0; i < 4; i++ {
			g.Add(1)
			go func() {
				defer g.Done()
				if i == 2 {
					var s []int
					_ = s[i] // index out of range in a worker
				}
			}()
		}
		g.Wait()
		return nil
	}()
	p, ok := got.(*Panic)
	if !ok || !strings.Contains(p.Error(), "index out of range") || len(p.Stack) == 0 {
		t.Fatalf("recovered %#v, want a *Panic with the worker's error and stack", got)
	}
	// The Group is clear and reusable after the panic.
	n := 0
	g.Add(1)
	go func() { defer g.Done(); n = 1 }()
	g.Wait()
	if n != 1 {
		t.Error("the reused group did not wait for its worker")
	}
}
