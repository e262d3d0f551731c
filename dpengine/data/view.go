package data

import (
	"fmt"
	"math"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Dataset is what training and evaluation read: a fixed set of labelled
// samples that fills float32 batches of the model's input shape.
type Dataset interface {
	// Len returns the number of samples.
	Len() int
	// NumClasses returns the number of classes; labels lie in
	// [0, NumClasses()).
	NumClasses() int
	// Label returns the label of sample i.
	Label(i int) int
	// Labels returns a copy of all labels, indexed by sample.
	Labels() []int64
	// SampleShape returns the shape of one filled sample, (C,H,W) for
	// images. The caller must not modify it.
	SampleShape() []int
	// Fill writes the samples at indices, preprocessed, into x as an
	// (N,C,H,W) batch with N = len(indices), and their labels into y
	// unless y is nil. x must hold at least N·C·H·W values and y at least
	// N; values past those are left alone. Augmentation, if configured,
	// draws from rng; a nil rng turns it off (evaluation). Fill does not
	// allocate, and may run concurrently with other Fill calls that use
	// different buffers and generators.
	Fill(x []float32, y []int64, indices []int, rng *rand.Rand) error
}

// MultiLabeled is a dataset that may be multi-label: where MultiLabel
// reports true, a sample's label is a set of the NumClasses labels (at
// most MaxLabels) as internal/labelset says — to 62 labels its bits, bit
// j label j; past them an interned set's handle, labelset.Expand giving
// its words —, and a sample may have none or several.
type MultiLabeled interface {
	MultiLabel() bool
}

// UncertainTargetsOf returns d's labels' soft targets of their uncertain
// entries (Images.UncertainTargets), nil where d has none.
func UncertainTargetsOf(d any) []float64 {
	if u, ok := d.(interface{ UncertainTargets() []float64 }); ok {
		return u.UncertainTargets()
	}
	return nil
}

// IsMultiLabel reports whether d (a Dataset, Images) is a multi-label
// dataset (MultiLabeled).
func IsMultiLabel(d any) bool {
	m, ok := d.(MultiLabeled)
	return ok && m.MultiLabel()
}

// Preprocess says how a sample becomes model input. The steps, in order:
//
//  1. Resize each channel to Height×Width (see Resize: stretched, or the
//     shorter side scaled and the centre cropped) by bilinear
//     interpolation with half-pixel centres, antialiased along an axis
//     that shrinks: PyTorch's interpolate(mode="bilinear",
//     align_corners=False, antialias=True), torchvision's Resize default
//     since 0.17 (on an axis that grows, antialiasing changes nothing).
//     A shrunk axis reads every source pixel under a triangle filter as
//     wide as the scale, where plain bilinear reads two and aliases.
//     Samples already of that size are copied exactly when stretched.
//  2. Convert channels: 1→3 replicates the gray channel; 3→1 takes the
//     ITU-R BT.601 luma 0.299 R + 0.587 G + 0.114 B.
//  3. Augment (training only): random crop with zero padding, then
//     horizontal flip (see Augment).
//  4. Scale to [0,1] (divide by 255) and normalise: (v - Mean[c]) / Std[c].
//     Padding pixels are 0 before normalisation, as in torchvision.
//
// Resizing and channel conversion are linear and commute, so their order
// does not matter. No rounding to uint8 happens between the steps, except
// in images fitted as they loaded (see Fit): PIL resized them, in effect,
// to 8 bits.
type Preprocess struct {
	// Channels, Height and Width are the model's per-sample input shape.
	// Zero means the source's channel count and (uniform) size.
	Channels, Height, Width int
	// Norm is the normalisation; see Norm for which lengths are accepted.
	// The zero Norm leaves values in [0,1].
	Norm Norm
	// Augment is applied by Fill when given a non-nil generator.
	Augment Augment
	// Resize says how a sample of another size becomes Height×Width.
	Resize Resize
}

// Resize says how a sample of another size than the model's becomes it.
// The zero Resize stretches each axis to the model's size.
type Resize struct {
	// Crop keeps the aspect ratio: the shorter side is scaled to Short
	// (the longer to ⌊Short·long/short⌋), then the centre Height×Width
	// is taken — torchvision's Resize(Short) then CenterCrop, the usual
	// evaluation transform of ImageNet models.
	Crop bool
	// Short is the shorter side's size with Crop; 0 means
	// round(8/7·max(Height, Width)), 256 for 224 as in torchvision's
	// references. It must be at least max(Height, Width).
	Short int
}

// ParseResize parses a resize flag: "stretch" (or empty), "crop", or
// "crop=S" (the shorter side scaled to S before the centre crop).
func ParseResize(s string) (Resize, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch {
	case t == "" || t == "stretch":
		return Resize{}, nil
	case t == "crop":
		return Resize{Crop: true}, nil
	case strings.HasPrefix(t, "crop="):
		n, err := strconv.Atoi(t[len("crop="):])
		if err != nil || n <= 0 || n > 1<<16 {
			return Resize{}, fmt.Errorf("resize %q: want crop=S with S the shorter side's size in pixels, 1 to 65536", s)
		}
		return Resize{Crop: true, Short: n}, nil
	}
	return Resize{}, fmt.Errorf("resize %q: want stretch, crop or crop=S", s)
}

// String formats r as ParseResize reads it.
func (r Resize) String() string {
	switch {
	case !r.Crop:
		return "stretch"
	case r.Short > 0:
		return "crop=" + strconv.Itoa(r.Short)
	}
	return "crop"
}

// Check reports whether r can resize to a model input of h×w: a crop's
// shorter side must cover the input.
func (r Resize) Check(h, w int) error {
	if r.Crop && r.short(h, w) < max(h, w) {
		return fmt.Errorf("resize %s: the shorter side's %d pixels are fewer than the %d×%d input's", r, r.short(h, w), h, w)
	}
	return nil
}

// short returns the shorter side's size for a model input of h×w.
func (r Resize) short(h, w int) int {
	if r.Short > 0 {
		return r.Short
	}
	return int(math.Round(float64(max(h, w)) * 8 / 7))
}

// Luma weights, ITU-R BT.601 (the weights of PIL's convert("L") and
// torchvision's rgb_to_grayscale).
const (
	lumaR = 0.299
	lumaG = 0.587
	lumaB = 0.114
)

// tap is one output coordinate of a bilinear resize along one axis.
type tap struct {
	i0, i1 int32   // source indices
	f      float32 // weight of i1; 1-f goes to i0
}

// span is one output coordinate of an antialiased resize along one axis:
// source pixels lo … lo+n-1 with the weights w[off:off+n].
type span struct{ lo, n, off int32 }

// axisMap maps one axis of a source size to the model's: bilinear taps
// where the axis grows or keeps its size (taps), antialiased spans where
// it shrinks; spans and w are set either way (the general fill reads
// them where the other axis shrinks).
type axisMap struct {
	taps  []tap // nil where the axis shrinks
	spans []span
	w     []float32
}

// sizeMap is the resize of one source size.
type sizeMap struct {
	rows, cols axisMap
	exact      bool // the source is copied: its size is the model's, stretched
}

// chanMix is one output channel as a weighted sum of source channels.
type chanMix struct {
	n  int
	ch [3]int
	w  [3]float32
}

// View is an Images with preprocessing: it implements Dataset. Build it
// with NewView; it is read-only and safe for concurrent use.
type View struct {
	src   *Images
	p     Preprocess
	mix   []chanMix
	scale []float32 // per output channel: 1/(255·std)
	shift []float32 // per output channel: -mean/std
	lut   [][256]float32
	sizes map[[2]int]*sizeMap // by source height and width
	shape []int               // C, H, W
}

var _ Dataset = (*View)(nil)

// NewView returns src preprocessed as p says. Its errors name the
// unsupported setting: channel counts other than equal, 1→3 or 3→1, and
// normalisations whose length fits neither 1 nor the channel count.
func NewView(src *Images, p Preprocess) (*View, error) {
	if src == nil || src.Len() == 0 {
		return nil, fmt.Errorf("data: empty dataset")
	}
	sc := src.Channels()
	if p.Channels == 0 {
		p.Channels = sc
	}
	if p.Height == 0 || p.Width == 0 {
		h, w, ok := src.UniformSize()
		if !ok {
			return nil, fmt.Errorf("data: %s: images of varied sizes need an explicit height and width", src)
		}
		if p.Height == 0 {
			p.Height = h
		}
		if p.Width == 0 {
			p.Width = w
		}
	}
	C, H, W := p.Channels, p.Height, p.Width
	if C <= 0 || H <= 0 || W <= 0 || int64(C)*int64(H)*int64(W) > 1<<30 {
		return nil, fmt.Errorf("data: input shape %d×%d×%d: want positive and at most 2^30 values", C, H, W)
	}
	if err := p.Augment.check(); err != nil {
		return nil, fmt.Errorf("data: augment: %v", err)
	}
	v := &View{src: src, p: p, shape: []int{p.Channels, p.Height, p.Width}}

	// Channel conversion.
	v.mix = make([]chanMix, C)
	for c := range v.mix {
		switch {
		case sc == C:
			v.mix[c] = chanMix{n: 1, ch: [3]int{c}, w: [3]float32{1}}
		case sc == 1 && C == 3:
			v.mix[c] = chanMix{n: 1, ch: [3]int{0}, w: [3]float32{1}}
		case sc == 3 && C == 1:
			v.mix[c] = chanMix{n: 3, ch: [3]int{0, 1, 2}, w: [3]float32{lumaR, lumaG, lumaB}}
		default:
			return nil, fmt.Errorf("data: cannot convert %d-channel images to %d channels (supported: the same count, 1→3 replicating gray, 3→1 luma)", sc, C)
		}
	}

	// Normalisation, folded with the 1/255 scaling into one affine map.
	if err := p.Norm.Validate(); err != nil {
		return nil, fmt.Errorf("data: norm %s: %v", p.Norm, err)
	}
	v.scale = make([]float32, C)
	v.shift = make([]float32, C)
	v.lut = make([][256]float32, C)
	for c := range C {
		mean, std := float32(0), float32(1)
		switch k := len(p.Norm.Mean); {
		case k == 0:
		case k == 1:
			mean, std = p.Norm.Mean[0], p.Norm.Std[0]
		case k == C:
			mean, std = p.Norm.Mean[c], p.Norm.Std[c]
		case k == 3 && C == 1:
			// An RGB normalisation for a gray model: weight the channel
			// statistics like the luma (exact for the mean, an
			// approximation for the standard deviation).
			mean = lumaR*p.Norm.Mean[0] + lumaG*p.Norm.Mean[1] + lumaB*p.Norm.Mean[2]
			std = lumaR*p.Norm.Std[0] + lumaG*p.Norm.Std[1] + lumaB*p.Norm.Std[2]
		default:
			return nil, fmt.Errorf("data: norm %s has %d values per statistic; the model takes %d channels (want 1 or %d)", p.Norm, k, C, C)
		}
		v.scale[c] = 1 / (255 * std)
		v.shift[c] = -mean / std
		for i := range 256 {
			v.lut[c][i] = float32(i)*v.scale[c] + v.shift[c]
		}
	}

	// Resize tables, one per distinct source size. A fitted source's
	// samples of the input's size are windows already (every image with
	// as many pixels was fitted, so no other sample has that size).
	if err := p.Resize.Check(H, W); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	fit := src.Fitted()
	if fit != (Fit{}) && !fit.matches(C, H, W, p.Resize) {
		return nil, fmt.Errorf("data: %s was fitted to %s as it loaded; a view of %d×%d (%s) must load it again (LoadFitted with that fit)", src, fit, H, W, p.Resize)
	}
	v.sizes = map[[2]int]*sizeMap{}
	for i := range src.Len() {
		h, w := src.Size(i)
		if h <= 0 || w <= 0 {
			return nil, fmt.Errorf("data: sample %d has size %d×%d", i, h, w)
		}
		if v.sizes[[2]int{h, w}] == nil {
			r := p.Resize
			if fit.Height > 0 && !fit.Whole && h == H && w == W {
				r = Resize{}
			}
			v.sizes[[2]int{h, w}] = newSizeMap(h, w, H, W, r)
		}
		if _, _, ok := src.UniformSize(); ok {
			break
		}
	}
	return v, nil
}

// layout returns the size rh×rw an sh×sw source is resized to for a
// model input of h×w, and the offsets of the window r takes from it.
func (r Resize) layout(sh, sw, h, w int) (rh, rw, top, left int) {
	rh, rw = h, w
	if r.Crop {
		s := r.short(h, w)
		if sh <= sw {
			rh, rw = s, int(int64(s)*int64(sw)/int64(sh))
		} else {
			rh, rw = int(int64(s)*int64(sh)/int64(sw)), s
		}
		// torchvision's CenterCrop: int(round((size - crop) / 2)),
		// Python's round halving to even.
		top = int(math.RoundToEven(float64(rh-h) / 2))
		left = int(math.RoundToEven(float64(rw-w) / 2))
	}
	return rh, rw, top, left
}

// newSizeMap returns the resize of an sh×sw source to h×w as r says.
func newSizeMap(sh, sw, h, w int, r Resize) *sizeMap {
	rh, rw, top, left := r.layout(sh, sw, h, w)
	return &sizeMap{
		rows:  newAxisMap(sh, rh, top, h),
		cols:  newAxisMap(sw, rw, left, w),
		exact: !r.Crop && sh == h && sw == w,
	}
}

// newAxisMap maps in source pixels to out of the resized axis's n pixels
// from off on (the centre crop's offset; 0 and n = out when stretched).
func newAxisMap(in, n, off, out int) axisMap {
	var m axisMap
	m.build(in, n, off, out)
	if in > n {
		m.taps = nil
	}
	return m
}

// build makes m newAxisMap's map, reusing m's slices (its taps left empty,
// not nil, where the axis shrinks).
func (m *axisMap) build(in, n, off, out int) {
	m.taps, m.spans, m.w = m.taps[:0], m.spans[:0], m.w[:0]
	if in <= n {
		m.taps = appendResizeTaps(m.taps, in, n, off, out)
		for _, t := range m.taps {
			if t.i1 == t.i0 {
				m.spans = append(m.spans, span{t.i0, 1, int32(len(m.w))})
				m.w = append(m.w, 1)
				continue
			}
			m.spans = append(m.spans, span{t.i0, 2, int32(len(m.w))})
			m.w = append(m.w, 1-t.f, t.f)
		}
		return
	}
	// PyTorch's antialiased weights (aten's upsample kernels, as PIL's):
	// a triangle filter stretched by the scale, centred on the output
	// pixel's source position, normalised over the pixels it covers.
	scale := float64(in) / float64(n)
	tri := func(j int, centre float64) float64 { return max(0, 1-math.Abs((float64(j)-centre+0.5)/scale)) }
	for d := off; d < off+out; d++ {
		centre := scale * (float64(d) + 0.5)
		lo := max(int(centre-scale+0.5), 0)
		hi := min(int(centre+scale+0.5), in)
		total := 0.0
		for j := lo; j < hi; j++ {
			total += tri(j, centre)
		}
		m.spans = append(m.spans, span{int32(lo), int32(hi - lo), int32(len(m.w))})
		for j := lo; j < hi; j++ {
			m.w = append(m.w, float32(tri(j, centre)/total))
		}
	}
}

// resizeTaps returns the bilinear taps of output samples off … off+out-1
// when in samples along one axis become n, with half-pixel centres
// (align_corners=False): source coordinate s = (d+0.5)·in/n - 0.5,
// clamped at 0. Only the taps asked for are made: a crop's resized axis
// may be far longer than the input (a 1×60000 image's shorter side
// scaled to 256).
func resizeTaps(in, n, off, out int) []tap { return appendResizeTaps(nil, in, n, off, out) }

// appendResizeTaps appends resizeTaps's taps to t.
func appendResizeTaps(t []tap, in, n, off, out int) []tap {
	start := len(t)
	t = slices.Grow(t, out)[:start+out]
	scale := float64(in) / float64(n)
	for k := range t[start:] {
		d := off + k
		s := scale*(float64(d)+0.5) - 0.5
		if s < 0 {
			s = 0
		}
		i0 := int(s)
		if i0 > in-1 {
			i0 = in - 1
		}
		i1 := i0
		if i0 < in-1 {
			i1 = i0 + 1
		}
		t[start+k] = tap{int32(i0), int32(i1), float32(s - float64(i0))}
	}
	return t
}

// Source returns the underlying dataset.
func (v *View) Source() *Images { return v.src }

// Preprocess returns the preprocessing, with zero shape fields filled in.
func (v *View) Preprocess() Preprocess { return v.p }

// CheckSources is the source dataset's CheckSources.
func (v *View) CheckSources() error { return v.src.CheckSources() }

// Fingerprint is the source dataset's Fingerprint.
func (v *View) Fingerprint() string { return v.src.Fingerprint() }

// Len returns the number of samples.
func (v *View) Len() int { return v.src.Len() }

// NumClasses returns the number of classes.
func (v *View) NumClasses() int { return v.src.NumClasses() }

// Label returns the label of sample i.
func (v *View) Label(i int) int { return v.src.Label(i) }

// MultiLabel reports whether the source is multi-label (Images.MultiLabel).
func (v *View) MultiLabel() bool { return v.src.MultiLabel() }

// Labels returns a copy of all labels, indexed by sample.
func (v *View) Labels() []int64 { return v.src.Labels() }

// SampleShape returns the shape of one filled sample, (C,H,W). The caller
// must not modify it.
func (v *View) SampleShape() []int { return v.shape }

// Classes returns the class names of the images.
func (v *View) Classes() []string { return v.src.Classes() }

// Fill implements Dataset.
func (v *View) Fill(x []float32, y []int64, indices []int, rng *rand.Rand) error {
	// A 224×224 RGB sample resized takes about 0.7 ms on one core: a
	// batch of 32 on one core was a third of a GPU's ResNet-50 step.
	return fillBatch(x, y, indices, v.src.labels, v.shape, v.p.Augment, rng, v)
}

// sampleFiller writes sample i, augmented as a says, into dst: a View's or
// a TensorView's own fill (an interface, not a method value, which Fill
// would allocate every call).
type sampleFiller interface {
	fillOne(dst []float32, i int, a augDraw)
	// sampleSize is sample i's stored height and width, from which a
	// random resized crop is drawn.
	sampleSize(i int) (h, w int)
}

// fillBatch is the Fill of a view f whose samples have shape (labels by
// sample): it checks the buffers and
// indices, writes the labels, and fills the samples, on several workers
// where the batch is large. The augmentation is drawn first, sample after
// sample, so that rng and x are left as one fill after another leaves
// them, whatever the number of workers.
func fillBatch(x []float32, y []int64, indices []int, labels []int64, shape []int, aug Augment, rng *rand.Rand, f sampleFiller) error {
	per := 1
	for _, d := range shape {
		per *= d
	}
	if len(x) < len(indices)*per {
		return fmt.Errorf("data: batch buffer holds %d values, want %d (%d samples of %s)", len(x), len(indices)*per, len(indices), dimsString(shape))
	}
	if y != nil && len(y) < len(indices) {
		return fmt.Errorf("data: label buffer holds %d values, want %d", len(y), len(indices))
	}
	n := len(labels)
	for k, i := range indices {
		if i < 0 || i >= n {
			return fmt.Errorf("data: batch position %d: sample index %d out of range [0,%d)", k, i, n)
		}
	}
	if y != nil {
		for k, i := range indices {
			y[k] = labels[i]
		}
	}
	workers := min(goruntime.GOMAXPROCS(0), len(indices), len(indices)*per/fillGrain)
	if workers <= 1 {
		for k, i := range indices {
			f.fillOne(x[k*per:(k+1)*per], i, aug.draw(rng, f, i))
		}
		return nil
	}
	augs := make([]augDraw, len(indices))
	for k, i := range indices {
		augs[k] = aug.draw(rng, f, i)
	}
	fillParallel(f, x, indices, per, augs, workers)
	return nil
}

// fillParallel fills the samples at indices on workers goroutines, with
// the augmentation drawn for each (a function of its own: the goroutines'
// captures would move fillBatch's variables to the heap on every call).
func fillParallel(f sampleFiller, x []float32, indices []int, per int, augs []augDraw, workers int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := int(next.Add(1) - 1); k < len(indices); k = int(next.Add(1) - 1) {
				f.fillOne(x[k*per:(k+1)*per], indices[k], augs[k])
			}
		})
	}
	wg.Wait()
}

