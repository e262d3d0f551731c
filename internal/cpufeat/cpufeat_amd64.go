//go:build amd64 && !purego

package cpufeat

// cpuid executes CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv0 reads the extended control register XCR0 (XGETBV with ECX = 0):
// which register states the operating system saves on a context switch.
// Only call it when CPUID reports OSXSAVE.
func xgetbv0() (eax, edx uint32)

// CPUID bits (Intel SDM vol. 2A, CPUID) and XCR0 state components.
const (
	leaf1ECXPOPCNT  = 1 << 23
	leaf1ECXAES     = 1 << 25
	leaf1ECXOSXSAVE = 1 << 27 // XGETBV usable
	leaf1ECXAVX     = 1 << 28
	leaf7EBXAVX2    = 1 << 5
	leaf7EBXAVX512F = 1 << 16
	leaf7EBXAVX512B = 1 << 30 // AVX512BW
	leaf7ECXVAES    = 1 << 9
	xcr0YMM         = 1<<1 | 1<<2                  // SSE, AVX
	xcr0ZMM         = xcr0YMM | 1<<5 | 1<<6 | 1<<7 // opmask, ZMM_Hi256, Hi16_ZMM
)

// Under an operating system that does not save a register file on a
// context switch, the first instruction on it faults (or loses state), so
// each vector extension counts only when XCR0 says its state is saved.
func init() {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 1 {
		return
	}
	_, _, ecx1, _ := cpuid(1, 0)
	AES = ecx1&leaf1ECXAES != 0
	POPCNT = ecx1&leaf1ECXPOPCNT != 0
	if ecx1&(leaf1ECXOSXSAVE|leaf1ECXAVX) != leaf1ECXOSXSAVE|leaf1ECXAVX {
		return
	}
	xcr0, _ := xgetbv0()
	if xcr0&xcr0YMM != xcr0YMM {
		return
	}
	AVX = true
	if maxLeaf < 7 {
		return
	}
	_, ebx7, ecx7, _ := cpuid(7, 0)
	AVX2 = ebx7&leaf7EBXAVX2 != 0
	AVX512F = ebx7&leaf7EBXAVX512F != 0 && xcr0&xcr0ZMM == xcr0ZMM
	AVX512BW = AVX512F && ebx7&leaf7EBXAVX512B != 0
	VAES = ecx7&leaf7ECXVAES != 0
}
