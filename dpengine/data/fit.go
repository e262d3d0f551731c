package data

import "fmt"

// Fit is the model input a loader shrinks large images to as it reads
// them (LoadFitted). The zero Fit keeps every image as it is.
//
// A folder of photos held at full size takes memory for the photos, not
// for the model's input (a 12-megapixel photo is 36 MB decoded, 150 KB at
// 224×224), and every batch filters its photos anew. Fitted, an image
// whose pixels are at least Height·Width is resized once, as it is
// decoded, to the Height×Width window that Resize takes from it, and only
// that window is kept, rounded to uint8 — as a PIL-based torchvision
// pipeline's Resize (and CenterCrop) returns a uint8 image. A batch then
// copies the window, augments and normalises it. The values differ from
// an unfitted view's by that rounding only, half a level at most.
// Images with fewer pixels than the input are kept as they are: holding
// their resize would take more memory, not less.
type Fit struct {
	// Height and Width are the model's input size.
	Height, Width int
	// Resize is the view's resize (Preprocess.Resize).
	Resize Resize
}

// fits reports whether an h×w image is fitted.
func (f Fit) fits(h, w int) bool {
	return f.Height > 0 && int64(h)*int64(w) >= int64(f.Height)*int64(f.Width)
}

// check reports a Fit no view could use.
func (f Fit) check() error {
	if f == (Fit{}) {
		return nil
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
	return fmt.Sprintf("%d×%d (%s)", f.Height, f.Width, f.Resize)
}

// matches reports whether a view of h×w resized as r reads f's windows.
func (f Fit) matches(h, w int, r Resize) bool {
	return f.Height == h && f.Width == w && f.Resize.Crop == r.Crop &&
		(!r.Crop || f.Resize.short(h, w) == r.short(h, w))
}

// fitPixels returns the fitted window of an image of c channels and
// sh×sw pixels: the view's resize of it, with no channel conversion,
// augmentation or normalisation, rounded half up to uint8 (PIL's
// rounding of its resampled values). A stretched image of the fit's size
// is returned as it is.
func fitPixels(pix []uint8, c, sh, sw int, f Fit) []uint8 {
	H, W := f.Height, f.Width
	if !f.Resize.Crop && sh == H && sw == W {
		return pix
	}
	v := &View{
		p:     Preprocess{Channels: c, Height: H, Width: W},
		mix:   make([]chanMix, c),
		scale: make([]float32, c),
		shift: make([]float32, c),
		lut:   make([][256]float32, c), // read only by an exact copy, which returned above
	}
	for k := range c {
		v.mix[k] = chanMix{n: 1, ch: [3]int{k}, w: [3]float32{1}}
		v.scale[k] = 1
	}
	buf := make([]float32, c*H*W)
	v.fillPixels(buf, pix, sh, sw, newSizeMap(sh, sw, H, W, f.Resize), augDraw{})
	out := make([]uint8, len(buf))
	for k, x := range buf {
		// Every value is a convex combination of pixels: within [0, 255]
		// but for float rounding, which the clamp absorbs.
		out[k] = uint8(min(max(x+0.5, 0), 255))
	}
	return out
}

// FitTo returns m fitted to f as LoadFitted fits a folder while it reads
// it: for images built by NewImages, or loaded unfitted. Samples with
// fewer pixels than f's input, and the labels, are shared with m. m must
// not be fitted already.
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
	out := &Images{spec: m.spec, classes: m.classes, labels: m.labels, channels: m.channels, sources: m.sources, fit: f}
	out.samples = make([][]uint8, m.Len())
	out.sizes = make([][2]int32, m.Len())
	uniform := true
	for i := range m.Len() {
		h, w := m.Size(i)
		pix := m.Pixels(i)
		if f.fits(h, w) {
			pix = fitPixels(pix, m.channels, h, w, f)
			h, w = f.Height, f.Width
		}
		out.samples[i], out.sizes[i] = pix, [2]int32{int32(h), int32(w)}
		uniform = uniform && out.sizes[i] == out.sizes[0]
	}
	if uniform {
		out.h, out.w = int(out.sizes[0][0]), int(out.sizes[0][1])
		n := m.channels * out.h * out.w
		out.pix = make([]uint8, m.Len()*n)
		for i, s := range out.samples {
			copy(out.pix[i*n:], s)
		}
		out.samples, out.sizes = nil, nil
	}
	return out, nil
}
