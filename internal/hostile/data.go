package hostile

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"strconv"
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

// DICOM returns a DICOM Part 10 file (explicit VR little endian) of a
// 16-bit MONOCHROME2 image whose header claims w×h pixels and whose pixel
// data holds 16 bytes: the header of a decompression bomb.
func DICOM(w, h uint16) []byte { return DICOMFrames(w, h, 0) }

// DICOMFrames is DICOM's file saying it holds frames frames (Number of
// Frames, where frames is above 0), with the same 16 bytes of pixel data.
func DICOMFrames(w, h uint16, frames int) []byte {
	b := make([]byte, 128, 512)
	b = append(b, "DICM"...)
	el := func(group, elem uint16, vr string, val []byte) {
		b = binary.LittleEndian.AppendUint16(b, group)
		b = binary.LittleEndian.AppendUint16(b, elem)
		b = append(b, vr...)
		if vr == "OW" {
			b = append(b, 0, 0)
			b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
		} else {
			b = binary.LittleEndian.AppendUint16(b, uint16(len(val)))
		}
		b = append(b, val...)
	}
	us := func(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
	el(0x0002, 0x0010, "UI", []byte("1.2.840.10008.1.2.1\x00"))
	el(0x0028, 0x0002, "US", us(1))
	el(0x0028, 0x0004, "CS", []byte("MONOCHROME2 "))
	if frames > 0 {
		n := strconv.Itoa(frames)
		if len(n)%2 == 1 {
			n += " "
		}
		el(0x0028, 0x0008, "IS", []byte(n))
	}
	el(0x0028, 0x0010, "US", us(h))
	el(0x0028, 0x0011, "US", us(w))
	el(0x0028, 0x0100, "US", us(16))
	el(0x0028, 0x0101, "US", us(16))
	el(0x0028, 0x0102, "US", us(15))
	el(0x0028, 0x0103, "US", us(0))
	el(0x7FE0, 0x0010, "OW", make([]byte, 16))
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

// NIfTIGz returns a gzip-compressed NIfTI-2 file of float64 voxels whose
// header claims w×h×slices of them (up to 2³¹) and whose data holds 16
// bytes: the header of a decompression bomb.
func NIfTIGz(w, h, slices int64) []byte {
	b := make([]byte, 544+16)
	le := binary.LittleEndian
	le.PutUint32(b[0:], 540)
	copy(b[4:], "n+2\x00\r\n\x1a\n")
	le.PutUint16(b[12:], 64) // float64
	le.PutUint16(b[14:], 64)
	for i, d := range []int64{3, w, h, slices, 1, 1, 1, 1} {
		le.PutUint64(b[16+8*i:], uint64(d))
	}
	le.PutUint64(b[168:], 544) // vox_offset
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	z.Write(b)
	z.Close()
	return buf.Bytes()
}
