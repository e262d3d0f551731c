package cpufeat

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestAgreesWithProcCPUInfo: on Linux/amd64 each feature the kernel lists
// in /proc/cpuinfo's flags is reported, and none it does not list (the
// kernel too lists AVX-512 and AVX only when it saves their state).
func TestAgreesWithProcCPUInfo(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("needs /proc/cpuinfo on amd64")
	}
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip(err)
	}
	var flags []string
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	if flags == nil {
		t.Skip("no flags line in /proc/cpuinfo")
	}
	for _, c := range []struct {
		flag string
		got  bool
	}{{"aes", AES}, {"popcnt", POPCNT}, {"avx", AVX}, {"avx2", AVX2}, {"avx512f", AVX512F}, {"avx512bw", AVX512BW}, {"vaes", VAES}} {
		want := slices.Contains(flags, c.flag)
		if purego && !c.got {
			continue
		}
		if c.got != want {
			t.Errorf("%s: cpufeat %v, /proc/cpuinfo %v", c.flag, c.got, want)
		}
	}
}
