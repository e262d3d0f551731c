//go:build amd64 && !purego

package kernels

// haveAdamSSE reports whether the SSE2 Adam kernels (adam_amd64.s) are
// built in.
const haveAdamSSE = true

// adamSSE is adamScalar with L2 = 0 on four lanes at a time; len(p) must
// be a multiple of 4 and g, m, v at least as long. k holds the AdamCoeffs
// in field order.
//
//go:noescape
func adamSSE(p, g, m, v []float32, k *[12]float32)

// adamL2SSE is adamSSE with the L2 term.
//
//go:noescape
func adamL2SSE(p, g, m, v []float32, k *[12]float32)

// haveAdamAVX reports whether adamAVX and adamL2AVX may run: the CPU has
// AVX and the operating system saves the YMM registers.
var haveAdamAVX = cpuHasAVX()

// adamAVX is adamSSE on eight lanes at a time (YMM registers), bit for bit
// the same result; len(p) must be a multiple of 8. Only call it when
// haveAdamAVX.
//
//go:noescape
func adamAVX(p, g, m, v []float32, k *[12]float32)

// adamL2AVX is adamAVX with the L2 term.
//
//go:noescape
func adamL2AVX(p, g, m, v []float32, k *[12]float32)

// cpuid executes CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv0 reads the extended control register XCR0 (XGETBV with ECX = 0):
// which register states the operating system saves on a context switch.
// Only call it when CPUID reports OSXSAVE.
func xgetbv0() (eax, edx uint32)

// cpuHasAVX reports whether the CPU has AVX and the operating system saves
// the YMM registers (under an OS that does not, the first VEX instruction
// on YMM would fault). Checked here, as runtime/noise does, rather than
// through golang.org/x/sys/cpu to keep the module free of dependencies.
func cpuHasAVX() bool {
	const (
		osxsave = 1 << 27 // leaf 1 ECX: XGETBV usable
		avx     = 1 << 28 // leaf 1 ECX
		xmmYmm  = 1<<1 | 1<<2
	)
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 1 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	if ecx1&(osxsave|avx) != osxsave|avx {
		return false
	}
	xcr0, _ := xgetbv0()
	return xcr0&xmmYmm == xmmYmm
}
