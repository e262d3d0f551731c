package data

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// TensorPreprocess says how an array sample becomes model input when it
// is not an 8-bit image (Arrays.Images): it keeps its values and shape,
// and only these steps apply, in order:
//
//  1. Augment (training only): random crop with padding over the last two
//     axes, then a flip of the last axis (see Augment); a sample of one
//     axis takes none.
//  2. Normalise per channel: (v·s − Mean[c]) / Std[c], where s is 1/255
//     for uint8 samples (scaled to [0,1], as images are) and 1 for float
//     ones, and the channel is the index along the first axis of a sample
//     of three axes or more ((C,H,W), (C,T,H,W)); a sample of one or two
//     axes has one channel. Padding is 0 before normalisation, as in
//     torchvision.
type TensorPreprocess struct {
	// Shape is the model's per-sample input shape. The samples must have
	// it, or be its channels-last form — (H,W,C) for (C,H,W), (T,H,W,C)
	// for (C,T,H,W), copied into channel-major order as they load — or,
	// for a model of one channel, its shape without that axis.
	Shape []int
	// Norm is the normalisation: length 0 (none), 1, or the channel count.
	Norm Norm
	// Augment is applied by Fill when given a non-nil generator.
	Augment Augment
}

// TensorView is Arrays fed to a model as they are (TensorPreprocess). Build
// it with NewTensorView; it is read-only and safe for concurrent use.
type TensorView struct {
	// The samples' count, labels, classes and sources are the arrays'.
	*Arrays
	p TensorPreprocess
	// The values in the model's layout: the arrays' own, or their copy
	// with the channels moved first.
	u8           []uint8
	f32          []float32
	inner        int // values per channel
	h, w         int // the last two axes (h = 1 for one axis)
	scale, shift []float32
}

var _ Dataset = (*TensorView)(nil)

// NewTensorView returns src preprocessed as p says; its errors say how the
// samples' shape and the model's differ.
func NewTensorView(src *Arrays, p TensorPreprocess) (*TensorView, error) {
	if src == nil || src.Len() == 0 {
		return nil, fmt.Errorf("data: empty dataset")
	}
	want := p.Shape
	have := src.shape
	if len(want) == 0 {
		return nil, fmt.Errorf("data: %s: no sample shape given", src.spec)
	}
	p.Shape = slices.Clone(want)
	v := &TensorView{Arrays: src, p: p, u8: src.u8, f32: src.f32}
	switch {
	case slices.Equal(have, want):
	case want[0] == 1 && slices.Equal(have, want[1:]):
		// Same values in the same order: the model's channel axis of 1 added.
	case len(want) >= 2 && slices.Equal(have[:len(have)-1], want[1:]) && have[len(have)-1] == want[0]:
		if avail, srcMem, ok := sysmem.Available(); ok && int64(len(src.u8)+4*len(src.f32)) > avail {
			return nil, fmt.Errorf("data: %s: moving the channels of %s samples first needs %d MiB, more than the %d MiB of memory available (%s)", src.spec, dimsString(have), (len(src.u8)+4*len(src.f32))>>20, avail>>20, srcMem)
		}
		if v.u8 != nil {
			v.u8 = channelsFirst(v.u8, have[:len(have)-1], want[0])
		} else {
			v.f32 = channelsFirst(v.f32, have[:len(have)-1], want[0])
		}
	default:
		return nil, fmt.Errorf("data: %s: samples of shape %s, the model takes %s (or channels last, %s)", src.spec, dimsString(have), dimsString(want), dimsString(append(slices.Clone(want[1:]), want[0])))
	}
	c := 1
	if len(want) >= 3 {
		c = want[0]
	}
	v.inner = v.per / c
	v.h, v.w = 1, want[len(want)-1]
	if len(want) >= 2 {
		v.h = want[len(want)-2]
	} else if !p.Augment.IsNone() {
		return nil, fmt.Errorf("data: %s: samples of one axis (%s) take no augmentation", src.spec, dimsString(want))
	}
	if p.Augment.ResizedCrop.Max > 0 {
		return nil, fmt.Errorf("data: %s: rrc, a random resized crop, augments images (uint8 (N, H, W[, C]) arrays); these samples (%s) are fed as they are: use crop=N and flip", src.spec, dimsString(want))
	}
	if err := p.Norm.Validate(); err != nil {
		return nil, err
	}
	if k := len(p.Norm.Mean); k != 0 && k != 1 && k != c {
		return nil, fmt.Errorf("data: normalisation %s has %d values, the samples (%s) %d channels", p.Norm, k, dimsString(want), c)
	}
	s := float32(1)
	if v.u8 != nil {
		s = 1.0 / 255
	}
	v.scale, v.shift = make([]float32, c), make([]float32, c)
	for ch := range c {
		v.scale[ch] = s
		if k := len(p.Norm.Mean); k > 0 {
			m, sd := p.Norm.Mean[min(ch, k-1)], p.Norm.Std[min(ch, k-1)]
			v.scale[ch], v.shift[ch] = s/sd, -m/sd
		}
	}
	return v, nil
}

// Preprocess returns what the view does.
func (v *TensorView) Preprocess() TensorPreprocess { return v.p }

// SampleShape returns the model's sample shape. The caller must not
// modify it.
func (v *TensorView) SampleShape() []int { return v.p.Shape }

// Label returns the label of sample i.
func (a *Arrays) Label(i int) int { return int(a.labels[i]) }

// Labels returns a copy of all labels, indexed by sample.
func (a *Arrays) Labels() []int64 { return slices.Clone(a.labels) }

// Fill implements Dataset.
func (v *TensorView) Fill(x []float32, y []int64, indices []int, rng *rand.Rand) error {
	return fillBatch(x, y, indices, v.labels, v.p.Shape, v.p.Augment, rng, v)
}

// sampleSize implements sampleFiller: the last two axes.
func (v *TensorView) sampleSize(int) (int, int) { return v.h, v.w }

// fillOne writes sample i into dst, augmented as aug says.
func (v *TensorView) fillOne(dst []float32, i int, aug augDraw) {
	per, inner, H, W := v.per, v.inner, v.h, v.w
	var src8 []uint8
	var src32 []float32
	if v.u8 != nil {
		src8 = v.u8[i*per : (i+1)*per]
	} else {
		src32 = v.f32[i*per : (i+1)*per]
	}
	at := func(j int) float32 {
		if src8 != nil {
			return float32(src8[j])
		}
		return src32[j]
	}
	plane := H * W
	for pl := 0; pl < per/plane; pl++ {
		c := pl * plane / inner
		a, b := v.scale[c], v.shift[c]
		base := pl * plane
		if aug == (augDraw{}) {
			if src8 != nil {
				for j, p := range src8[base : base+plane] {
					dst[base+j] = float32(p)*a + b
				}
			} else {
				for j, p := range src32[base : base+plane] {
					dst[base+j] = p*a + b
				}
			}
			continue
		}
		for yy := range H {
			row := dst[base+yy*W : base+(yy+1)*W]
			ry := yy + aug.dy
			if ry < 0 || ry >= H {
				for k := range row {
					row[k] = b
				}
				continue
			}
			for xx := range row {
				rx, in := aug.col(xx, W)
				if !in {
					row[xx] = b
					continue
				}
				row[xx] = at(base+ry*W+rx)*a + b
			}
		}
	}
}
