package nifti

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"math"
	"os"
	"testing"
)

// benchVolume is a 256×256×160 int16 MR-sized volume (20 MiB of voxels),
// gzip-compressed where gz, with a sagittal affine (its axes permuted).
func benchVolume(b *testing.B, gz bool) []byte {
	b.Helper()
	src, err := os.ReadFile("testdata/sagittal.nii")
	if err != nil {
		b.Fatal(err)
	}
	const w, h, s = 256, 256, 160
	file := bytes.Clone(src[:352])
	binary.LittleEndian.PutUint16(file[42:], w)
	binary.LittleEndian.PutUint16(file[44:], h)
	binary.LittleEndian.PutUint16(file[46:], s)
	binary.LittleEndian.PutUint32(file[108:], math.Float32bits(352))
	for i := range w * h * s {
		file = binary.LittleEndian.AppendUint16(file, uint16(i*31%4096))
	}
	if !gz {
		return file
	}
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	z.Write(file)
	z.Close()
	return buf.Bytes()
}

// BenchmarkVolume decodes a 256×256×160 int16 volume and reads every
// slice of it in its canonical orientation: what --frame all costs a
// file, past the file's reading.
func BenchmarkVolume(b *testing.B) {
	for _, gz := range []bool{false, true} {
		name := map[bool]string{false: "nii", true: "nii.gz"}[gz]
		file := benchVolume(b, gz)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(256 * 256 * 160 * 2)
			var buf []float32
			for range b.N {
				v, err := Decode(bytes.NewReader(file))
				if err != nil {
					b.Fatal(err)
				}
				for k := range v.Slices {
					buf = v.Slice(k, buf)
				}
			}
		})
	}
}
