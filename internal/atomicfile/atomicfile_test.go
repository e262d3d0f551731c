package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fullDisk writes n bytes, then fails as a full disk does.
type fullDisk struct {
	w io.Writer
	n int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if len(p) > d.n {
		k, _ := d.w.Write(p[:d.n])
		d.n = 0
		return k, &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	}
	d.n -= len(p)
	return d.w.Write(p)
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.bin")
	if err := WriteBytes(path, []byte("first")); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name  string
		write func(w io.Writer) error
		want  error
	}{
		// The disk fills after 1000 bytes, inside the buffered writes.
		{"full disk", func(w io.Writer) error {
			_, err := io.WriteString(&fullDisk{w: w, n: 1000}, big)
			return err
		}, syscall.ENOSPC},
		{"writer error", func(w io.Writer) error { return errors.New("encoder failed") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(path, tc.write)
			if err == nil || !strings.Contains(err.Error(), path) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v", err)
			}
			if b, _ := os.ReadFile(path); string(b) != "first" {
				t.Errorf("%s holds %d bytes, want the previous content", path, len(b))
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
	if err := WriteBytes(path, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "second" {
		t.Errorf("read back %q", b)
	}
}

// TestReadOnlyDir: a directory that cannot be written (chmod'ed, or /proc
// when the test runs as root, which writes through permissions) fails with
// the path named and nothing under it.
func TestReadOnlyDir(t *testing.T) {
	dir := "/proc"
	if os.Geteuid() != 0 {
		dir = t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
	}
	path := filepath.Join(dir, "dpfinetune-atomic-test")
	if err := WriteBytes(path, []byte("x")); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists (%v)", path, err)
	}
}
