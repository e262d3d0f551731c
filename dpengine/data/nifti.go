package data

import (
	"bufio"
	"fmt"
	"image"
	"math"
	"os"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
	"github.com/dpfinetune/dpfinetune/internal/nifti"
)

// A NIfTI image (.nii, .nii.gz: internal/nifti) is read as a multi-frame
// DICOM object is: a 3-D volume, in its closest canonical orientation
// (RAS+, as nibabel's as_closest_canonical reorients it), has its slices
// (planes of constant z: axial ones, for a head or body scan) for frames —
// one picked or projected by Fit.Frame, every slice a sample, a clip's T —
// and a 2-D image is one image. A slice is an image as viewers display it
// (np.rot90 of the canonical array[:, :, k]: row 0 the front, the patient's
// right on the right), its scaled values (scl_slope, scl_inter) mapped to
// 8 bits through Fit.Window's windows where given, as a DICOM image's
// Modality LUT output is, or through its own range (WindowRange), else
// through the file's display range (cal_min to cal_max) where it gives
// one, else through the volume's range, the same for every slice; a voxel
// that is NaN is black, and projections leave NaNs out.

// isNIfTI reports whether path is named as a NIfTI image: .nii or .nii.gz,
// in any case.
func isNIfTI(path string) bool {
	n := strings.ToLower(path)
	return strings.HasSuffix(n, ".nii") || strings.HasSuffix(n, ".nii.gz")
}

// niftiHeader reads the header of the NIfTI image at path.
func niftiHeader(path string) (nifti.Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nifti.Header{}, err
	}
	defer f.Close()
	h, err := nifti.DecodeHeader(f)
	if err != nil {
		return nifti.Header{}, fmt.Errorf("%s: corrupt or unsupported image: %v", path, err)
	}
	return h, nil
}

// niftiFrames is a NIfTI image's slices, as fileFrames counts a DICOM
// file's frames: held to maxFramesEach (as decodeNIfTI holds every
// volume), and an uncompressed file's voxels to its size.
func niftiFrames(path string) (int, error) {
	h, err := niftiHeader(path)
	if err != nil {
		return 0, err
	}
	if h.Slices > maxFramesEach {
		return 0, fmt.Errorf("%s: a volume of %d slices, over the limit of %d", path, h.Slices, maxFramesEach)
	}
	if fi, err := os.Stat(path); err == nil && !strings.HasSuffix(strings.ToLower(path), ".gz") && h.Bytes() > fi.Size() {
		return 0, fmt.Errorf("%s: %d×%d×%d voxels in a file of %d bytes", path, h.Width, h.Height, h.Slices, fi.Size())
	}
	return h.Slices, nil
}

// decodeNIfTI decodes the NIfTI image at path into the images of its
// slices numbered in want (from 1, increasing; nil: the one dcm.Frame
// picks or projects), giving each to each with its number (0 for a
// projection); the volume is admitted — its voxels and a slice's values
// — before it is read, and each image before it is kept.
func decodeNIfTI(path string, dcm dicom.Options, admit admitFunc, want []int, each func(k int, d decoded) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: corrupt or unsupported image: the decoder failed: %v", path, p)
		}
	}()
	h, err := niftiHeader(path)
	if err != nil {
		return err
	}
	if int64(h.Width)*int64(h.Height) > maxImagePixels {
		return fmt.Errorf("%s: slices of %d×%d pixels, over the limit of %d pixels", path, h.Width, h.Height, maxImagePixels)
	}
	if h.Slices > maxFramesEach {
		// No scan has as many; a projection's cost a slice would be
		// the file's to choose.
		return fmt.Errorf("%s: a volume of %d slices, over the limit of %d", path, h.Slices, maxFramesEach)
	}
	if want == nil && !dcm.Frame.Projection() {
		if h.Slices > 1 && dcm.Frame.Kind == dicom.FrameNone {
			return fmt.Errorf("%s: %w: a volume of %d slices and no slice chosen", path, dicom.ErrMultiFrame, h.Slices)
		}
		k, err := dcm.Frame.Index(h.Slices)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		want = []int{k + 1}
	}
	if dcm.Frame.Projection() && h.RGB() {
		return fmt.Errorf("%s: a %s projection of an RGB image: projections are of grayscale images (choose a slice)", path, dcm.Frame)
	}
	// The stored voxels, and a slice's values or a projection's sums,
	// counts and values (24 bytes a pixel).
	decoder := h.Bytes() + 24*int64(h.Width)*int64(h.Height)
	// Named with the volume's size: its slices are what decodes.
	what := fmt.Sprintf("%s (a volume of %d×%d×%d voxels)", path, h.Width, h.Height, h.Slices)
	if admit != nil {
		if err := admit(what, h.Width, h.Height, decoder); err != nil {
			return err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	vol, err := nifti.Decode(bufio.NewReader(f))
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: corrupt or unsupported image: %v", path, err)
	}
	m := newNIfTIMapper(vol, dcm)
	if dcm.Frame.Projection() && want == nil {
		d, err := toDecoded(m.gray(m.project(dcm.Frame.Kind)), "nifti", path)
		if err != nil {
			return err
		}
		return each(0, d)
	}
	for i, k := range want {
		if k < 1 || k > h.Slices {
			return fmt.Errorf("%s: %w: slice %d of a volume of %d", path, dicom.ErrNoFrame, k, h.Slices)
		}
		if i > 0 && admit != nil {
			if err := admit(what, h.Width, h.Height, decoder); err != nil {
				return err
			}
		}
		var img image.Image
		if vol.RGB() {
			img = m.rgb(k - 1)
		} else {
			img = m.gray(vol.Slice(k-1, m.buf))
		}
		d, err := toDecoded(img, "nifti", path)
		if err != nil {
			return err
		}
		if err := each(k, d); err != nil {
			return err
		}
	}
	return nil
}

