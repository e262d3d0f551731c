package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAVXSgemmSerial checks the AVX-512 backend's serial product directly
// (Sgemm sends small and narrow products to OpenBLAS where it is loaded)
// against float64 sums: tiles cut by rows and columns, several k, m and n
// blocks, every transpose, alpha ≠ 1, beta 0, 1 and other, and the
// columns of C past n untouched.
func TestAVXSgemmSerial(t *testing.T) {
	if !haveAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range [][3]int{{1, 1, 1}, {13, 33, 7}, {12, 32, 256}, {25, 70, 300}, {200, 1100, 300}, {64, 256, 576}, {11, 31, 600}, {5, 40, 40}} {
		m, n, k := s[0], s[1], s[2]
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, beta := range []float32{0, 1, 0.5} {
				for _, alpha := range []float32{1, 1.5} {
					lda, ldb := k+3, n+1
					if tr[0] {
						lda = m + 2
					}
					if tr[1] {
						ldb = k + 5
					}
					ra, rb := m, k
					if tr[0] {
						ra = k
					}
					if tr[1] {
						rb = n
					}
					a, b := randSlice(r, ra*lda), randSlice(r, rb*ldb)
					ldc := n + 4
					c0 := randSlice(r, m*ldc)
					c1 := append([]float32(nil), c0...)
					avxSgemmSerial(tr[0], tr[1], m, n, k, alpha, a, lda, b, ldb, beta, c1, ldc)
					for i := 0; i < m; i++ {
						for j := 0; j < ldc; j++ {
							want := float64(c0[i*ldc+j])
							if j < n {
								var s float64
								for p := 0; p < k; p++ {
									ai, bi := i*lda+p, p*ldb+j
									if tr[0] {
										ai = p*lda + i
									}
									if tr[1] {
										bi = j*ldb + p
									}
									av, bv := a[ai], b[bi]
									s += float64(av) * float64(bv)
								}
								want = float64(alpha)*s + float64(beta)*want
							}
							if !(math.Abs(float64(c1[i*ldc+j])-want) <= 1e-3*(1+math.Abs(want))) { // NaN fails too
								t.Fatalf("%v %v alpha %v beta %v: c[%d,%d] = %v, want %v", s, tr, alpha, beta, i, j, c1[i*ldc+j], want)
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkBackends compares OpenBLAS and the AVX-512 backend, one core,
// on a square product and the shapes of resnet18-cifar's convolutions
// (forward, weight gradient, input gradient) and narrow products.
func BenchmarkBackends(b *testing.B) {
	setup()
	if !haveAVX512 || !obLoaded {
		b.Skip("needs AVX-512 and OpenBLAS")
	}
	for _, s := range [][5]int{{256, 16, 2304, 0, 0}, {64, 8, 576, 0, 0}, {48, 96, 96, 0, 0}, {24, 64, 128, 0, 0}, {16, 676, 64, 0, 0}, {32, 275, 256, 0, 0}, {16, 64, 676, 0, 1}, {32, 256, 275, 0, 1}, {256, 275, 32, 1, 0}, {1024, 1024, 1024, 0, 0}, {256, 64, 2304, 0, 0}, {256, 32, 2304, 0, 0}, {128, 256, 1152, 0, 0}, {64, 256, 576, 0, 0}, {256, 2304, 64, 0, 1}, {2304, 64, 256, 1, 0}, {512, 32, 512, 0, 0}} {
		m, n, k := s[0], s[1], s[2]
		tA, tB := s[3] == 1, s[4] == 1
		for _, be := range []string{"ob", "avx"} {
			b.Run(fmt.Sprintf("%dx%dx%d/tA=%v/tB=%v/%s", m, n, k, tA, tB, be), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 1))
				x, y, z := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
				lda, ldb := k, n
				if tA {
					lda = m
				}
				if tB {
					ldb = k
				}
				f := obSgemmSerial
				if be == "avx" {
					f = avxSgemmSerial
				}
				for b.Loop() {
					f(tA, tB, m, n, k, 1, x, lda, y, ldb, 0, z, n)
				}
				b.ReportMetric(float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// TestPackedA checks that a product on an operand packed once by PackA
// equals, bit for bit, the AVX-512 product that packs it itself, for both
// orientations of A, several K blocks and row counts not a multiple of
// the tile, and that PackedSize declines what Sgemm would not run there.
func TestPackedA(t *testing.T) {
	prev, err := SetBackend(AVX512)
	if err != nil {
		t.Skip(err)
	}
	defer SetBackend(prev)
	r := rand.New(rand.NewPCG(2, 2))
	for _, s := range [][3]int{{64, 256, 576}, {30, 400, 100}, {200, 96, 600}} {
		m, n, k := s[0], s[1], s[2]
		size := PackedSize(m, n, k)
		if size == 0 {
			t.Fatalf("%v: PackedSize 0", s)
		}
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}} {
			lda, ldb := k, n
			if tr[0] {
				lda = m
			}
			if tr[1] {
				ldb = k
			}
			a, b := randSlice(r, m*k), randSlice(r, k*n)
			c0, c1 := randSlice(r, m*n), make([]float32, m*n)
			copy(c1, c0)
			avxSgemmSerial(tr[0], tr[1], m, n, k, 1, a, lda, b, ldb, 1, c0, n)
			p := make([]float32, size)
			PackA(tr[0], m, k, 1, a, lda, p)
			SgemmPackedSerial(m, n, k, p, tr[1], b, ldb, 1, c1, n)
			for i := range c0 {
				if math.Float32bits(c0[i]) != math.Float32bits(c1[i]) {
					t.Fatalf("%v %v: c[%d] = %v packed, %v not", s, tr, i, c1[i], c0[i])
				}
			}
		}
	}
	if obLoaded && PackedSize(64, 16, 576) != 0 {
		t.Error("PackedSize packs an Aᵀ product that Sgemm leaves to OpenBLAS")
	}
	if _, err := SetBackend(Go); err == nil && PackedSize(64, 256, 576) != 0 {
		t.Error("PackedSize packs under the Go backend")
	}
}

// TestSgemmIdxB checks SgemmIdxB against Sgemm on the B it reads through
// its index (columns for B, row elements for Bᵀ), split over one to three
// workers, with beta 0 and 1.
func TestSgemmIdxB(t *testing.T) {
	prev, err := SetBackend(AVX512)
	if err != nil {
		t.Skip(err)
	}
	defer SetBackend(prev)
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(3, 3))
	for _, s := range [][3]int{{32, 512, 512}, {13, 70, 40}, {100, 33, 300}} {
		m, n, k := s[0], s[1], s[2]
		for _, transB := range []bool{false, true} {
			// The stored matrix: rows of width ldb, of which idx picks.
			rows, nIdx := k, n
			if transB {
				rows, nIdx = n, k
			}
			ldb := 3*nIdx + 5
			b := randSlice(r, rows*ldb)
			idx := make([]int32, nIdx)
			for j := range idx {
				idx[j] = int32(3*j + j%3)
			}
			// The dense B Sgemm gets.
			bd := make([]float32, rows*nIdx)
			for p := 0; p < rows; p++ {
				for j, o := range idx {
					bd[p*nIdx+j] = b[p*ldb+int(o)]
				}
			}
			a := randSlice(r, m*k)
			for _, threads := range []int{1, 2, 3} {
				SetThreads(threads)
				for _, beta := range []float32{0, 1} {
					c0, c1 := randSlice(r, m*n), make([]float32, m*n)
					copy(c1, c0)
					Sgemm(false, transB, m, n, k, 1, a, k, bd, nIdx, beta, c0, n)
					SgemmIdxB(false, transB, m, n, k, 1, a, k, b, ldb, idx, beta, c1, n)
					for i := range c0 {
						if d := math.Abs(float64(c0[i] - c1[i])); d > 1e-3*(1+math.Abs(float64(c0[i]))) {
							t.Fatalf("%v transB %v threads %d beta %v: c[%d] = %v, Sgemm %v", s, transB, threads, beta, i, c1[i], c0[i])
						}
					}
				}
			}
		}
	}
}
