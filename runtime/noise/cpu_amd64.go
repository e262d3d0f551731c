//go:build amd64 && !purego

package noise

import "github.com/dpfinetune/dpfinetune/internal/cpufeat"

// cpuHasAVX2 reports whether the CPU has AVX2 and the operating system
// saves the YMM registers (a CPU with AVX2 under an OS that does not would
// fault, or lose the upper halves, on the first VEX instruction).
func cpuHasAVX2() bool { return cpufeat.AVX2 }

// cpuHasPOPCNT reports whether the CPU has POPCNT (every CPU with AVX2
// has it, but nothing promises so).
func cpuHasPOPCNT() bool { return cpufeat.POPCNT }
