package cuda

import (
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"sort"
	"strings"
)

// EnvPeak names the environment variable that turns on the Device's
// record of its memory peak: set (to anything but "" or "0"), each
// allocation remembers the code that asked for it, the Device keeps the
// allocations it held at its most, and Close writes them to standard
// error, summed by asker, largest first, with the convolution library's
// workspace — what a memory target on a GPU has to cut from. Only the
// allocations' bookkeeping changes: the device does the same work.
const EnvPeak = "DPFINETUNE_CUDA_PEAK"

// peakLog is the record EnvPeak turns on: the allocations held at the
// peak (a copy of the Device's spans then).
type peakLog struct {
	out  io.Writer
	held []span
}

func newPeakLog() *peakLog {
	if v := os.Getenv(EnvPeak); v == "" || v == "0" {
		return nil
	}
	return &peakLog{out: os.Stderr}
}

// asker names the code that asked for an allocation: the innermost
// caller of the Device's allocation, then the first callers outside this
// package (and Go's runtime), up to three names in all, innermost first.
func asker() string {
	var pcs [32]uintptr
	n := goruntime.Callers(3, pcs[:])
	frames := goruntime.CallersFrames(pcs[:n])
	var names []string
	for len(names) < 3 {
		f, more := frames.Next()
		fn := f.Function
		inner := strings.Contains(fn, "/runtime/cuda.")
		switch {
		case inner && (strings.HasSuffix(fn, ").alloc") || strings.HasSuffix(fn, ").Alloc")):
		case len(names) == 0 || !inner && !strings.HasPrefix(fn, "runtime."):
			names = append(names, fn[strings.LastIndex(fn, "/")+1:])
		}
		if !more {
			break
		}
	}
	return strings.Join(names, " < ")
}

// report writes the allocations held at the peak, summed by asker, and
// ws, the convolution library's workspace (held beside them).
func (l *peakLog) report(w io.Writer, ws int) {
	type sum struct {
		who   string
		bytes int64
		n     int
	}
	by := map[string]*sum{}
	var total int64
	for _, s := range l.held {
		e := by[s.who]
		if e == nil {
			e = &sum{who: s.who}
			by[s.who] = e
		}
		e.bytes += int64(s.bytes)
		e.n++
		total += int64(s.bytes)
	}
	rows := make([]*sum, 0, len(by))
	for _, e := range by {
		rows = append(rows, e)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].bytes != rows[j].bytes {
			return rows[i].bytes > rows[j].bytes
		}
		return rows[i].who < rows[j].who
	})
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Fprintf(w, "cuda peak: %.1f MiB in %d allocations, and the convolution library's workspace %.1f MiB\n", mib(total), len(l.held), mib(int64(ws)))
	for _, e := range rows {
		fmt.Fprintf(w, "  %10.1f MiB  %4d × %s\n", mib(e.bytes), e.n, e.who)
	}
}
