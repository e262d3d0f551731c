//go:build !amd64 || purego

package noise

// haveAESNI is false: encryptBlocks uses crypto/aes.
const haveAESNI = false

// encryptBlocksAESNI is never called here (haveAESNI is false).
func encryptBlocksAESNI(rk *roundKeys, bs *block, n int) {
	panic("noise: no AES-NI code on this platform")
}

// haveVAES reports whether ctrVAES can run: never here.
var haveVAES = false

func ctrVAES(rk *roundKeys, ctr *[8]uint64, dst *byte, n int) { panic("noise: no VAES") }
