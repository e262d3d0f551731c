package dicom

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"image"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The three codecs' fixture directories (testdata/jpegll, jpegls, j2k)
// share a layout: cases.json lists the streams, NAME.u16 (or gzipped
// NAME.u16.gz) holds a stream's expected samples, little-endian, and the
// benchmark stream's are a formula of the generator's (bench_value).

// readCases reads a fixture directory's cases.json, which must list some.
func readCases[T any](t testing.TB, dir string) []T {
	t.Helper()
	var cs []T
	if err := json.Unmarshal(readFixture(t, filepath.Join(dir, "cases.json")), &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		t.Fatalf("%s/cases.json lists no case", dir)
	}
	return cs
}

// readFixture reads a fixture file.
func readFixture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectedSamples returns the w·h·components samples a case of dir must
// decode to: how says where ("u16", "u16.gz", or "bench_value": bench
// over the image).
func expectedSamples(t testing.TB, dir, name, how string, w, h, components int, bench func(x, y int) uint16) []uint16 {
	t.Helper()
	n := w * h * components
	want := make([]uint16, n)
	switch how {
	case "u16", "u16.gz":
		f, err := os.Open(filepath.Join(dir, name+"."+how))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var r io.Reader = f
		if how == "u16.gz" {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 2*n {
			t.Fatalf("%s.%s has %d bytes, want %d", name, how, len(b), 2*n)
		}
		for i := range want {
			want[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
	case "bench_value":
		for y := range h {
			for x := range w {
				want[y*w+x] = bench(x, y)
			}
		}
	default:
		t.Fatalf("%s: unknown expectation %q", name, how)
	}
	return want
}

// expectGolden holds img's 8-bit samples to a generator's unrounded
// values in the fixture file golden (little-endian float32, pixel-major):
// within tol, and float32's rounding of them.
func expectGolden(t testing.TB, img image.Image, golden string, channels int, tol float64) {
	t.Helper()
	raw := readFixture(t, golden)
	want := make([]float32, len(raw)/4)
	binary.Read(bytes.NewReader(raw), binary.LittleEndian, want)
	got, ch := rgbOf(img)
	if ch != channels || len(got) != len(want) {
		t.Fatalf("%d channels, %d samples; want %d channels, %d samples", ch, len(got), channels, len(want))
	}
	worst, at := 0.0, 0
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > worst {
			worst, at = d, i
		}
	}
	// float32's rounding of the golden is under 2e-5 of 255.
	if worst > tol+1e-4 {
		t.Errorf("sample %d: %d, want %.4f (|Δ| %.4f over %.1f)", at, got[at], want[at], worst, tol)
	}
}
