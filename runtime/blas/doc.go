// Package blas owns single-precision matrix multiplication (SGEMM) for the
// CPU runtime: row-major Sgemm, its batched/strided variant, the choice of
// backend, and the thread policy.
//
// Three backends exist. On CPUs with AVX-512 the default is this
// package's own: GotoBLAS blocking around a 12×32 micro-kernel in
// assembly (gemm_avx512.go), 1.2–1.7× OpenBLAS 0.3.21 on AMD Zen 5, whose
// Skylake-X kernel reaches less than half of that core's peak. Products
// it would run slower (avxTakes: very narrow ones, and small ones whose
// Aᵀ it would pack in Go) still go to OpenBLAS.
// OpenBLAS is loaded at run time with dlopen (through
// github.com/ebitengine/purego), so a plain `go build` with CGO_ENABLED=0
// still works and the binary runs without the library; when the library is
// absent, or DPFINETUNE_BLAS=go is set, a cache-blocked pure-Go kernel is
// used instead. DPFINETUNE_BLAS=openblas or =avx512 picks one of the others
// (BenchmarkBackends compares them). Backend reports which one is active.
//
// Thread policy: all parallelism comes from goroutines. OpenBLAS is pinned to
// one thread and Sgemm splits large products into row or column bands that
// run as concurrent single-threaded calls, one per worker (Threads, default
// GOMAXPROCS). That keeps OpenBLAS's own pool from spinning against Go code
// that parallelizes around it, makes every entry point safe for concurrent
// use, and lets callers that already run one goroutine per core call
// SgemmSerial to avoid nested splitting. Measured on 2 cores, the split
// single-threaded calls match OpenBLAS's own two-thread mode.
package blas
