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

// haveVAES reports whether ctrVAES can run: AVX-512 (F and BW) with the
// ZMM state saved, and VAES.
var haveVAES = cpufeat.AVX512F && cpufeat.AVX512BW && cpufeat.VAES && cpufeat.AES

// ctrVAES writes n blocks (a multiple of 4) of the counter-mode keystream
// to dst: E(step ‖ block+i) for the counters whose first four are given
// as native quadwords ctr = (step, block, step, block+1, …).
//
//go:noescape
func ctrVAES(rk *roundKeys, ctr *[8]uint64, dst *byte, n int)