// draw draws sample i's augmentation from rng (none without it): the
// crop offset in the padded image, or the resized crop's box in the
// stored image, then the flip, in torchvision's order.
func (a Augment) draw(rng *rand.Rand, f sampleFiller, i int) augDraw {
	var d augDraw
	if rng == nil {
		return d
	}
	if p := a.CropPad; p > 0 {
		d.dy = rng.IntN(2*p+1) - p
		d.dx = rng.IntN(2*p+1) - p
	}
	if a.ResizedCrop.Max > 0 {
		h, w := f.sampleSize(i)
		d.box = true
		d.top, d.left, d.bh, d.bw = resizedCropBox(rng, h, w, a.ResizedCrop)
	}
	if a.Flip {
		d.flip = rng.Float64() < 0.5
	}
	return d
}

// fillGrain is the output values per worker below which Fill stays on the
// calling goroutine: a 28×28 batch fills in tens of microseconds.
const fillGrain = 1 << 16

// augDraw is one sample's augmentation: the crop offset, or the resized
// crop's box (top, left, bh×bw, where box is set), and the flip.
type augDraw struct {
	dy, dx            int
	flip              bool
	box               bool
	top, left, bh, bw int
}

// resizedCropBox draws a box of an h×w image as torchvision's
// RandomResizedCrop.get_params does, ratio (3/4, 4/3): ten tries of an
// area fraction uniform in r and a log-uniform aspect ratio, the box's
// sides rounded half to even as Python's round, kept where it fits, at a
// uniform place; else the centre crop of the largest box within the
// ratios.
func resizedCropBox(rng *rand.Rand, h, w int, r AreaRange) (top, left, bh, bw int) {
	area := float64(h) * float64(w)
	logLo, logHi := math.Log(3.0/4), math.Log(4.0/3)
	for range 10 {
		target := area * (r.Min + (r.Max-r.Min)*rng.Float64())
		ratio := math.Exp(logLo + (logHi-logLo)*rng.Float64())
		cw := int(math.RoundToEven(math.Sqrt(target * ratio)))
		ch := int(math.RoundToEven(math.Sqrt(target / ratio)))
		if cw > 0 && cw <= w && ch > 0 && ch <= h {
			return rng.IntN(h - ch + 1), rng.IntN(w - cw + 1), ch, cw
		}
	}
	in := float64(w) / float64(h)
	switch {
	case in < 3.0/4:
		bw, bh = w, int(math.RoundToEven(float64(w)/(3.0/4)))
	case in > 4.0/3:
		bh, bw = h, int(math.RoundToEven(float64(h)*(4.0/3)))
	default:
		bh, bw = h, w
	}
	bh, bw = max(min(bh, h), 1), max(min(bw, w), 1)
	return (h - bh) / 2, (w - bw) / 2, bh, bw
}

