//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/noise"
)

// TestDeviceBuffers checks the runtime.Device side: allocation, the
// copies and their bounds, buffers of another device, Free, Run.
func TestDeviceBuffers(t *testing.T) {
	d := emuDevice(t)
	b, err := d.Alloc(10)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 10)
	if err := d.CopyOut(got, b, 0); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 0 {
			t.Fatalf("a new buffer's element %d is %v, not 0", i, v)
		}
	}
	if err := d.CopyIn(b, 7, []float32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyOut(got[:4], b, 6); err != nil || got[0] != 0 || got[1] != 1 || got[3] != 3 {
		t.Errorf("copies: %v %v", got[:4], err)
	}
	if err := d.CopyIn(b, 8, []float32{1, 2, 3}); err == nil {
		t.Error("a copy past the buffer's end succeeded")
	}
	if err := d.CopyOut(got, b, -1); err == nil {
		t.Error("a copy from a negative offset succeeded")
	}
	cpuBuf, _ := runtime.CPU{}.Alloc(3)
	if err := d.CopyIn(cpuBuf, 0, []float32{1}); err == nil {
		t.Error("a copy into a CPU buffer succeeded")
	}
	if _, err := d.Alloc(-1); err == nil {
		t.Error("a negative allocation succeeded")
	}
	if z, err := d.Alloc(0); err != nil || z.Len() != 0 || len(z.Floats()) != 0 {
		t.Errorf("empty buffer: %v %v", z, err)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := d.Free(b); err != nil {
		t.Errorf("a second Free of an emptied buffer: %v", err)
	}
	ran := false
	if err := d.Run(&runtime.CPUKernel{Name: "k", Fn: func() { ran = true }}); err != nil || !ran {
		t.Errorf("Run: %v (ran %v)", err, ran)
	}
	if !strings.HasPrefix(d.Name(), "cuda (") || d.Workers() != 1 {
		t.Errorf("Name %q Workers %d", d.Name(), d.Workers())
	}
}

// TestScratchGrowth stages operands larger than the scratch's first chunk
// and several in one call, so that the arena grows mid-call and merges.
func TestScratchGrowth(t *testing.T) {
	d := emuDevice(t)
	r := rand.New(rand.NewSource(1))
	for _, n := range []int{10, minScratch / 4 * 3, minScratch, 100} {
		p, g, m, v := randFloats(r, n), randFloats(r, n), randFloats(r, n), randFloats(r, n)
		for i := range v {
			v[i] *= v[i]
		}
		wp, wm, wv := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
		c := runtime.AdamCoeffs{GradScale: 1, Decay: 1, Beta1: 0.9, OneMinusBeta1: 0.1, Beta2: 0.999, OneMinusBeta2: 0.001, StepSize: 0.01, SqrtBC2: 0.5, Eps: 1e-8}
		runtime.CPU{}.AdamUpdate(wp, g, wm, wv, c)
		d.AdamUpdate(p, g, m, v, c)
		for _, pair := range [][2][]float32{{p, wp}, {m, wm}, {v, wv}} {
			if err := sameBits(widen32(pair[0]), widen32(pair[1])); err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
		}
		if len(d.scratch.chunks) != 1 {
			t.Errorf("n=%d: %d scratch chunks after the call, want 1", n, len(d.scratch.chunks))
		}
	}
}

// TestConcurrentOps calls the device from several goroutines at once, as
// the engine's workers may: the calls are serialized and each result is
// the CPU's.
func TestConcurrentOps(t *testing.T) {
	d := emuDevice(t)
	key := noise.Key{7}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			for it := range 3 {
				x := randFloats(r, 300+w)
				want := append([]float32(nil), x...)
				runtime.CPU{}.AddGaussianNoise(want, runtime.CPU{}.PrepareNoise(key, uint64(it)), uint64(w*1000), 0.5, 2)
				d.AddGaussianNoise(x, d.PrepareNoise(key, uint64(it)), uint64(w*1000), 0.5, 2)
				if err := sameBits(widen32(x), widen32(want)); err != nil {
					errs <- err
					return
				}
				if got, want := d.SumSq(x), (runtime.CPU{}).SumSq(x); got != want {
					errs <- fmt.Errorf("worker %d: SumSq %v, want %v", w, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSubSliceOperands passes pieces of one device buffer as operands:
// interior addresses are device memory too.
func TestSubSliceOperands(t *testing.T) {
	d := emuDevice(t)
	r := rand.New(rand.NewSource(3))
	host := randFloats(r, 1000)
	b, err := d.Alloc(len(host))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyIn(b, 0, host); err != nil {
		t.Fatal(err)
	}
	f := b.Floats()
	d.Axpy(0.75, f[3:303], f[500:800])
	d.Scale(-2, f[901:997])
	want := append([]float32(nil), host...)
	runtime.CPU{}.Axpy(0.75, want[3:303], want[500:800])
	runtime.CPU{}.Scale(-2, want[901:997])
	got := make([]float32, len(host))
	if err := d.CopyOut(got, b, 0); err != nil {
		t.Fatal(err)
	}
	if err := sameBits(widen32(got), widen32(want)); err != nil {
		t.Error(err)
	}
	if len(d.scratch.chunks) != 0 {
		t.Errorf("device operands were staged: %d scratch chunks", len(d.scratch.chunks))
	}
}

// peakAskerA and peakAskerB allocate for TestPeakLog, which finds them
// named in the record.
func peakAskerA(d *Device, n int) runtime.Buffer {
	b, _ := d.Alloc(n)
	return b
}

func peakAskerB(d *Device, n int) runtime.Buffer {
	b, _ := d.Alloc(n)
	return b
}

// TestPeakLog: with EnvPeak, Close writes the allocations held at the
// Device's peak, summed by the code that asked for them — not those made
// after the peak, nor those freed before it.
func TestPeakLog(t *testing.T) {
	t.Setenv(EnvPeak, "1")
	d := emuDevice(t)
	var out strings.Builder
	d.peakLog.out = &out
	gone := peakAskerB(d, 3000)
	if err := d.Free(gone); err != nil {
		t.Fatal(err)
	}
	a1, a2 := peakAskerA(d, 1<<18), peakAskerA(d, 1<<18) // 2 MiB
	b := peakAskerB(d, 1<<17)                            // 0.5 MiB: the peak
	for _, x := range []runtime.Buffer{a1, b} {
		if err := d.Free(x); err != nil {
			t.Fatal(err)
		}
	}
	peakAskerB(d, 1<<16) // after the peak, below it
	_ = a2
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	rep := out.String()
	for _, want := range []string{"2.0 MiB     2 × cuda.peakAskerA", "0.5 MiB     1 × cuda.peakAskerB"} {
		if !strings.Contains(rep, want) {
			t.Errorf("the record lacks %q:\n%s", want, rep)
		}
	}
	if strings.Count(rep, "peakAskerB") != 1 || !strings.Contains(rep, "cuda peak: ") {
		t.Errorf("the record:\n%s", rep)
	}
}
