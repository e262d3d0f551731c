package sysmem

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Available returns the bytes this process may still allocate as far
// as the machine tells: MemAvailable plus SwapFree from /proc/meminfo,
// lowered to what a cgroup v2 memory limit leaves. ok is false where none of
// these can be read (not Linux): then no limit is applied.
func Available() (bytes int64, source string, ok bool) {
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
