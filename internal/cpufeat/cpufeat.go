package cpufeat

// The extensions available to this process: the CPU has them and the
// operating system saves their registers. Set once at start-up.
var (
	// AES: AES-NI (AESENC …).
	AES bool
	// POPCNT: the POPCNT instruction.
	POPCNT bool
	// AVX: AVX on YMM registers.
	AVX bool
	// AVX2: AVX2 (integer YMM operations, gathers).
	AVX2 bool
	// AVX512F: AVX-512 Foundation on ZMM registers with opmasks.
	AVX512F bool
	// AVX512BW: AVX-512 byte and word operations (VPSHUFB on ZMM …).
	AVX512BW bool
	// VAES: the AES instructions on YMM and ZMM registers (four blocks
	// an instruction on ZMM).
	VAES bool
)
