//go:build amd64 && !purego

package kernels

import "github.com/dpfinetune/dpfinetune/internal/cpufeat"

// haveSIMD reports whether the SSE2 kernels of simd_amd64.s are built in.
const haveSIMD = true

// haveAVX2 reports whether the CPU runs their eight-lane forms
// (geluErfAVX2, geluErfBackwardAVX2, expAVX2).
var haveAVX2 = cpufeat.AVX2

// geluErfAVX2, geluErfBackwardAVX2 and expAVX2 are geluErfSSE,
// geluErfBackwardSSE and expSSE on the first len(x) &^ 7 elements, eight
// lanes at a time, with their bits.
//
//go:noescape
func geluErfAVX2(x, y []float32)

//go:noescape
func geluErfBackwardAVX2(x, dy, dx []float32)

//go:noescape
func expAVX2(x, y []float32)

// geluErfSSE writes GeluErf of the first len(x) &^ 3 elements of x to y.
//
//go:noescape
func geluErfSSE(x, y []float32)

// geluErfBackwardSSE writes GeluErfBackward of the first len(x) &^ 3
// elements to dx.
//
//go:noescape
func geluErfBackwardSSE(x, dy, dx []float32)

// expSSE writes e^x of the first len(x) &^ 3 elements of x (arguments
// above 88 clamped) to y.
//
//go:noescape
func expSSE(x, y []float32)

// reluSSE writes Relu of the first len(x) &^ 3 elements of x to y.
//
//go:noescape
func reluSSE(x, y []float32)

// reluGradSSE writes the Relu gradient of the first len(dy) &^ 3
// elements (from the output y) to dx.
//
//go:noescape
func reluGradSSE(y, dy, dx []float32)

// normScaleSSE, normAffineSSE, normScaleVecSSE, normAffineVecSSE,
// normBackSSE and normBackVecSSE are the normalizations' elementwise
// passes (rowApply, rowApplyVec, rowBack) on the first len(x) &^ 3 elements.
//
//go:noescape
func normScaleSSE(x, y []float32, m, iv, sc float32)

//go:noescape
func normAffineSSE(x, y []float32, m, iv, sc, b float32)

//go:noescape
func normScaleVecSSE(x, scale, y []float32, m, iv float32)

//go:noescape
func normAffineVecSSE(x, scale, bias, y []float32, m, iv float32)

//go:noescape
func normBackSSE(x, g, dx []float32, m, iv, sc, mg, mgx float32)

//go:noescape
func normBackVecSSE(x, g, scale, dx []float32, m, iv, mg, mgx float32)
