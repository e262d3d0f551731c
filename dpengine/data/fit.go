package data

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// Fit is the model input a loader shrinks large images to as it reads
// them (LoadFitted). The zero Fit keeps every image as it is.
//
// A folder of photos held at full size takes memory for the photos, not
// for the model's input (a 12-megapixel photo is 36 MB decoded, 150 KB at
// 224×224), and every batch filters its photos anew. Fitted, an image
// whose pixels are at least Height·Width is resized once, as it is
// decoded, to the Height×Width window that Resize takes from it, and only
// that window is kept, in 8 bits: resized as PIL resizes an 8-bit image,
// bit for bit — the window a PIL-based torchvision pipeline's Resize (and
// CenterCrop) returns. A batch then copies the window, augments and
// normalises it. The values differ from an unfitted view's (the same
// filter in float, rounded nowhere) by PIL's roundings, within a level.
// Images with fewer pixels than the input are kept as they are: holding
// their resize would take more memory, not less.
type Fit struct {
	// Height and Width are the model's input size.
	Height, Width int
	// Resize is the view's resize (Preprocess.Resize).
	Resize Resize
	// Gray converts every RGB image to gray as it is decoded, before any
	// resize, as PIL's convert("L") does (a gray model's pipeline): the
	// same 8-bit levels, and a third of the memory. Without it a gray
	// view mixes the channels of the resized image instead.
	Gray bool
	// Whole keeps each image whole, for a random resized crop to draw
	// its box from (Augment.ResizedCrop): an image whose shorter side
	// exceeds S — the centre crop's shorter side, Resize.Short or
	// round(8/7·max(Height, Width)), 256 for 224 — is resized, as PIL
	// resizes it, to that shorter side, its aspect ratio kept, and
	// nothing is cropped (a view then resizes and crops it as it would
	// the photo). Smaller images are kept as they are.
	Whole bool
	// Window, where not empty, is the VOI window (or three: an RGB image
	// of three windows) every DICOM image is read through in place of its
	// file's own, as dicom.ParseWindows reads it: "-600,1500" for a CT's
	// lung window, "40,80/80,200/600,2800"; or WindowRange, each image
	// through its own range of values. A NIfTI image's scaled values and a
	// 16-bit grayscale PNG's or TIFF's values are read through it too
	// (such a photo's high bytes without it); colour images and 8-bit
	// photos are read as without it.
	Window string
	// Frame, where not empty, chooses the image of a multi-frame DICOM
	// object (a cine loop, an enhanced CT or MR volume), as
	// dicom.ParseFrame reads it: a frame ("first", "middle", "last", a
	// number from 1) or a projection of the frames ("max", "mean",
	// "min"). Without it such a file fails the load (dicom.ErrMultiFrame).
	Frame string
	// Clip, above 0, makes each file a clip of that many frames for a
	// video or volume model (ClipView): a multi-frame DICOM object's frames
	// picked evenly from its first to its last (clipFrames), each fitted
	// as an image is; every file must have several frames. Frame must be
	// empty.
	Clip int
	// Series makes a folder's and a CSV listing's examples series (the
	// class directories' sub-directories; the listed paths), and predict's
	// the directories of slices under its paths: each a directory of
	// single-frame DICOM images, read as one multi-frame object is
	// (series.go).
	Series bool
}

// dicomOptions are the DICOM decoder's options f.Window and f.Frame make
// (checked by check).
func (f Fit) dicomOptions() dicom.Options {
	var o dicom.Options
	switch f.Window {
	case "":
	case WindowRange:
		o.OwnRange = true
	default:
		o.Windows, _ = dicom.ParseWindows(f.Window)
	}
	o.Frame, _ = dicom.ParseFrame(f.Frame)
	return o
}

// WindowRange is Fit.Window's value for each grayscale image read
// through its own range of values (its minimum black, its maximum white).
const WindowRange = "range"

// wholeShort is the shorter side a Whole fit resizes images to.
func (f Fit) wholeShort() int { return f.Resize.short(f.Height, f.Width) }

// fits reports whether an h×w image is resized.
func (f Fit) fits(h, w int) bool {
	if f.Whole {
		return f.Height > 0 && min(h, w) > f.wholeShort()
	}
	return f.Height > 0 && int64(h)*int64(w) >= int64(f.Height)*int64(f.Width)
}

// size is the size an h×w image is kept at: its fitted window's (or
// whole resize's) where it fits, else its own.
func (f Fit) size(h, w int) (int, int) {
	switch {
	case !f.fits(h, w):
		return h, w
	case f.Whole:
		rh, rw, _, _ := Resize{Crop: true, Short: f.wholeShort()}.layout(h, w, f.Height, f.Width)
		return rh, rw
	}
	return f.Height, f.Width
}

