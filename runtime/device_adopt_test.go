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
