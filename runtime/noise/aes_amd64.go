//go:build amd64 && !purego

package noise

import "github.com/dpfinetune/dpfinetune/internal/cpufeat"

// haveAESNI reports whether encryptBlocksAESNI can run: the CPU has the
// AES instructions (CPUID leaf 1 ECX bit 25).
var haveAESNI = cpufeat.AES

// encryptBlocksAESNI encrypts the n blocks at bs in place under the round
// keys rk with AESENC, eight blocks interleaved.
//
//go:noescape
func encryptBlocksAESNI(rk *roundKeys, bs *block, n int)
