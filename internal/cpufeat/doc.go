// Package cpufeat says which x86-64 instruction set extensions the CPU has
// and the operating system supports, for the assembly kernels of
// runtime/kernels and runtime/noise to choose from at start-up. It reads
// CPUID and XCR0 itself (a few lines of assembly) rather than through
// golang.org/x/sys/cpu, to keep the module free of dependencies; on other
// architectures, and with the purego build tag (no assembly), every
// feature is false.
package cpufeat
