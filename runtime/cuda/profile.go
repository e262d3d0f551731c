package cuda

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// EnvProfile names the environment variable that turns on the Device's
// operation profile: set (to anything but "" or "0"), each operation and
// each kernel launch waits for the device before and after it, so that its
// wall time is its own, and Close writes a table of the time spent per
// operation and per kernel to standard error (with each operation's host
// time: until its calls had returned), and one of the convolution
// operations by shape. The waits serialize host
// and device, so a profiled step is slower than an unprofiled one: the
// table says where the time goes, not how long a step takes.
const EnvProfile = "DPFINETUNE_CUDA_PROFILE"

// profile accumulates the wall times of operations and kernels.
type profile struct {
	out     io.Writer // where Close writes the table: standard error
	opened  time.Time
	opStart time.Time
	ops     map[string]*profEntry
	kernels map[string]*profEntry
	// convs holds the convolution operations by shape (convKey): which
	// layer's product costs what, to set beside PyTorch's per shape
	// (bench/conv_profile.py). shape is the running operation's key, set
	// by profConv and taken by Device.end.
	convs map[string]*profEntry
	shape string
}

type profEntry struct {
	n      int
	t, max time.Duration
	// host is the time until the operation's calls had returned, its
	// copies back to the host included (operations only): where it is
	// most of t, the host's side — a library's own work per call — is
	// what costs, not the device's.
	host time.Duration
}

func newProfile() *profile {
	if v := os.Getenv(EnvProfile); v == "" || v == "0" {
		return nil
	}
	return &profile{out: os.Stderr, opened: time.Now(), ops: map[string]*profEntry{}, kernels: map[string]*profEntry{}, convs: map[string]*profEntry{}}
}

// ResetProfile starts the operation profile (EnvProfile) afresh, so that
// the table Close writes covers only what runs after it: a benchmark
// calls it after its warm-up step, whose first use of each shape (NVRTC's
// modules loaded, cuDNN's algorithms measured, plans uploaded) would
// otherwise weigh in every row. Without a profile it does nothing.
func (d *Device) ResetProfile() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.prof; p != nil {
		d.drv.Synchronize()
		p.opened, p.ops, p.kernels, p.convs = time.Now(), map[string]*profEntry{}, map[string]*profEntry{}, map[string]*profEntry{}
	}
}

func (p *profile) add(m map[string]*profEntry, name string, t time.Duration) {
	e := m[name]
	if e == nil {
		e = new(profEntry)
		m[name] = e
	}
	e.n++
	e.t += t
	e.max = max(e.max, t)
}

// write prints the table, the largest times first, at most top rows each.
func (p *profile) write(w io.Writer, top int) {
	total := time.Since(p.opened)
	table := func(title string, m map[string]*profEntry) {
		names := make([]string, 0, len(m))
		var sum time.Duration
		for n, e := range m {
			names = append(names, n)
			sum += e.t
		}
		sort.Slice(names, func(i, j int) bool { return m[names[i]].t > m[names[j]].t })
		fmt.Fprintf(w, "cuda profile: %s, %.1f ms of %.1f ms since open\n", title, ms(sum), ms(total))
		for i, n := range names {
			if i == top {
				fmt.Fprintf(w, "  … %d more\n", len(names)-top)
				break
			}
			e := m[n]
			fmt.Fprintf(w, "  %-32s %7d calls %10.2f ms %5.1f%%  longest %8.2f ms", n, e.n, ms(e.t), 100*float64(e.t)/float64(max(sum, 1)), ms(e.max))
			if e.host > 0 {
				fmt.Fprintf(w, "  host %8.2f ms", ms(e.host))
			}
			fmt.Fprintln(w)
		}
	}
	table("operations", p.ops)
	table("kernels", p.kernels)
	if len(p.convs) > 0 {
		// Every shape: bench/conv_profile.py sets them all beside PyTorch's.
		top = len(p.convs)
		table("convolutions by shape", p.convs)
	}
	fmt.Fprintln(w, strings.Repeat("-", 20))
}

func ms(t time.Duration) float64 { return float64(t) / 1e6 }

// convKey names a convolution's shape for the profile's per-shape table:
// "n=32 c=64 in=56x56 m=256 k=1x1 s=1x1 p=0,0,0,0 d=1x1 g=1", the fields
// bench/conv_profile.py matches with PyTorch's (input, weight, stride,
// padding, dilation, groups).
func convKey(s *runtime.ConvShape) string {
	dims := func(v []int, def int) string {
		if len(v) == 0 {
			v = make([]int, len(s.Kernel))
			for i := range v {
				v[i] = def
			}
		}
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, "x")
	}
	pad := make([]int, 2*len(s.Kernel))
	copy(pad, s.Pads)
	pads := strings.ReplaceAll(dims(pad, 0), "x", ",")
	return fmt.Sprintf("n=%d c=%d in=%s m=%d k=%s s=%s p=%s d=%s g=%d", s.N, s.C, dims(s.In, 0), s.M, dims(s.Kernel, 1), dims(s.Strides, 1), pads, dims(s.Dilations, 1), max(s.Group, 1))
}

// profConv names the running operation's convolution shape in the
// profile (d.mu held); nothing without one.
func (d *Device) profConv(s *runtime.ConvShape, n int) {
	if d.prof == nil {
		return
	}
	d.prof.shape = convKey(s)
	if n != s.N {
		d.prof.shape += fmt.Sprintf(" samples=%d", n)
	}
}
