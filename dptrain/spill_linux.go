package dptrain

import (
	"errors"
	"os"
	"syscall"
)

// reserve gives f size bytes of blocks of its own (fallocate), so that
// writing the mapping cannot run out of disk half way (a SIGBUS, not an
// error); a file system without fallocate gets a sparse file, the free
// space checked before.
func reserve(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		return f.Truncate(size)
	}
	return err
}
