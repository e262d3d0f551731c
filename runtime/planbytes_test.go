package runtime

import (
	"errors"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// TestPlanOnlyMeasuresWithoutAllocating: a PlanOnly plan reports the
// arena, workspace and batch bytes of the plan compiled with the same
// options and buffers (so that a memory estimate may measure it in place
// of the real one), allocates none of them, so that a memory limit below
// them does not refuse it while one below a single value still does, and
// refuses to run.
func TestPlanOnlyMeasuresWithoutAllocating(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"cnn", Options{}},
		{"cnn", Options{KeepHooked: true}},
		{"vgg", Options{KeepActivations: true}},
		{"resnet_eval", Options{NoParamGrads: true}},
		{"vit", Options{}},
		{"vit", Options{KeepHooked: true}},
		{"beit", Options{KeepActivations: true}},
	} {
		g, gold := loadFixture(t, c.name)
		n := gold["input"].Shape[0]
		real, err := CompileForBatch(g, n, nil, &c.opts)
		if err != nil {
			t.Fatal(err)
		}
		po := c.opts
		po.PlanOnly = true
		po.MaxMemory = 1
		if _, err := CompileForBatch(g, n, nil, &po); err == nil || !strings.Contains(err.Error(), "output") {
			t.Errorf("%s: a limit of one byte: %v, want the first value refused", c.name, err)
		}
		po.MaxMemory = real.ArenaBytes() / 2 // under the plan, over any one value
		only, err := CompileForBatch(g, n, nil, &po)
		if err != nil {
			t.Fatalf("%s %+v: %v", c.name, po, err)
		}
		if only.ArenaBytes() != real.ArenaBytes() || only.LiveBytes() != real.LiveBytes() || only.ScratchBytes() != real.ScratchBytes() || only.BatchBytes() != real.BatchBytes() {
			t.Errorf("%s %+v: plan-only arena %d, live %d, scratch %d, batch %d; compiled %d, %d, %d, %d", c.name, c.opts,
				only.ArenaBytes(), only.LiveBytes(), only.ScratchBytes(), only.BatchBytes(), real.ArenaBytes(), real.LiveBytes(), real.ScratchBytes(), real.BatchBytes())
		}
		if real.ScratchBytes() != 4*int64(len(real.Scratch())) || real.BatchBytes() <= real.ArenaBytes()+real.ScratchBytes() {
			t.Errorf("%s: scratch %d bytes of %d floats, batch bytes %d over arena %d", c.name, real.ScratchBytes(), len(real.Scratch()), real.BatchBytes(), real.ArenaBytes())
		}
		if only.arena != nil || only.Scratch() != nil || only.probs != nil {
			t.Errorf("%s: a plan-only plan allocated its arena, workspace or loss head", c.name)
		}
		for _, name := range only.Params() {
			if only.Grad(name) != nil {
				t.Errorf("%s: a plan-only plan allocated the gradient of %s", c.name, name)
			}
		}
		x, _ := only.Input(0)
		if err := only.SetInput(0, make([]float32, gold["input"].Len())); !errors.Is(err, errPlanOnly) || x != nil {
			t.Errorf("%s: SetInput on a plan-only plan: %v", c.name, err)
		}
		if err := only.Forward(); !errors.Is(err, errPlanOnly) {
			t.Errorf("%s: Forward on a plan-only plan: %v", c.name, err)
		}
		if err := only.Loss(make([]int64, n), make([]float32, n)); !errors.Is(err, errPlanOnly) {
			t.Errorf("%s: Loss on a plan-only plan: %v", c.name, err)
		}
		if err := only.Backward(nil, nil); err == nil {
			t.Errorf("%s: Backward on a plan-only plan ran", c.name)
		}
	}
}

// TestIndexMapBound: a Slice over a tensor of more than 2³¹−1 elements
// (8 GiB of float32, which a large device admits) is refused at compile
// time, naming the node, rather than built with int32 offsets that
// overflow; one just under the bound compiles (PlanOnly: nothing is
// allocated either way).
func TestIndexMapBound(t *testing.T) {
	for _, c := range []struct {
		cols int64
		ok   bool
	}{{1<<15 - 1, true}, {1 << 15, false}} {
		b := newBuilder(0, 13)
		b.ints("starts", []int64{1}, 1)
		b.ints("ends", []int64{3}, 1)
		b.ints("axes", []int64{1}, 1)
		b.node("Slice", []string{"x", "starts", "ends", "axes"}, "y")
		g := b.build(t, "x", []int64{1 << 16, c.cols}, "y")
		_, err := CompileForBatch(g, 1<<16, nil, &Options{ForwardOnly: true, PlanOnly: true, MaxMemory: 1 << 40})
		switch {
		case c.ok && err != nil:
			t.Errorf("%d columns: %v", c.cols, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "its index map addresses at most 2147483647")):
			t.Errorf("%d columns: %v, want the Slice refused", c.cols, err)
		}
	}
}

// TestPlaceItems: on random timelines of buffers (some live twice, as a
// recomputed value is) the placement never gives two buffers live at a
// common step overlapping memory, never needs more than largest-first
// alone (the first order it tries) and never less than the live bound;
// and on some timelines another order does better than largest-first.
func TestPlaceItems(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	better := 0
	for trial := range 300 {
		const T = 24
		items := make([]item, 4+rng.IntN(30))
		for i := range items {
			s := rng.IntN(T)
			items[i] = item{size: 16 * (1 + rng.IntN(8)), start: s, end: s + rng.IntN(T-s), start2: -1, end2: -1}
			if e := items[i].end; rng.IntN(6) == 0 && e+2 < T {
				items[i].start2 = e + 2
				items[i].end2 = e + 2 + rng.IntN(T-e-2)
			}
		}
		order := make([]int, len(items))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return items[order[a]].size > items[order[b]].size })
		first := placeInOrder(items, order, make([]int, len(items)))

		p := &Plan{opts: Options{PlanOnly: true}, liveElems: livePeak(items, T)}
		if err := p.placeItems(items); err != nil {
			t.Fatal(err)
		}
		for i := range items {
			a := &items[i]
			if a.off < 0 || a.off+a.size > p.arenaElems {
				t.Fatalf("trial %d: item %d at %d+%d outside the arena of %d", trial, i, a.off, a.size, p.arenaElems)
			}
			for j := range i {
				if b := &items[j]; a.overlaps(b) && a.off < b.off+b.size && b.off < a.off+a.size {
					t.Fatalf("trial %d: items %d and %d live together share memory", trial, i, j)
				}
			}
		}
		if p.arenaElems > first || p.arenaElems < p.liveElems {
			t.Fatalf("trial %d: arena %d, largest-first %d, live bound %d", trial, p.arenaElems, first, p.liveElems)
		}
		if p.arenaElems < first {
			better++
		}
	}
	t.Logf("%d of 300 timelines placed in less than largest-first's arena", better)
	if better == 0 {
		t.Error("no timeline placed better than largest-first")
	}
}
