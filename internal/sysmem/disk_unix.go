//go:build unix

package sysmem

import (
	"fmt"
	"os"
	"syscall"
)

// DiskFree returns the bytes an unprivileged writer may still put in dir's
// file system.
func DiskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// Unmap releases a mapping of MapReadOnly; nothing may read it after.
func Unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return syscall.Munmap(b)
}

// MapReadOnly maps the first size bytes of f into memory, read-only and
// shared: the kernel reads the pages in as they are touched and drops them
// as memory requires. The mapping outlives f's closing and removal.
func MapReadOnly(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("mapping %d bytes: too large for this machine", size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes: %w", size, err)
	}
	return b, nil
}
