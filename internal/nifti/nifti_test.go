package nifti

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// fixture is a case of testdata/cases.json (gen_nifti.py).
type fixture struct {
	Name, File, Refuse    string
	RGB                   bool
	Width, Height, Slices int
	Datatype              int
	Slope, Intercept      float64
	CalMin                float64 `json:"cal_min"`
	CalMax                float64 `json:"cal_max"`
}

func fixtures(t testing.TB) []fixture {
	t.Helper()
	b, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cs []fixture
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) < 22 {
		t.Fatalf("%d cases, want 22", len(cs))
	}
	return cs
}

// TestDecodeFixtures holds every fixture — each datatype read, both byte
// orders, both versions, gzip, an extension, a file's own scaling, no
// scaling (a slope of 0), a 2-D image, a 4-D image of one volume, RGB;
// axes stored permuted, flipped, rotated (a qform alone), with a negative
// qfac, and with no qform or sform — to nibabel's reading of it,
// reoriented by its as_closest_canonical, value for value; and the
// refusals to their words.
func TestDecodeFixtures(t *testing.T) {
	for _, c := range fixtures(t) {
		t.Run(c.Name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", c.File))
			if err != nil {
				t.Fatal(err)
			}
			v, err := Decode(bytes.NewReader(b))
			if c.Refuse != "" {
				if err == nil || !strings.Contains(err.Error(), c.Refuse) {
					t.Fatalf("Decode: %v, want an error saying %q", err, c.Refuse)
				}
				if _, err := DecodeHeader(bytes.NewReader(b)); err == nil {
					t.Errorf("DecodeHeader read what Decode refuses")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			h, err := DecodeHeader(bytes.NewReader(b))
			if err != nil || h != v.Header {
				t.Errorf("DecodeHeader %+v, %v; Decode's %+v", h, err, v.Header)
			}
			if v.Width != c.Width || v.Height != c.Height || v.Slices != c.Slices || v.Datatype != c.Datatype ||
				v.Slope != c.Slope || v.Intercept != c.Intercept || v.CalMin != c.CalMin || v.CalMax != c.CalMax || v.RGB() != c.RGB {
				t.Errorf("header %+v, want %+v", v.Header, c)
			}
			want, err := os.ReadFile(filepath.Join("testdata", c.Name+map[bool]string{true: ".rgb", false: ".f32"}[c.RGB]))
			if err != nil {
				t.Fatal(err)
			}
			n := c.Width * c.Height
			if c.RGB {
				var got []byte
				for k := range c.Slices {
					got = append(got, v.RGBSlice(k, nil)...)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("RGB %v, want %v", got, want)
				}
				return
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			var buf []float32
			for k := range c.Slices {
				buf = v.Slice(k, buf)
				for i, x := range buf {
					w := math.Float32frombits(binary.LittleEndian.Uint32(want[4*(k*n+i):]))
					if x != w && !(x != x && w != w) {
						t.Fatalf("slice %d voxel %d: %g, nibabel %g", k, i, x, w)
					}
					if w == w {
						lo, hi = min(lo, float64(w)), max(hi, float64(w))
					}
				}
			}
			if l, h := v.Range(); l != lo || h != hi {
				t.Errorf("Range %g..%g, want %g..%g", l, h, lo, hi)
			}
		})
	}
}

// TestTruncated: every fixture cut short anywhere is an error, not a
// panic, and so is one whose header claims more voxels than it holds,
// without allocating them (a segment at most).
func TestTruncated(t *testing.T) {
	for _, c := range fixtures(t) {
		if c.Refuse != "" || strings.HasSuffix(c.File, ".gz") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", c.File))
		if err != nil {
			t.Fatal(err)
		}
		for cut := 0; cut < len(b); cut += max(1, len(b)/37) {
			if _, err := Decode(bytes.NewReader(b[:cut])); err == nil {
				t.Errorf("%s cut at %d of %d bytes: decoded", c.File, cut, len(b))
			}
		}
	}
	b, err := os.ReadFile("testdata/u8.nii")
	if err != nil {
		t.Fatal(err)
	}
	huge := bytes.Clone(b)
	binary.LittleEndian.PutUint16(huge[42:], 20000) // dim[1]
	binary.LittleEndian.PutUint16(huge[44:], 20000) // dim[2]
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Decode(bytes.NewReader(huge))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "the file holds 60 after vox_offset") {
		t.Errorf("a header claiming 20000×20000×3 voxels: %v", err)
	}
	// At most a segment: 2^22 voxels of a byte.
	if d := after.TotalAlloc - before.TotalAlloc; d > segVoxels+1<<20 {
		t.Errorf("a header claiming 1.2 GB over 60 bytes allocated %d bytes", d)
	}
}

// TestRefusals: headers that are no NIfTI image's are refused by what is
// wrong.
func TestRefusals(t *testing.T) {
	b, err := os.ReadFile("testdata/u8.nii")
	if err != nil {
		t.Fatal(err)
	}
	set := func(off int, v uint16) []byte {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint16(c[off:], v)
		return c
	}
	f32 := func(off int, v float32) []byte {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[off:], math.Float32bits(v))
		return c
	}
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "not a NIfTI"},
		{"size", set(0, 349), "neither 348 nor 540"},
		{"analyze", append(bytes.Clone(b[:344]), append([]byte{0, 0, 0, 0}, b[348:]...)...), "Analyze"},
		{"dim0", set(40, 9), "dim[0] = 9"},
		{"dim negative", set(42, 0xFFFF), "dim[1] = -1"},
		{"datatype", set(70, 3), "datatype 3 is no NIfTI voxel type"},
		{"binary", set(70, 1), "bit (DT_BINARY)"},
		{"offset", f32(108, 100), "vox_offset 100"},
		{"intercept", func() []byte {
			c := f32(112, 2)
			binary.LittleEndian.PutUint32(c[116:], math.Float32bits(float32(math.Inf(1))))
			return c
		}(), "an intercept that is no number"},
	} {
		if _, err := Decode(bytes.NewReader(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := Decode(bytes.NewReader([]byte("\x1f\x8bnot gzip"))); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("bad gzip: %v", err)
	}
	if _, err := Decode(bytes.NewReader(make([]byte, 400))); !errors.Is(err, ErrNotNIfTI) {
		t.Errorf("zeros: %v, want ErrNotNIfTI", err)
	}
}

// FuzzDecode: no input panics; what decodes gives its slices and range.
func FuzzDecode(f *testing.F) {
	for _, c := range fixtures(f) {
		if b, err := os.ReadFile(filepath.Join("testdata", c.File)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Decode(bytes.NewReader(b))
		if err != nil {
			return
		}
		if v.Voxels() > 1<<22 {
			return
		}
		for k := range v.Slices {
			if v.RGB() {
				v.RGBSlice(k, nil)
			} else {
				v.Slice(k, nil)
			}
		}
		if !v.RGB() {
			v.Range()
		}
	})
}

// TestSegments: a volume of more voxels than a segment holds reads each
// voxel from its segment — for 1-, 2- and 3-byte voxels, across the
// boundaries.
func TestSegments(t *testing.T) {
	b, err := os.ReadFile("testdata/u8.nii")
	if err != nil {
		t.Fatal(err)
	}
	const w, h, s = 1025, 1024, 5 // 5,248,000 voxels: two segments
	n := w * h * s
	value := func(i int) uint16 { return uint16(i*7919 + i>>13) }
	for _, c := range []struct {
		datatype, bytes int
	}{{dtUint8, 1}, {dtInt16, 2}, {dtRGB24, 3}} {
		file := bytes.Clone(b[:352])
		binary.LittleEndian.PutUint16(file[42:], w)
		binary.LittleEndian.PutUint16(file[44:], h)
		binary.LittleEndian.PutUint16(file[46:], s)
		binary.LittleEndian.PutUint16(file[70:], uint16(c.datatype))
		binary.LittleEndian.PutUint16(file[72:], uint16(8*c.bytes))
		binary.LittleEndian.PutUint32(file[108:], math.Float32bits(352))
		for i := range n {
			v := value(i)
			switch c.bytes {
			case 1:
				file = append(file, byte(v))
			case 2:
				file = binary.LittleEndian.AppendUint16(file, v&0x7fff)
			case 3:
				file = append(file, byte(v), byte(v>>8), byte(v>>3))
			}
		}
		vol, err := Decode(bytes.NewReader(file))
		if err != nil {
			t.Fatalf("datatype %d: %v", c.datatype, err)
		}
		if len(vol.raw) != 2 {
			t.Fatalf("datatype %d: %d segments, want 2", c.datatype, len(vol.raw))
		}
		var f []float32
		var rgb []uint8
		for k := range s {
			if c.bytes == 3 {
				rgb = vol.RGBSlice(k, rgb)
			} else {
				f = vol.Slice(k, f)
			}
			for j := range w * h {
				i := k*w*h + j
				v := value(i)
				switch c.bytes {
				case 1:
					if f[j] != float32(byte(v)) {
						t.Fatalf("uint8 voxel %d: %g, want %d", i, f[j], byte(v))
					}
				case 2:
					if f[j] != float32(v&0x7fff) {
						t.Fatalf("int16 voxel %d: %g, want %d", i, f[j], v&0x7fff)
					}
				case 3:
					if rgb[3*j] != byte(v) || rgb[3*j+1] != byte(v>>8) || rgb[3*j+2] != byte(v>>3) {
						t.Fatalf("RGB voxel %d: %v", i, rgb[3*j:3*j+3])
					}
				}
			}
		}
	}
}

// TestOneSlice: an image of one slice whose plane is coronal (its rows
// along S) is read as stored, not reoriented into a stack of rows.
func TestOneSlice(t *testing.T) {
	b, err := os.ReadFile("testdata/u16_2d.nii")
	if err != nil {
		t.Fatal(err)
	}
	c := bytes.Clone(b)
	// sform_code 1, srow: i along R, j along S, k along A.
	binary.LittleEndian.PutUint16(c[254:], 1)
	for i, v := range []float32{1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0} {
		binary.LittleEndian.PutUint32(c[280+4*i:], math.Float32bits(v))
	}
	v, err := Decode(bytes.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	if v.Width != 7 || v.Height != 5 || v.Slices != 1 {
		t.Errorf("a coronal 2-D image read as %d×%d×%d, want 7×5×1 as stored", v.Width, v.Height, v.Slices)
	}
	orig, _ := Decode(bytes.NewReader(b))
	if !slices.Equal(v.Slice(0, nil), orig.Slice(0, nil)) {
		t.Errorf("its values moved")
	}
}