// col returns the source column of output column x in a row of w values,
// flipped then shifted by the crop as d says, and whether it lies inside
// the row (outside, the output is padding).
func (d augDraw) col(x, w int) (int, bool) {
	if d.flip {
		x = w - 1 - x
	}
	x += d.dx
	return x, x >= 0 && x < w
}

// sampleSize implements sampleFiller: the stored image's size.
func (v *View) sampleSize(i int) (int, int) { return v.src.Size(i) }

// boxMaps are the resize maps of one resized crop's box, pooled so that
// a fill allocates none in the steady state.
var boxMaps = sync.Pool{New: func() any { return new(sizeMap) }}

// fillOne writes sample i into dst (C·H·W values), augmented as aug says.
func (v *View) fillOne(dst []float32, i int, aug augDraw) {
	H, W := v.p.Height, v.p.Width
	pix := v.src.Pixels(i)
	sh, sw := v.src.Size(i)
	if aug.box {
		// The box, resized to the input as the view resizes a whole
		// image (its own axis maps, shifted to the box), then flipped.
		sm := boxMaps.Get().(*sizeMap)
		sm.rows.build(aug.bh, H, 0, H)
		sm.cols.build(aug.bw, W, 0, W)
		sm.rows.shift(aug.top)
		sm.cols.shift(aug.left)
		sm.exact = false
		if aug.bh <= H && aug.bw <= W {
			// Both axes grow (or keep their size): bilinear taps.
			v.fillBilinear(dst, pix, sh, sw, sm, augDraw{flip: aug.flip})
		} else {
			v.fillFiltered(dst, pix, sh, sw, sm, augDraw{flip: aug.flip})
		}
		boxMaps.Put(sm)
		return
	}
	sm := v.sizes[[2]int{sh, sw}]
	if sm.rows.taps == nil || sm.cols.taps == nil {
		v.fillFiltered(dst, pix, sh, sw, sm, aug)
		return
	}
	v.fillBilinear(dst, pix, sh, sw, sm, aug)
}

