package npy

import (
	"bytes"
	"testing"
)

// FuzzRead decodes arbitrary bytes as .npy: an error, or an array whose
// data is exactly as long as its shape says and that writes back and reads
// again to the same array. Never a panic, never an allocation larger than
// the input justifies (a header claiming more is refused or read as the
// data arrives).
func FuzzRead(f *testing.F) {
	for _, nf := range numpyFiles {
		f.Add([]byte(nf.data))
	}
	f.Add([]byte("\x93NUMPY\x01\x00F\x00{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n"))
	f.Add([]byte("\x93NUMPY\x03\x00\x10\x00\x00\x00{'shape': (1,)}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		if a.dataLen() != a.Len() {
			t.Fatalf("shape %v with %d elements", a.Shape, a.dataLen())
		}
		var buf bytes.Buffer
		if err := Write(&buf, a); err != nil {
			t.Fatalf("writing back: %v", err)
		}
		a2, err := Read(&buf)
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		if a2.DType != a.DType || len(a2.Shape) != len(a.Shape) || a2.dataLen() != a.dataLen() {
			t.Fatalf("round trip: %s %v → %s %v", a.DType, a.Shape, a2.DType, a2.Shape)
		}
	})
}
