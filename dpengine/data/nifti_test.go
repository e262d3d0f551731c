package data

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// niftiFixtures are internal/nifti's fixtures (gen_nifti.py): every
// datatype, both byte orders and versions, gzip, scaling, a display
// range, NaNs, a 2-D image, RGB, and the refused.
func niftiFixtures(t testing.TB) []string {
	t.Helper()
	var files []string
	for _, g := range []string{"*.nii", "*.nii.gz"} {
		m, _ := filepath.Glob(filepath.Join("../../internal/nifti/testdata", g))
		files = append(files, m...)
	}
	if len(files) < 15 {
		t.Fatalf("%d NIfTI fixtures", len(files))
	}
	return files
}

// TestNIfTILikeServing: every slice choice, projection and window of
// every NIfTI fixture decodes as docs/serve_preprocess.py's nifti_images
// decodes it with nibabel — the same bytes, or an error on both sides (a
// 4-D image of three volumes, complex voxels, a projection of an RGB
// image, a slice past the last, no slice chosen in a volume) — and
// every slice (all) as its slices one by one.
func TestNIfTILikeServing(t *testing.T) {
	const py = "/usr/bin/python3"
	if exec.Command(py, "-c", "import nibabel, numpy, PIL, onnx, torch, torchvision").Run() != nil {
		t.Skip("no /usr/bin/python3 with nibabel, numpy, PIL, onnx, torch and torchvision")
	}
	files := niftiFixtures(t)
	choices := []string{"", "first", "middle", "last", "2", "max", "mean", "min"}
	windows := []string{"", "40,400", "-100,50/0,1/100,3000", WindowRange}
	compared, refused := likeServing(t, "nifti_images", files, choices, windows)
	if compared < 250 || refused < 40 {
		t.Errorf("%d images compared, %d refused on both sides: want at least 250 and 40", compared, refused)
	}
	t.Logf("%d images the same bytes as serve_preprocess, %d refused on both sides", compared, refused)

	// Every slice, in one pass, as each slice alone.
	for _, p := range files {
		n, err := fileFrames(p)
		if err != nil {
			continue
		}
		all := make([]int, n)
		for k := range all {
			all[k] = k + 1
		}
		got := 0
		err = decodeFrames(p, dicom.Options{}, func(string, int, int, int64) error { return nil }, all, func(k int, d decoded) error {
			one, err := decodeImage(p, dicom.Options{Frame: dicom.Frame{Kind: dicom.FrameNumber, Number: k}}, nil)
			if err != nil || string(one.pix) != string(d.pix) {
				t.Errorf("%s: slice %d of all: not slice %d alone (%v)", p, k, k, err)
			}
			got++
			return nil
		})
		if err != nil || got != n {
			t.Errorf("%s: %d of %d slices, %v", p, got, n, err)
		}
	}
}

// TestNIfTIFolder: a folder of NIfTI volumes trains as DICOM multi-frame
// files do — a slice picked, every slice a sample (each file a user), a
// clip — and a volume without a slice chosen is refused, naming the file
// and --frame's choices.
func TestNIfTIFolder(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ class, file string }{
		{"a", "u8.nii"}, {"a", "i16_scaled_gz.nii.gz"}, {"b", "f64_v2.nii"}, {"b", "i32_ext.nii"}, {"b", "u16_2d.nii"},
	} {
		b, err := os.ReadFile(filepath.Join("../../internal/nifti/testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, c.class), 0o755)
		if err := os.WriteFile(filepath.Join(dir, c.class, strings.ToUpper(c.file)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := ParseSpec("folder:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFitted(spec, Fit{}); err == nil || !strings.Contains(err.Error(), ".NII") || !strings.Contains(err.Error(), "no slice chosen") {
		t.Errorf("volumes without a slice chosen: %v", err)
	}
	im, err := LoadFitted(spec, Fit{Frame: "middle", Height: 8, Width: 8})
	if err != nil {
		t.Fatal(err)
	}
	if im.Len() != 5 || im.NumUsers() != 0 {
		t.Errorf("middle slices: %d samples of %d users, want 5 of none", im.Len(), im.NumUsers())
	}
	all, err := LoadFitted(spec, Fit{Frame: "all", Height: 8, Width: 8})
	if err != nil {
		t.Fatal(err)
	}
	// u8 3 slices, i16 4, f64 5, i32 2, the 2-D image 1.
	if all.Len() != 15 || all.NumUsers() != 5 {
		t.Errorf("every slice: %d samples of %d users, want 15 of 5", all.Len(), all.NumUsers())
	}
	if _, err := LoadFitted(spec, Fit{Clip: 3, Height: 8, Width: 8}); err == nil || !strings.Contains(err.Error(), "U16_2D.NII: a single image") {
		t.Errorf("a clip of a 2-D image: %v", err)
	}
}

// FuzzNIfTI decodes arbitrary bytes as a .nii file through the loader,
// with a slice choice and windows: an error, never a panic, and an image
// of its header's slice size.
func FuzzNIfTI(f *testing.F) {
	for _, p := range niftiFixtures(f) {
		if b, err := os.ReadFile(p); err == nil && !strings.HasSuffix(p, ".gz") {
			f.Add(b, uint8(0))
			f.Add(b, uint8(5))
		}
	}
	choices := []string{"", "first", "middle", "last", "2", "max", "mean", "min"}
	f.Fuzz(func(t *testing.T, b []byte, c uint8) {
		p := filepath.Join(t.TempDir(), "x.nii")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		fr, _ := dicom.ParseFrame(choices[int(c)%len(choices)])
		opts := dicom.Options{Frame: fr}
		if c >= 128 {
			opts.Windows = []dicom.Window{{Center: 40, Width: 400}, {Center: 0, Width: 1}, {Center: -1e300, Width: 1e300}}
		}
		admit := func(_ string, w, h int, decoder int64) error {
			if decoder > 1<<26 {
				return fmt.Errorf("%d bytes", decoder)
			}
			return nil
		}
		d, err := decodeImage(p, opts, admit)
		if err != nil {
			return
		}
		h, err := niftiHeader(p)
		ch := map[bool]int{true: 1, false: 3}[d.gray]
		if err != nil || d.w != h.Width || d.h != h.Height || len(d.pix) != ch*d.w*d.h {
			t.Errorf("%d×%d image of %d bytes (gray %v) from a header of %d×%d (%v)", d.w, d.h, len(d.pix), d.gray, h.Width, h.Height, err)
		}
	})
}
