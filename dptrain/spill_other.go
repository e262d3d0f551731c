//go:build !unix

package dptrain

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
)

var errNoSpill = errors.New("a feature cache on disk needs a Unix system")

func spillFloats(string, int) ([]float32, func() error, error) { return nil, nil, errNoSpill }

// mapFloats reads n float32 of f from byte off on into memory (no
// mapping here).
func mapFloats(f *os.File, off int64, n int) ([]float32, func() error, error) {
	b := make([]byte, 4*n)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return nil, nil, err
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x, func() error { return nil }, nil
}
