package reference_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/noise"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestNoiseOps: the reference backend's noise, written from the
// specification in runtime/noise/doc.go, is the CPU's bit for bit, for
// several keys, steps, offsets (element indices far apart, the top of the
// 2⁴⁸ range, starts inside a counter block) and lengths, through a Noise
// made by either device's PrepareNoise; enough elements that slow draws
// of the wedge and the tail both occur.
func TestNoiseOps(t *testing.T) {
	ref, cpu := reference.Device{}, runtime.CPU{}
	r := rand.New(rand.NewPCG(11, 12))
	for ci, c := range []struct {
		step, offset uint64
		n            int
		std          float64
		post         float32
	}{
		{0, 0, 1, 1, 1},
		{1, 3, 5, 0.5, 0.25},
		{7, 1 << 20, 40000, 2.3, 1. / 3},
		{1<<63 + 5, 123457, 30001, 1e-3, 1},
		{3, 1<<48 - 1001, 1001, 0.8, 0.01},
	} {
		t.Run(fmt.Sprint(ci), func(t *testing.T) {
			var key runtime.NoiseKey
			for i := range key {
				key[i] = byte(r.Uint32())
			}
			x := dpRand(r, c.n)
			want := dpClone(x)
			cpu.AddGaussianNoise(want, cpu.PrepareNoise(key, c.step), c.offset, c.std, c.post)
			got := dpClone(x)
			ref.AddGaussianNoise(got, ref.PrepareNoise(key, c.step), c.offset, c.std, c.post)
			dpSameBits(t, "noise", got, want)
			got = dpClone(x)
			ref.AddGaussianNoise(got, cpu.PrepareNoise(key, c.step), c.offset, c.std, c.post)
			dpSameBits(t, "noise through the CPU's Noise", got, want)
			// Drawn in two pieces, split inside a counter block.
			if c.n > 10 {
				got = dpClone(x)
				n := ref.PrepareNoise(key, c.step)
				ref.AddGaussianNoise(got[:6], n, c.offset, c.std, c.post)
				ref.AddGaussianNoise(got[6:], n, c.offset+6, c.std, c.post)
				dpSameBits(t, "noise in two pieces", got, want)
			}
		})
	}
}

// TestNoiseMatchesPythonReference holds the reference backend's noise to
// the values scripts/noise/reference.py (another reimplementation of the
// specification) wrote in runtime/noise/testdata/reference_py.json: its
// first 4096 values one by one, all 1 000 003 by their SHA-256.
func TestNoiseMatchesPythonReference(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "noise", "testdata", "reference_py.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		N         int      `json:"n"`
		SHA256    string   `json:"sha256"`
		FirstBits []string `json:"first_bits"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	if golden.N == 0 || len(golden.FirstBits) == 0 {
		t.Fatal("reference_py.json: no values")
	}
	var key runtime.NoiseKey
	binary.LittleEndian.PutUint64(key[:], 42)
	x := make([]float32, golden.N)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	d := reference.Device{}
	d.AddGaussianNoise(x, d.PrepareNoise(key, 9), 5, 0.7, 1.0/3)
	for i, hx := range golden.FirstBits {
		if got := fmt.Sprintf("%08x", math.Float32bits(x[i])); got != hx {
			t.Fatalf("element %d: bits %s, Python %s", i, got, hx)
		}
	}
	h := sha256.New()
	for _, v := range x {
		h.Write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)))
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != golden.SHA256 {
		t.Fatalf("noise hash %s, Python %s", got, golden.SHA256)
	}
}

// TestNoiseTables: the ziggurat tables the reference backend computes
// from doc.go's construction are runtime/noise's (K, W and F) bit for
// bit, so that the draws agree on every layer, not only on those the
// other tests happen to reach.
func TestNoiseTables(t *testing.T) {
	k, w, f := noise.Tables()
	rk, rw, rf := reference.ZigTables()
	for i := range k {
		if rk[i] != k[i] || math.Float32bits(rw[i]) != math.Float32bits(w[i]) || math.Float32bits(rf[i]) != math.Float32bits(f[i]) {
			t.Errorf("layer %d: K, W, F = %d, %v, %v; runtime/noise's %d, %v, %v", i, rk[i], rw[i], rf[i], k[i], w[i], f[i])
		}
	}
}
