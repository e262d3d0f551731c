//go:build !unix

package sysmem

import (
	"errors"
	"io"
	"os"
)

// DiskFree is not known here.
func DiskFree(string) (int64, error) {
	return 0, errors.New("free disk space is read on Unix systems only")
}

// Unmap does nothing here (MapReadOnly read into memory).
func Unmap([]byte) error { return nil }

// MapReadOnly reads the first size bytes of f into memory (no mapping
// here).
func MapReadOnly(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}
