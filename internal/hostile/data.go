package hostile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"strings"
)

// PNG returns a valid 1×1 gray PNG whose header (IHDR, its CRC fixed up)
// claims w×h pixels: the header of a decompression bomb.
func PNG(w, h uint32) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 1, 1))); err != nil {
		panic(err) // encoding a 1×1 image in memory cannot fail
	}
	b := buf.Bytes()
	// 8-byte signature, then IHDR: length (4), "IHDR" (4), width, height,
	// …, and the CRC of type and data (13 bytes).
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// IDX returns an IDX file of unsigned bytes with the given header
// dimensions followed by data (which need not be as long as they say).
func IDX(dims []uint32, data []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, data...)
}

// NPY returns a float32 .npy file whose header declares shape, followed by
// data (which need not be as long as the shape says).
func NPY(shape []int64, data []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s,), }\n", strings.Join(dims, ", "))
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)), byte(len(dict)>>8))
	return append(append(b, dict...), data...)
}