// shift moves m's source indices by off (a box's origin in the image).
func (m *axisMap) shift(off int) {
	for k := range m.taps {
		m.taps[k].i0 += int32(off)
		m.taps[k].i1 += int32(off)
	}
	for k := range m.spans {
		m.spans[k].lo += int32(off)
	}
}

// fillBilinear is fillOne where no axis shrinks: two taps an axis.
func (v *View) fillBilinear(dst []float32, pix []uint8, sh, sw int, sm *sizeMap, aug augDraw) {
	C, H, W := v.p.Channels, v.p.Height, v.p.Width
	plane := sh * sw
	rt, ct := sm.rows.taps, sm.cols.taps
	dy := aug.dy
	exact := sm.exact

	for c := range C {
		out := dst[c*H*W : (c+1)*H*W]
		m := &v.mix[c]
		a, b := v.scale[c], v.shift[c]
		lut := &v.lut[c]
		single := m.n == 1 && m.w[0] == 1
		for yy := range H {
			row := out[yy*W : (yy+1)*W]
			ry := yy + dy
			if ry < 0 || ry >= H {
				for k := range row {
					row[k] = b
				}
				continue
			}
			if exact && single {
				src := pix[m.ch[0]*plane+ry*sw : m.ch[0]*plane+(ry+1)*sw]
				for xx := range row {
					rx, in := aug.col(xx, W)
					if !in {
						row[xx] = b
						continue
					}
					row[xx] = lut[src[rx]]
				}
				continue
			}
			t := rt[ry]
			fy1 := t.f
			fy0 := 1 - fy1
			r0, r1 := int(t.i0)*sw, int(t.i1)*sw
			// The two source rows of every mixed channel.
			var top, bot [3][]uint8
			for j := 0; j < m.n; j++ {
				top[j] = pix[m.ch[j]*plane+r0 : m.ch[j]*plane+r0+sw]
				bot[j] = pix[m.ch[j]*plane+r1 : m.ch[j]*plane+r1+sw]
			}
			for xx := range row {
				rx, in := aug.col(xx, W)
				if !in {
					row[xx] = b
					continue
				}
				u := ct[rx]
				fx1 := u.f
				fx0 := 1 - fx1
				c0, c1 := int(u.i0), int(u.i1)
				var val float32
				for j := 0; j < m.n; j++ {
					t0, t1 := top[j], bot[j]
					val += m.w[j] * (fy0*(fx0*float32(t0[c0])+fx1*float32(t0[c1])) + fy1*(fx0*float32(t1[c0])+fx1*float32(t1[c1])))
				}
				row[xx] = val*a + b
			}
		}
	}
}