// check reports a Fit no view could use.
func (f Fit) check() error {
	if f.Window != "" && f.Window != WindowRange {
		if _, err := dicom.ParseWindows(f.Window); err != nil {
			return fmt.Errorf("data: fit: %w", err)
		}
		f.Window = ""
	}
	if _, err := dicom.ParseFrame(f.Frame); err != nil {
		return fmt.Errorf("data: fit: %w", err)
	}
	if f.Clip < 0 || f.Clip > maxFramesEach || (f.Clip > 0 && f.Frame != "") {
		return fmt.Errorf("data: fit: clips of %d frames with frame %q: want 1 to %d frames, and no frame choice", f.Clip, f.Frame, maxFramesEach)
	}
	f.Clip, f.Series = 0, false
	f.Frame = ""
	if f == (Fit{}) {
		return nil
	}
	if f.Height == 0 && f.Width == 0 && f.Resize == (Resize{}) {
		return nil // Gray alone: convert, keep the sizes
	}
	if f.Height <= 0 || f.Width <= 0 || int64(f.Height)*int64(f.Width) > 1<<28 {
		return fmt.Errorf("data: fit to %d×%d: want a positive size of at most 2^28 pixels", f.Height, f.Width)
	}
	if err := f.Resize.Check(f.Height, f.Width); err != nil {
		return fmt.Errorf("data: fit: %w", err)
	}
	return nil
}

// String describes f for errors, e.g. "224×224 (crop=256)".
func (f Fit) String() string {
	s := fmt.Sprintf("%d×%d (%s)", f.Height, f.Width, f.Resize)
	if f.Gray {
		s += ", gray"
	}
	if f.Whole {
		s += fmt.Sprintf(", whole at %d", f.wholeShort())
	}
	if f.Window != "" {
		s += ", DICOM window " + f.Window
	}
	if f.Frame != "" {
		s += ", DICOM frame " + f.Frame
	}
	if f.Clip > 0 {
		s += fmt.Sprintf(", clips of %d frames", f.Clip)
	}
	if f.Series {
		s += ", DICOM series"
	}
	return s
}

// matches reports whether a view of c channels, h×w, resized as r reads
// f's windows (a view of images made gray must be gray).
func (f Fit) matches(c, h, w int, r Resize) bool {
	if f.Gray && c != 1 {
		return false
	}
	if f.Height == 0 {
		return true // converted only
	}
	if f.Whole {
		// Whole images, resized and cropped by the view as photos are.
		return f.Height == h && f.Width == w
	}
	return f.Height == h && f.Width == w && f.Resize.Crop == r.Crop &&
		(!r.Crop || f.Resize.short(h, w) == r.short(h, w))
}

// pilGray is PIL's RGB→L conversion (Convert.c, L24): the ITU-R 601-2
// luma in 16-bit fixed point, rounded.
func pilGray(pix []uint8) []uint8 {
	n := len(pix) / 3
	out := make([]uint8, n)
	r, g, b := pix[:n], pix[n:2*n], pix[2*n:]
	for i := range out {
		out[i] = uint8((uint32(r[i])*19595 + uint32(g[i])*38470 + uint32(b[i])*7471 + 0x8000) >> 16)
	}
	return out
}

// fitPixels returns the fitted window of an image of c channels and
// sh×sw pixels: the view's resize of it as PIL resizes an 8-bit image
// (pilAxis's weights, two passes), with no channel conversion,
// augmentation or normalisation — torchvision's Resize (and CenterCrop)
// of a PIL image, bit for bit. A stretched image of the fit's size is
// returned as it is.
func fitPixels(pix []uint8, c, sh, sw int, f Fit) []uint8 {
	H, W := f.Height, f.Width
	if !f.Resize.Crop && sh == H && sw == W && !f.Whole {
		return pix
	}
	rh, rw, top, left := f.Resize.layout(sh, sw, H, W)
	if f.Whole {
		// The whole image, its shorter side resized: the window is all of it.
		H, W = f.size(sh, sw)
		rh, rw, top, left = H, W, 0, 0
	}
	rows, cols := pilAxis(sh, rh, top, H), pilAxis(sw, rw, left, W)
	out := make([]uint8, c*H*W)
	first, last := rows.lo[0], rows.lo[H-1]+rows.n[H-1]
	tmp := make([]uint8, (last-first)*W)
	acc := make([]int32, W)
	for k := range c {
		src := pix[k*sh*sw : (k+1)*sh*sw]
		// The horizontal pass first, into 8 bits, over the rows the
		// vertical pass reads (PIL's ImagingResampleInner); then the
		// vertical, a row of sums at a time. Integer sums: the order is
		// free, the bits PIL's.
		for y := first; y < last; y++ {
			cols.pass(tmp[(y-first)*W:(y-first+1)*W], src[y*sw:(y+1)*sw])
		}
		dst := out[k*H*W : (k+1)*H*W]
		for d := range H {
			for x := range acc {
				acc[x] = 1 << (pilBits - 1)
			}
			for y, ky := range rows.weights(d) {
				row := tmp[(rows.lo[d]-first+y)*W : (rows.lo[d]-first+y+1)*W]
				for x, v := range row {
					acc[x] += int32(v) * ky
				}
			}
			for x, a := range acc {
				dst[d*W+x] = pilClip(a)
			}
		}
	}
	return out
}

