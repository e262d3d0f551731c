//go:build !(linux && (amd64 || arm64))

package cuda

import "errors"

// Emulated returns the emulated driver, which this platform lacks: it
// loads shared libraries through purego on linux/amd64 and linux/arm64.
func Emulated() (Driver, error) {
	return nil, errors.New("cuda: the emulation runs on linux/amd64 and linux/arm64 only")
}

// EmulatedGuarded returns the emulated driver with guarded memory, which
// this platform lacks, as it lacks the emulation.
func EmulatedGuarded() (Driver, error) { return Emulated() }

// Real returns the GPU's driver, which this build lacks: it reaches
// libcuda through purego on linux/amd64 and linux/arm64.
func Real() (Driver, error) { return RealDevice(0) }

// RealDevice returns a GPU's driver, which this build lacks (Real).
func RealDevice(int) (Driver, error) {
	return nil, errors.New("cuda: no CUDA driver: this build reaches libcuda.so.1 on linux/amd64 and linux/arm64 only")
}
