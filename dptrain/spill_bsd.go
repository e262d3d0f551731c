//go:build unix && !linux

package dptrain

import "os"

// reserve sizes f (sparse: the free space is checked before).
func reserve(f *os.File, size int64) error { return f.Truncate(size) }
