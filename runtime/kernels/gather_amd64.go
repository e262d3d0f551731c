//go:build amd64 && !purego

package kernels

// haveGatherAVX512 reports whether gatherAVX512 may run: the CPU has
// AVX-512F and the operating system saves the opmask and ZMM registers.
var haveGatherAVX512 = cpuHasAVX512()

// gatherAVX512 writes dst[j] = src[m[j]] for the first len(m) &^ 15
// indices, which must all lie in src; len(dst) ≥ len(m).
//
//go:noescape
func gatherAVX512(dst, src []float32, m []int32)

// cpuHasAVX512 reports whether the CPU has AVX-512F and the operating
// system saves the state it needs (XCR0: SSE, AVX, opmask, ZMM_Hi256,
// Hi16_ZMM).
func cpuHasAVX512() bool {
	if !cpuHasAVX() {
		return false
	}
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return false
	}
	const (
		avx512f = 1 << 16 // leaf 7 EBX
		zmmMask = 1<<1 | 1<<2 | 1<<5 | 1<<6 | 1<<7
	)
	if xcr0, _ := xgetbv0(); xcr0&zmmMask != zmmMask {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&avx512f != 0
}

// addToAVX adds src into dst for the first len(src) &^ 15 elements; only
// call it when haveAdamAVX.
//
//go:noescape
func addToAVX(dst, src []float32)
