package runtime

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// AvailableMemory returns the bytes this process may still allocate as far
// as the machine tells: MemAvailable plus SwapFree from /proc/meminfo,
// lowered to what a cgroup v2 memory limit leaves. ok is false where none of
// these can be read (not Linux): then no limit is applied.
func AvailableMemory() (bytes int64, source string, ok bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, "", false
	}
	defer f.Close()
	var avail, swap int64
	var haveAvail bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "MemAvailable:":
			avail, haveAvail = kb<<10, true
		case "SwapFree:":
			swap = kb << 10
		}
	}
	if !haveAvail {
		return 0, "", false
	}
	bytes, source = avail+swap, "MemAvailable + SwapFree"
	if lim, ok := cgroupRoom(); ok && lim < bytes {
		bytes, source = lim, "the cgroup's memory.max − memory.current"
	}
	return bytes, source, true
}

// cgroupRoom returns what this process's memory cgroup still allows: v2's
// memory.max − memory.current or v1's memory.limit_in_bytes −
// memory.usage_in_bytes, when a limit is set.
func cgroupRoom() (int64, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	read := func(path string) (int64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		return v, err == nil // "max" (v2, unlimited) is not a number
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var lim, cur int64
		var ok bool
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir := "/sys/fs/cgroup" + parts[2]
			if lim, ok = read(dir + "/memory.max"); ok {
				cur, _ = read(dir + "/memory.current")
			}
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dir := "/sys/fs/cgroup/memory" + parts[2]
			if lim, ok = read(dir + "/memory.limit_in_bytes"); ok {
				cur, _ = read(dir + "/memory.usage_in_bytes")
			}
		}
		// v1 writes "no limit" as a number near MaxInt64.
		if ok && lim < 1<<62 {
			return max(lim-cur, 0), true
		}
	}
	return 0, false
}

// memoryLimit is the limit a plan is held to: Options.MaxMemory when set,
// otherwise the machine's available memory (none where it is unknown).
func (p *Plan) memoryLimit() (int64, string, bool) {
	if p.opts.MaxMemory > 0 {
		return p.opts.MaxMemory, "", true
	}
	return AvailableMemory()
}

// limitText says what a limit is and where it comes from.
func limitText(limit int64, source string) string {
	if source == "" {
		return "the memory limit of " + graph.FormatBytes(float64(limit))
	}
	return fmt.Sprintf("the %s of memory available (%s)", graph.FormatBytes(float64(limit)), source)
}

// checkTensorSizes refuses, before any kernel is built, a plan one of whose
// run-time values alone exceeds the memory limit: a kernel's set-up (index
// tables of Expand, Gather, …) is as large as its output.
func (p *Plan) checkTensorSizes() error {
	limit, source, ok := p.memoryLimit()
	if !ok {
		return nil
	}
	for _, nd := range p.nodes {
		for _, t := range nd.out {
			if t != nil && !t.isConst && 4*int64(t.n) > limit {
				return fmt.Errorf("runtime: node %s: output %q of shape %v needs %s, over %s",
					nd.g, t.v.Name, t.shape, graph.FormatBytes(4*float64(t.n)), limitText(limit, source))
			}
		}
	}
	return nil
}

// checkPlanSize refuses a buffer plan (arena and workspace) that exceeds
// the memory limit, before it is allocated.
func (p *Plan) checkPlanSize(arenaElems int) error {
	limit, source, ok := p.memoryLimit()
	if !ok {
		return nil
	}
	need := 4 * (int64(arenaElems) + int64(p.wsNeed))
	if need > limit {
		return fmt.Errorf("runtime: the buffer plan needs %s (arena %s, workspace %s), over %s",
			graph.FormatBytes(float64(need)), graph.FormatBytes(4*float64(arenaElems)), graph.FormatBytes(4*float64(p.wsNeed)),
			limitText(limit, source))
	}
	return nil
}