// niftiMapper maps a volume's slices to 8-bit images.
type niftiMapper struct {
	vol      *nifti.Volume
	windows  []dicom.Window
	ownRange bool    // each image through its own range (dicom.Options.OwnRange)
	lo, hi   float64 // the range mapped to [0, 1] without windows
	buf      []float32
}

func newNIfTIMapper(vol *nifti.Volume, dcm dicom.Options) *niftiMapper {
	m := &niftiMapper{vol: vol, windows: dcm.Windows, ownRange: dcm.OwnRange && len(dcm.Windows) == 0}
	switch {
	case vol.RGB() || len(dcm.Windows) > 0 || m.ownRange:
	case vol.CalMax > vol.CalMin:
		m.lo, m.hi = vol.CalMin, vol.CalMax
	default:
		m.lo, m.hi = vol.Range()
	}
	return m
}

// project combines every slice's values pixel by pixel (the maximum, the
// mean or the minimum; NaNs left out, a pixel NaN in every slice NaN).
func (m *niftiMapper) project(kind dicom.FrameKind) []float32 {
	n := m.vol.Width * m.vol.Height
	acc := make([]float64, n)
	cnt := make([]int32, n)
	for k := range m.vol.Slices {
		m.buf = m.vol.Slice(k, m.buf)
		for i, x := range m.buf {
			v := float64(x)
			switch {
			case v != v:
				continue
			case cnt[i] == 0:
				acc[i] = v
			case kind == dicom.FrameMax:
				acc[i] = max(acc[i], v)
			case kind == dicom.FrameMin:
				acc[i] = min(acc[i], v)
			default:
				acc[i] += v
			}
			cnt[i]++
		}
	}
	out := make([]float32, n)
	for i := range out {
		switch {
		case cnt[i] == 0:
			out[i] = float32(math.NaN())
		case kind == dicom.FrameMean:
			out[i] = float32(acc[i] / float64(cnt[i]))
		default:
			out[i] = float32(acc[i])
		}
	}
	return out
}

// level maps a value to [0, 1]: through window w, else the mapper's
// range; NaN to 0.
func (m *niftiMapper) level(v float64, w *dicom.Window) float64 {
	switch {
	case v != v:
		return 0
	case w != nil:
		return w.Level(v)
	case m.hi > m.lo:
		return (v - m.lo) / (m.hi - m.lo)
	}
	return 0
}

// gray is a slice's (or a projection's) values as an 8-bit image, flipped
// to the viewers' orientation: one channel, or three for three windows.
func (m *niftiMapper) gray(vals []float32) image.Image {
	w, h := m.vol.Width, m.vol.Height
	if m.ownRange {
		m.lo, m.hi = math.Inf(1), math.Inf(-1)
		for _, v := range vals {
			if v == v {
				m.lo, m.hi = min(m.lo, float64(v)), max(m.hi, float64(v))
			}
		}
	}
	eight := func(y float64) uint8 { return uint8(math.Round(min(max(y, 0), 1) * 255)) }
	r := image.Rect(0, 0, w, h)
	if len(m.windows) == 3 {
		img := image.NewNRGBA(r)
		for y := range h {
			row := vals[(h-1-y)*w : (h-y)*w]
			for x, v := range row {
				px := img.Pix[4*(y*w+x):]
				for c := range 3 {
					px[c] = eight(m.level(float64(v), &m.windows[c]))
				}
				px[3] = 0xff
			}
		}
		return img
	}
	var win *dicom.Window
	if len(m.windows) == 1 {
		win = &m.windows[0]
	}
	img := image.NewGray(r)
	for y := range h {
		row := vals[(h-1-y)*w : (h-y)*w]
		for x, v := range row {
			img.Pix[y*w+x] = eight(m.level(float64(v), win))
		}
	}
	return img
}

// rgb is an RGB volume's slice k as an image, flipped as gray flips.
func (m *niftiMapper) rgb(k int) image.Image {
	w, h := m.vol.Width, m.vol.Height
	src := m.vol.RGBSlice(k, nil)
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			s, d := src[3*((h-1-y)*w+x):], img.Pix[4*(y*w+x):]
			d[0], d[1], d[2], d[3] = s[0], s[1], s[2], 0xff
		}
	}
	return img
}
