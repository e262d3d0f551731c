package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The shipped slice of Fashion-MNIST, testdata/fmnist-small, and how it
// was made: testdata/fmnist-small/make.sh runs
//
//	go test ./dpengine/data -run TestMakeFMNISTSmall -make-fmnist-small
var (
	makeFMNISTSmall = flag.Bool("make-fmnist-small", false, "write testdata/fmnist-small from -fmnist-src")
	fmnistSrc       = flag.String("fmnist-src", "/usr/share/datasets/fashion-mnist", "directory of the full Fashion-MNIST IDX .gz files")
)

const (
	fmnistSmallDir   = "../../testdata/fmnist-small"
	fmnistSmallTrain = 4000
	fmnistSmallTest  = 1000
)

// fmnistSmallFiles lists each file of the slice with its item count and
// bytes per item.
var fmnistSmallFiles = []struct {
	name string
	n    int
	item int
}{
	{"train-images-idx3-ubyte.gz", fmnistSmallTrain, 28 * 28},
	{"train-labels-idx1-ubyte.gz", fmnistSmallTrain, 1},
	{"t10k-images-idx3-ubyte.gz", fmnistSmallTest, 28 * 28},
	{"t10k-labels-idx1-ubyte.gz", fmnistSmallTest, 1},
}

// idxPrefix returns the IDX header of the gzip file path with its item
// count replaced by n, followed by the first n items.
func idxPrefix(path string, n, item int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var magic [4]byte
	if _, err := io.ReadFull(zr, magic[:]); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	ndims := int(magic[3])
	hdr := make([]byte, 4+4*ndims)
	copy(hdr, magic[:])
	if _, err := io.ReadFull(zr, hdr[4:]); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if have := int(binary.BigEndian.Uint32(hdr[4:])); have < n {
		return nil, fmt.Errorf("%s: %d items, want at least %d", path, have, n)
	}
	binary.BigEndian.PutUint32(hdr[4:], uint32(n))
	body := make([]byte, n*item)
	if _, err := io.ReadFull(zr, body); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return append(hdr, body...), nil
}

// TestMakeFMNISTSmall writes testdata/fmnist-small when run with
// -make-fmnist-small. The output is deterministic: compress/gzip at best
// compression with an empty header (no name, no time).
func TestMakeFMNISTSmall(t *testing.T) {
	if !*makeFMNISTSmall {
		t.Skip("run with -make-fmnist-small to regenerate testdata/fmnist-small")
	}
	for _, f := range fmnistSmallFiles {
		raw, err := idxPrefix(filepath.Join(*fmnistSrc, f.name), f.n, f.item)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(raw)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(fmnistSmallDir, f.name)
		if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d items, %d bytes", out, f.n, buf.Len())
	}
}

// TestFMNISTSmallMatchesSource checks the shipped slice against the first
// samples of the installed Fashion-MNIST (Debian dataset-fashion-mnist).
func TestFMNISTSmallMatchesSource(t *testing.T) {
	if _, err := os.Stat(*fmnistSrc); err != nil {
		t.Skipf("full Fashion-MNIST not installed: %v", err)
	}
	for _, f := range fmnistSmallFiles {
		want, err := idxPrefix(filepath.Join(*fmnistSrc, f.name), f.n, f.item)
		if err != nil {
			t.Fatal(err)
		}
		ndims := int(want[3])
		data, dims, err := readIDX(filepath.Join(fmnistSmallDir, f.name), ndims)
		if err != nil {
			t.Fatal(err)
		}
		if dims[0] != f.n {
			t.Errorf("%s: %d items, want %d", f.name, dims[0], f.n)
		}
		if !bytes.Equal(data, want[4+4*ndims:]) {
			t.Errorf("%s: data differ from the first %d items of %s", f.name, f.n, *fmnistSrc)
		}
	}
}
