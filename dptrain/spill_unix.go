//go:build unix

package dptrain

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// spillFloats returns n float32 of a file in dir mapped into memory, and
// the function that unmaps them. The file is removed as soon as it is
// open: the mapping keeps its blocks until the function is called or the
// process ends, crash included, so that no copy of the features outlives
// the run; the kernel writes the pages out and reads them back as memory
// requires.
func spillFloats(dir string, n int) ([]float32, func() error, error) {
	if n == 0 {
		return nil, func() error { return nil }, nil
	}
	f, err := os.CreateTemp(dir, ".dpfinetune-features-*")
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return nil, nil, err
	}
	size := 4 * int64(n)
	if err := reserve(f, size); err != nil {
		return nil, nil, fmt.Errorf("%s: reserving %d bytes: %w", dir, size, err)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: mapping %d bytes: %w", dir, size, err)
	}
	x := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return x, func() error { return syscall.Munmap(b) }, nil
}

// mapFloats maps n little-endian float32 of f from byte off on (a
// multiple of the page size) into memory, read-only, and returns the
// function that unmaps them. The mapped bytes are the host's floats only
// on a little-endian machine: elsewhere it refuses.
func mapFloats(f *os.File, off int64, n int) ([]float32, func() error, error) {
	if one := uint16(1); *(*byte)(unsafe.Pointer(&one)) != 1 {
		return nil, nil, errors.New("a big-endian machine cannot map little-endian floats")
	}
	if n == 0 {
		return nil, func() error { return nil }, nil
	}
	b, err := syscall.Mmap(int(f.Fd()), off, 4*n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping %d bytes: %w", 4*n, err)
	}
	x := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return x, func() error { return syscall.Munmap(b) }, nil
}
