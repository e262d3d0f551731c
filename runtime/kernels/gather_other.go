//go:build !amd64 || purego

package kernels

// haveGatherAVX512 reports whether the AVX-512 gather may run: never here.
var haveGatherAVX512 = false

func gatherAVX512(dst, src []float32, m []int32) { panic("kernels: no AVX-512 gather") }

func scatterAddAVX512(dst, src []float32, m []int32) { panic("kernels: no AVX-512 scatter") }

func addToAVX(dst, src []float32) { panic("kernels: no AVX add") }

func permRowsAVX512(dst []float32, dstStep int, src []float32, srcStep int, rows int, idx *[16]int32, masks uint64) {
	panic("kernels: no AVX-512 permute")
}
