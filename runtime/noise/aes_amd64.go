//go:build amd64 && !purego

package noise

// haveAESNI reports whether encryptBlocksAESNI can run: the CPU has the
// AES instructions (CPUID leaf 1 ECX bit 25).
var haveAESNI = func() bool {
	_, _, ecx1, _ := cpuid(1, 0)
	return ecx1&(1<<25) != 0
}()

// encryptBlocksAESNI encrypts the n blocks at bs in place under the round
// keys rk with AESENC, eight blocks interleaved.
//
//go:noescape
func encryptBlocksAESNI(rk *roundKeys, bs *block, n int)