// pilWeights are one axis's resample coefficients as PIL computes them
// for its bilinear filter (libImaging/Resample.c, precompute_coeffs and
// normalize_coeffs_8bpp) for outputs off … off+out−1 of n: output d reads
// the n[d] inputs from lo[d] with the weights k[d·size:], fixed point with
// pilBits fraction bits.
type pilWeights struct {
	lo, n []int
	k     []int32
	size  int
}

// pilBits is PIL's PRECISION_BITS for 8-bit images: 32 − 8 − 2.
const pilBits = 22

// pilAxis returns the coefficients that resize in samples to n, for the
// outputs off … off+out−1 (a centre crop's window; 0 and n when
// stretched). The arithmetic is PIL's, operation for operation in
// float64, so that the fixed-point weights are its own: a triangle of
// half-width max(1, in/n) around each output's centre in the input,
// normalised, rounded half away from zero to 22 fraction bits.
func pilAxis(in, n, off, out int) pilWeights {
	scale := float64(in) / float64(n)
	filterscale := max(scale, 1)
	support := filterscale // the bilinear filter's support, 1, scaled
	w := pilWeights{lo: make([]int, out), n: make([]int, out), size: int(math.Ceil(support))*2 + 1}
	w.k = make([]int32, out*w.size)
	ks := make([]float64, w.size)
	for d := range out {
		center := (float64(off+d) + 0.5) * scale
		ss := 1.0 / filterscale
		xmin := max(int(center-support+0.5), 0)
		xmax := min(int(center+support+0.5), in) - xmin
		ww := 0.0
		for x := range xmax {
			t := math.Abs((float64(x+xmin) - center + 0.5) * ss)
			v := 0.0
			if t < 1 {
				v = 1 - t
			}
			ks[x] = v
			ww += v
		}
		for x := range xmax {
			if ww != 0 {
				ks[x] /= ww
			}
			w.k[d*w.size+x] = int32(0.5 + ks[x]*(1<<pilBits)) // ks ≥ 0: PIL's rounding of a non-negative weight
		}
		w.lo[d], w.n[d] = xmin, xmax
	}
	return w
}

// weights returns output d's weights.
func (w pilWeights) weights(d int) []int32 { return w.k[d*w.size : d*w.size+w.n[d]] }

// pass writes dst[d] for every output d from the inputs src as PIL's
// 8-bit resample pass: the weighted sum with half of the last bit added,
// shifted and clamped. The sums fit in int32 (PIL's INT32): weights of
// 2²² that sum to 1, times 255.
func (w pilWeights) pass(dst, src []uint8) {
	for d := range dst {
		seg := src[w.lo[d] : w.lo[d]+w.n[d]]
		acc := int32(1) << (pilBits - 1)
		for x, kx := range w.weights(d) {
			acc += int32(seg[x]) * kx
		}
		dst[d] = pilClip(acc)
	}
}

// pilClip is PIL's clip8: the fixed-point sum to [0, 255].
func pilClip(v int32) uint8 {
	if v >= 255<<pilBits+(1<<pilBits) {
		return 255
	}
	if v <= 0 {
		return 0
	}
	return uint8(v >> pilBits)
}

// FitTo returns m fitted to f as LoadFitted fits a folder while it reads
// it: for images built by NewImages, or loaded unfitted. Samples with
// fewer pixels than f's input, the labels and the users are shared with
// m. m must not be fitted already.
func (m *Images) FitTo(f Fit) (*Images, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f == (Fit{}) {
		return nil, fmt.Errorf("data: FitTo: no fit given")
	}
	if m.fit != (Fit{}) {
		return nil, fmt.Errorf("data: %s is fitted to %s already", m, m.fit)
	}
	out := &Images{spec: m.spec, classes: m.classes, labels: m.labels, channels: m.channels, sources: m.sources, fit: f,
		users: m.users, userNames: m.userNames, multiLabel: m.multiLabel, uncertain: m.uncertain,
		mapped: m.mapped} // samples kept as they are may be m's mapped ones
	if f.Gray {
		out.channels = 1
	}
	out.samples = make([][]uint8, m.Len())
	out.sizes = make([][2]int32, m.Len())
	uniform := true
	for i := range m.Len() {
		h, w := m.Size(i)
		pix := m.Pixels(i)
		if out.channels < m.channels {
			pix = pilGray(pix)
		}
		if f.fits(h, w) {
			pix = fitPixels(pix, out.channels, h, w, f)
			h, w = f.size(h, w)
		}
		out.samples[i], out.sizes[i] = pix, [2]int32{int32(h), int32(w)}
		uniform = uniform && out.sizes[i] == out.sizes[0]
	}
	if uniform {
		out.h, out.w = int(out.sizes[0][0]), int(out.sizes[0][1])
		n := out.channels * out.h * out.w
		out.pix = make([]uint8, m.Len()*n)
		for i, s := range out.samples {
			copy(out.pix[i*n:], s)
		}
		out.samples, out.sizes = nil, nil
	}
	return out, nil
}
