package runtime

import (
	"testing"
	"unsafe"
)

// TestAdoptHostCPU checks that the CPU adopts host memory as it is (no
// copy: the plan's initializers cost nothing twice) and that AllocFloat64
// gives zeroed, 8-byte-aligned float64 storage of the right length.
func TestAdoptHostCPU(t *testing.T) {
	host := []float32{1, 2, 3}
	b, err := AdoptHost(CPU{}, host)
	if err != nil {
		t.Fatal(err)
	}
	if !SameMemory(host, b.Floats()) {
		t.Fatal("the CPU copied a host slice it should adopt")
	}
	b.Floats()[1] = 7
	if host[1] != 7 {
		t.Fatal("a write through the adopted buffer did not reach the host slice")
	}
	if SameMemory(host, append([]float32(nil), host...)) || SameMemory(host, host[:2]) {
		t.Fatal("SameMemory calls a copy or a shorter slice the same memory")
	}
	for _, n := range []int{0, 1, 3, 1000} {
		f, err := AllocFloat64(CPU{}, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(f) != n {
			t.Fatalf("AllocFloat64(%d) has %d elements", n, len(f))
		}
		for _, v := range f {
			if v != 0 {
				t.Fatalf("AllocFloat64(%d) is not zeroed", n)
			}
		}
		if n > 0 && uintptr(unsafe.Pointer(&f[0]))%8 != 0 {
			t.Fatalf("AllocFloat64(%d) is not 8-byte aligned", n)
		}
	}
	if _, err := AllocFloat64(CPU{}, -1); err == nil {
		t.Fatal("a negative float64 allocation was accepted")
	}
}

// TestPlanAdoptsInitializersOnCPU checks that on the CPU the plan's
// parameters and float constants are the graph's initializers themselves
// (adopted, not copied: a model's memory is not doubled), so that
// SyncParams and LoadParams have nothing to copy.
func TestPlanAdoptsInitializersOnCPU(t *testing.T) {
	p, _, labels := compileFixture(t, "cnn", nil)
	if len(p.Params()) == 0 || len(p.consts) == 0 {
		t.Fatal("the fixture has no parameters")
	}
	for _, name := range p.Params() {
		data, _ := p.Param(name)
		init := p.Graph().Values[name].Const.F32
		if !SameMemory(data, init) {
			t.Fatalf("parameter %q: the plan's buffer is not the initializer's storage", name)
		}
	}
	for _, c := range p.consts {
		if c.v.Const != nil && c.v.Const.F32 != nil && !SameMemory(c.data, c.v.Const.F32) {
			t.Fatalf("constant %q was copied", c.v.Name)
		}
	}
	name := p.Params()[0]
	data, _ := p.Param(name)
	before := data[0]
	step(t, p, labels, nil, nil)
	data[0] = before + 1 // an update in place is the initializer's
	if err := p.SyncParams(); err != nil {
		t.Fatal(err)
	}
	if err := p.LoadParams(); err != nil {
		t.Fatal(err)
	}
	if got := p.Graph().Values[name].Const.F32[0]; got != before+1 {
		t.Fatalf("initializer %q reads %v after an update to %v", name, got, before+1)
	}
}
