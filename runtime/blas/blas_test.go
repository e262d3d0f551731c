package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
)

// forEachBackend runs f once per available backend.
func forEachBackend(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, be := range Available() {
		t.Run(be, func(t *testing.T) {
			prev, err := SetBackend(be)
			if err != nil {
				t.Fatal(err)
			}
			defer SetBackend(prev)
			f(t)
		})
	}
	if haveAVX512 && obLoaded {
		// Where OpenBLAS is absent the AVX-512 backend runs every
		// product itself, the ones avxTakes leaves to OpenBLAS included.
		t.Run("avx512-without-openblas", func(t *testing.T) {
			prev, _ := SetBackend(AVX512)
			obLoaded = false
			defer func() { obLoaded = true; SetBackend(prev) }()
			f(t)
		})
	}
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// refGemm computes the product in float64 and a bound on its rounding error
// (Σ|a||b| per entry).
func refGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) (want, bound []float64) {
	want = make([]float64, m*n)
	bound = make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, abs float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
				abs += math.Abs(float64(av) * float64(bv))
			}
			w := float64(alpha) * s
			abs *= math.Abs(float64(alpha))
			if beta != 0 {
				w += float64(beta) * float64(c[i*ldc+j])
				abs += math.Abs(float64(beta) * float64(c[i*ldc+j]))
			}
			want[i*n+j] = w
			bound[i*n+j] = abs
		}
	}
	return want, bound
}

func checkProduct(t *testing.T, name string, m, n int, got []float32, ldc int, want, bound []float64, k int) {
	t.Helper()
	tol := 4 * float64(k+2) * 6e-8
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			g := float64(got[i*ldc+j])
			if d := math.Abs(g - want[i*n+j]); d > tol*bound[i*n+j]+1e-30 || math.IsNaN(g) {
				t.Fatalf("%s: C[%d,%d] = %g, want %g (|diff| %g, bound %g)", name, i, j, g, want[i*n+j], d, tol*bound[i*n+j])
			}
		}
	}
}

func TestSgemm(t *testing.T) {
	dims := [][3]int{
		{1, 1, 1}, {2, 3, 4}, {3, 5, 7}, {5, 1, 9}, {1, 17, 3}, {17, 33, 65},
		{67, 130, 31}, {130, 67, 257}, {31, 600, 20}, {64, 64, 64}, {129, 131, 300},
		{7, 9, 0},
	}
	forEachBackend(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, d := range dims {
			m, n, k := d[0], d[1], d[2]
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-2, 0.25}, {0, 3}} {
						alpha, beta := ab[0], ab[1]
						ar, ac := m, k
						if ta {
							ar, ac = k, m
						}
						br, bc := k, n
						if tb {
							br, bc = n, k
						}
						// Row strides wider than the rows, to catch any
						// code that assumes packed matrices.
						lda, ldb, ldc := ac+3, bc+1, n+2
						a := randSlice(r, max(0, (ar-1)*lda+ac))
						b := randSlice(r, max(0, (br-1)*ldb+bc))
						c := randSlice(r, (m-1)*ldc+n)
						if beta == 0 {
							for i := range c {
								c[i] = float32(math.NaN())
							}
						}
						want, bound := refGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
						Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
						name := fmt.Sprintf("m=%d n=%d k=%d ta=%v tb=%v alpha=%v beta=%v", m, n, k, ta, tb, alpha, beta)
						checkProduct(t, name, m, n, c, ldc, want, bound, k)
					}
				}
			}
		}
	})
}

func TestSgemmSerialAndThreads(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		m, n, k := 150, 170, 90
		a, b := randSlice(r, m*k), randSlice(r, k*n)
		want, bound := refGemm(false, false, m, n, k, 1, a, k, b, n, 0, nil, n)
		for _, th := range []int{1, 2, 3, 5} {
			prev := SetThreads(th)
			c := make([]float32, m*n)
			Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
			SetThreads(prev)
			checkProduct(t, fmt.Sprintf("threads=%d", th), m, n, c, n, want, bound, k)
		}
		c := make([]float32, m*n)
		SgemmSerial(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		checkProduct(t, "serial", m, n, c, n, want, bound, k)
	})
}

func TestSgemmStrided(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, d := range [][4]int{{3, 4, 5, 7}, {40, 50, 60, 5}, {130, 140, 150, 3}} {
			m, n, k, batch := d[0], d[1], d[2], d[3]
			for _, shareA := range []bool{false, true} {
				strideA := m * k
				if shareA {
					strideA = 0
				}
				a := randSlice(r, max(m*k, (batch-1)*strideA+m*k))
				b := randSlice(r, batch*n*k)
				c := randSlice(r, batch*m*n)
				c0 := append([]float32(nil), c...)
				// Bᵀ stored n×k per batch entry.
				SgemmStrided(false, true, m, n, k, 1.5, a, k, strideA, b, k, n*k, 0.5, c, n, m*n, batch)
				for i := 0; i < batch; i++ {
					want, bound := refGemm(false, true, m, n, k, 1.5, a[i*strideA:], k, b[i*n*k:], k, 0.5, c0[i*m*n:], n)
					checkProduct(t, fmt.Sprintf("%v shareA=%v batch %d", d, shareA, i), m, n, c[i*m*n:], n, want, bound, k)
				}
			}
		}
	})
}

func TestSgemmPanics(t *testing.T) {
	cases := map[string]func(){
		"short a": func() {
			Sgemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		},
		"short c": func() {
			Sgemm(false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
		},
		"small lda": func() {
			Sgemm(false, false, 2, 2, 3, 1, make([]float32, 9), 2, make([]float32, 9), 2, 0, make([]float32, 4), 2)
		},
		"neg dim": func() { Sgemm(false, false, -1, 2, 2, 1, nil, 2, nil, 2, 0, nil, 2) },
		"strideC 0": func() {
			SgemmStrided(false, false, 1, 1, 1, 1, make([]float32, 1), 1, 0, make([]float32, 1), 1, 0, 0, make([]float32, 1), 1, 0, 2)
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func TestBackendReport(t *testing.T) {
	t.Logf("backend %s, available %v, threads %d, openblas error: %v", Backend(), Available(), Threads(), OpenBLASError())
	if _, err := SetBackend("nonsense"); err == nil {
		t.Fatal("SetBackend accepted an unknown name")
	}
}

// TestEnvForcesGo re-runs the test binary with DPFINETUNE_BLAS=go and checks
// that the pure-Go backend is selected (the choice is made once per
// process, so it needs a fresh one).
func TestEnvForcesGo(t *testing.T) {
	if os.Getenv("DPFINETUNE_BLAS_TEST_CHILD") == "1" {
		if b := Backend(); b != Go {
			fmt.Println("child backend:", b)
			os.Exit(3)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvForcesGo$")
	cmd.Env = append(os.Environ(), EnvBackend+"=go", "DPFINETUNE_BLAS_TEST_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child with %s=go: %v\n%s", EnvBackend, err, out)
	}
}
