//go:build amd64 && !purego

package noise

// cpuid executes CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv0 reads the extended control register XCR0 (XGETBV with ECX = 0):
// which register states the operating system saves on a context switch.
// Only call it when CPUID reports OSXSAVE.
func xgetbv0() (eax, edx uint32)

// cpuHasAVX2 reports whether the CPU has AVX2 and the operating system
// saves the YMM registers (a CPU with AVX2 under an OS that does not would
// fault, or lose the upper halves, on the first VEX instruction). Checked
// here rather than through golang.org/x/sys/cpu to keep the module free of
// dependencies.
func cpuHasAVX2() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	const (
		osxsave = 1 << 27 // leaf 1 ECX: XGETBV usable
		avx     = 1 << 28 // leaf 1 ECX
		xmmYmm  = 1<<1 | 1<<2
		avx2    = 1 << 5 // leaf 7 EBX
	)
	_, _, ecx1, _ := cpuid(1, 0)
	if ecx1&(osxsave|avx) != osxsave|avx {
		return false
	}
	if xcr0, _ := xgetbv0(); xcr0&xmmYmm != xmmYmm {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&avx2 != 0
}

// cpuHasPOPCNT reports whether the CPU has POPCNT (CPUID leaf 1 ECX bit
// 23; every CPU with AVX2 has it, but nothing promises so).
func cpuHasPOPCNT() bool {
	_, _, ecx1, _ := cpuid(1, 0)
	return ecx1&(1<<23) != 0
}
