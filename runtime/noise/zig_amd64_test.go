//go:build amd64 && !purego

package noise

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestZigPathsAMD64: SSE2 is always among the fast paths (so it is tested
// on machines that use AVX2), AVX2 comes first exactly when the CPUID check
// finds it, and on Linux that check agrees with the kernel's flags in
// /proc/cpuinfo (which lists avx2 only when the OS saves the YMM state).
func TestZigPathsAMD64(t *testing.T) {
	names := make([]string, len(zigPaths))
	for i, p := range zigPaths {
		names[i] = p.name
	}
	if !slices.Contains(names, "sse2") {
		t.Fatalf("paths %v: no sse2", names)
	}
	has := cpuHasAVX2() && cpuHasPOPCNT()
	if has != (names[0] == "avx2") || zigBest.name != names[0] {
		t.Fatalf("paths %v, best %s, CPUID AVX2+POPCNT %v", names, zigBest.name, has)
	}
	if runtime.GOOS != "linux" {
		return
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags := strings.Fields(v)
			if want := slices.Contains(flags, "avx2"); cpuHasAVX2() != want {
				t.Fatalf("CPUID AVX2 %v, /proc/cpuinfo avx2 %v", cpuHasAVX2(), want)
			}
			if want := slices.Contains(flags, "popcnt"); cpuHasPOPCNT() != want {
				t.Fatalf("CPUID POPCNT %v, /proc/cpuinfo popcnt %v", cpuHasPOPCNT(), want)
			}
			return
		}
	}
	t.Skip("no flags line in /proc/cpuinfo")
}
