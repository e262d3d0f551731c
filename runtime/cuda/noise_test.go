//go:build linux && (amd64 || arm64)

package cuda

import (
	"math"
	"math/rand"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/noise"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestNoiseMatchesCPU is the key test of the noise: the device's draws are
// runtime.CPU's (and noise.Reference's, and the reference backend's) bit
// for bit, for several keys and
// steps, offsets inside and across AES blocks, sizes that start and end
// mid-block, host and device operands, and enough elements that the slow
// path's wedge and tail draws occur.
func TestNoiseMatchesCPU(t *testing.T) {
	d := emuDevice(t)
	cpu := runtime.CPU{}
	keys := []noise.Key{{}, {0: 1, 15: 0xff}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
	cases := []struct {
		n      int
		offset uint64
	}{
		{0, 0}, {1, 0}, {1, 3}, {2, 2}, {3, 1}, {4, 0}, {5, 7}, {257, 1}, {1000, 4096 + 2},
		{1<<21 + 1, 3}, {9, 1<<40 + 1}, {6, 1<<48 - 6},
	}
	tails := 0
	for ki, key := range keys {
		for _, step := range []uint64{0, 1, 1<<63 + 12345} {
			n := cpu.PrepareNoise(key, step)
			dn := d.PrepareNoise(key, step)
			for _, c := range cases {
				if c.n > 5000 && (ki > 0 || step != 1) {
					continue // one key and step draw the large case
				}
				r := rand.New(rand.NewSource(int64(c.n) + int64(step) + int64(ki)))
				x := randFloats(r, c.n)
				std, post := 1.3, float32(0.25)
				if c.n > 5000 {
					clear(x)
					std, post = 1, 1
				}
				want := append([]float32(nil), x...)
				cpu.AddGaussianNoise(want, n, c.offset, std, post)
				ref := append([]float32(nil), x...)
				noise.Reference(ref, key, step, c.offset, std, post)
				if err := sameBits(widen32(ref), widen32(want)); err != nil {
					t.Fatalf("key %d step %d n=%d offset %d: CPU against noise.Reference: %v", ki, step, c.n, c.offset, err)
				}
				if c.n < 5000 { // the reference backend draws ~100 ns an element
					rb := append([]float32(nil), x...)
					reference.Device{}.AddGaussianNoise(rb, reference.Device{}.PrepareNoise(key, step), c.offset, std, post)
					if err := sameBits(widen32(rb), widen32(want)); err != nil {
						t.Fatalf("key %d step %d n=%d offset %d: reference backend against the CPU: %v", ki, step, c.n, c.offset, err)
					}
				}
				for _, dev := range []bool{false, true} {
					p := &placer{bufs: map[uintptr]runtime.Buffer{}}
					if dev {
						p.dev = d
					}
					got := place(p, x)
					d.AddGaussianNoise(got, dn, c.offset, std, post)
					if err := sameBits(widen32(fetch(p, got)), widen32(want)); err != nil {
						t.Fatalf("key %d step %d n=%d offset %d device operands=%v: %v", ki, step, c.n, c.offset, dev, err)
					}
					for _, b := range p.bufs {
						d.Free(b)
					}
				}
				if c.n > 5000 {
					for _, v := range want {
						if !(math.Abs(float64(v)) <= 3.6541528853610088) { // NaN fails too
							tails++
						}
					}
				}
			}
		}
	}
	t.Logf("%d draws beyond r", tails)
	if tails == 0 {
		t.Error("no draw reached the tail beyond r: the test does not cover the slow path's tail")
	}
	// A Noise the device did not prepare (another key) draws the same.
	x := make([]float32, 10)
	want := append([]float32(nil), x...)
	cpu.AddGaussianNoise(want, cpu.PrepareNoise(keys[2], 5), 0, 1, 1)
	d.AddGaussianNoise(x, runtime.Noise{Key: keys[2], Step: 5}, 0, 1, 1)
	if err := sameBits(widen32(x), widen32(want)); err != nil {
		t.Errorf("unprepared noise: %v", err)
	}
}

func TestNoiseRangePanics(t *testing.T) {
	d := emuDevice(t)
	defer func() {
		if recover() == nil {
			t.Error("a draw beyond 2^48 elements did not panic")
		}
	}()
	d.AddGaussianNoise(make([]float32, 4), d.PrepareNoise(noise.Key{}, 0), 1<<48-2, 1, 1)
}

// TestAESSbox checks the S-box computed from its definition against
// FIPS-197's first and last entries and a known value.
func TestAESSbox(t *testing.T) {
	s := aesSbox()
	for in, want := range map[byte]byte{0x00: 0x63, 0x01: 0x7c, 0x53: 0xed, 0xff: 0x16} {
		if s[in] != want {
			t.Errorf("S(%#x) = %#x, want %#x", in, s[in], want)
		}
	}
}

// BenchmarkNoiseEmulated times AddGaussianNoise on 4 M elements in device
// memory of the emulation: the kernel's source compiled by g++, a proxy
// for its instruction count where no GPU is at hand.
//
//	go test ./runtime/cuda -run XXX -bench NoiseEmulated -benchtime 5x
func BenchmarkNoiseEmulated(b *testing.B) {
	d := emuDevice(b)
	const n = 1 << 22
	p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
	x := place(p, make([]float32, n))
	dn := d.PrepareNoise(noise.Key{1}, 3)
	d.AddGaussianNoise(x[:1024], dn, 0, 1, 1) // compile and load the module
	b.ResetTimer()
	for range b.N {
		d.AddGaussianNoise(x, dn, 0, 1, 1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/element")
}