// fillFiltered is fillOne where an axis shrinks: every output value is
// the weighted sum of its spans' source pixels, row by row.
func (v *View) fillFiltered(dst []float32, pix []uint8, sh, sw int, sm *sizeMap, aug augDraw) {
	C, H, W := v.p.Channels, v.p.Height, v.p.Width
	plane := sh * sw
	for c := range C {
		out := dst[c*H*W : (c+1)*H*W]
		m := &v.mix[c]
		a, b := v.scale[c], v.shift[c]
		for yy := range H {
			row := out[yy*W : (yy+1)*W]
			ry := yy + aug.dy
			if ry < 0 || ry >= H {
				for k := range row {
					row[k] = b
				}
				continue
			}
			sy := sm.rows.spans[ry]
			wy := sm.rows.w[sy.off : sy.off+sy.n]
			for xx := range row {
				rx, in := aug.col(xx, W)
				if !in {
					row[xx] = b
					continue
				}
				sx := sm.cols.spans[rx]
				wx := sm.cols.w[sx.off : sx.off+sx.n]
				var val float32
				for j := 0; j < m.n; j++ {
					p := pix[m.ch[j]*plane:]
					var acc float32
					for k, fy := range wy {
						r := p[(int(sy.lo)+k)*sw+int(sx.lo):]
						r = r[:len(wx)]
						var in float32
						for l, fx := range wx {
							in += fx * float32(r[l])
						}
						acc += fy * in
					}
					val += m.w[j] * acc
				}
				row[xx] = val*a + b
			}
		}
	}
}
