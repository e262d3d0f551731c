package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile creates path with what write puts in the temporary file it is
// given (written in order or with WriteAt), with permissions 0644: the file
// is synced, closed and renamed over path only when write and the file
// system succeeded. An error is returned with the path, and the temporary
// file is removed.
func WriteFile(path string, write func(f *os.File) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// CreateTemp's 0600 is for secrets; models, reports and checkpoints
	// are read like any output.
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// Make the rename durable; some file systems cannot sync a directory,
	// and the data is synced already.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Write is WriteFile for a sequential writer: the bytes write produces go
// through a buffer.
func Write(path string, write func(w io.Writer) error) error {
	return WriteFile(path, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 1<<16)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// WriteBytes is Write of b.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
