package data

import (
	"fmt"
	"strconv"
	"strings"
)

// Norm is a per-channel normalisation applied after scaling pixels to
// [0,1]: x = (p/255 - Mean[c]) / Std[c]. The zero Norm means no
// normalisation (pixels end in [0,1]). Mean and Std have the same length:
// 1 (every channel alike) or the number of channels the model takes; a
// 3-value Norm also serves a 1-channel model, through the luma weights
// (see Preprocess).
type Norm struct {
	Mean, Std []float32
}

// The presets of ParseNorm.
var normPresets = []struct {
	names     []string
	mean, std []float32
}{
	{[]string{"fmnist", "fashion-mnist"}, []float32{0.2860}, []float32{0.3530}},
	{[]string{"mnist"}, []float32{0.1307}, []float32{0.3081}},
	{[]string{"cifar10"}, []float32{0.4914, 0.4822, 0.4465}, []float32{0.2470, 0.2435, 0.2616}},
	{[]string{"cifar100"}, []float32{0.5071, 0.4865, 0.4409}, []float32{0.2673, 0.2564, 0.2762}},
	{[]string{"imagenet"}, []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225}},
	{[]string{"half"}, []float32{0.5}, []float32{0.5}},
	{[]string{"pixels"}, []float32{0}, []float32{1.0 / 255}},
}

func presetNorm(name string) Norm {
	for _, p := range normPresets {
		for _, n := range p.names {
			if n == name {
				return Norm{Mean: append([]float32(nil), p.mean...), Std: append([]float32(nil), p.std...)}
			}
		}
	}
	panic("data: no norm preset " + name)
}

// NormNames lists the values ParseNorm accepts besides MEAN/STD lists.
func NormNames() []string {
	names := []string{"default", "none"}
	for _, p := range normPresets {
		names = append(names, p.names...)
	}
	return names
}

// ParseNorm parses a normalisation flag:
//
//	"" or "default"   def (usually Images.DefaultNorm)
//	"none"            no normalisation: pixels scaled to [0,1]
//	"fmnist"          Fashion-MNIST: mean 0.2860, std 0.3530
//	"mnist"           MNIST: 0.1307, 0.3081
//	"cifar10"         (0.4914,0.4822,0.4465), (0.2470,0.2435,0.2616)
//	"cifar100"        (0.5071,0.4865,0.4409), (0.2673,0.2564,0.2762)
//	"imagenet"        (0.485,0.456,0.406), (0.229,0.224,0.225)
//	"half"            0.5, 0.5 (pixels in [-1,1])
//	"pixels"          0, 1/255: the pixel values 0–255 (a model that takes
//	                  uint8 pixels and normalizes them itself)
//	"M1,M2,M3/S1,S2,S3" or "M/S"   explicit means and standard deviations
func ParseNorm(s string, def Norm) (Norm, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "", "default":
		return def, def.Validate()
	case "none":
		return Norm{}, nil
	}
	for _, p := range normPresets {
		for _, n := range p.names {
			if n == t {
				return presetNorm(n), nil
			}
		}
	}
	ms, ss, ok := strings.Cut(t, "/")
	if !ok {
		return Norm{}, fmt.Errorf("norm %q: want one of %s, or MEAN/STD lists such as 0.5,0.5,0.5/0.25,0.25,0.25", s, strings.Join(NormNames(), ", "))
	}
	var n Norm
	var err error
	if n.Mean, err = parseFloats(ms); err != nil {
		return Norm{}, fmt.Errorf("norm %q: mean: %v", s, err)
	}
	if n.Std, err = parseFloats(ss); err != nil {
		return Norm{}, fmt.Errorf("norm %q: std: %v", s, err)
	}
	if err := n.Validate(); err != nil {
		return Norm{}, fmt.Errorf("norm %q: %v", s, err)
	}
	return n, nil
}

func parseFloats(s string) ([]float32, error) {
	var out []float32
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, float32(v))
	}
	return out, nil
}

// Validate checks that Mean and Std have the same length and every Std is
// positive and finite.
func (n Norm) Validate() error {
	if len(n.Mean) != len(n.Std) {
		return fmt.Errorf("%d means but %d standard deviations", len(n.Mean), len(n.Std))
	}
	for i, s := range n.Std {
		if !(s > 0) || s > 1e30 {
			return fmt.Errorf("standard deviation %d is %g: want positive", i, s)
		}
	}
	for i, m := range n.Mean {
		if m != m || m > 1e30 || m < -1e30 {
			return fmt.Errorf("mean %d is %g: want a finite number", i, m)
		}
	}
	return nil
}

// IsNone reports whether n leaves pixels in [0,1].
func (n Norm) IsNone() bool { return len(n.Mean) == 0 }

// String formats n as ParseNorm reads it: "none" or "MEAN/STD".
func (n Norm) String() string {
	if n.IsNone() {
		return "none"
	}
	f := func(v []float32) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatFloat(float64(x), 'g', -1, 32)
		}
		return strings.Join(s, ",")
	}
	return f(n.Mean) + "/" + f(n.Std)
}

// Augment is the training-time augmentation: a random crop of the model's
// input size from the image padded with CropPad zero pixels on every side
// (torchvision RandomCrop(size, padding=CropPad)) — or, with ResizedCrop,
// torchvision's RandomResizedCrop in place of the resize —, then a
// horizontal flip with probability 1/2 (RandomHorizontalFlip) when Flip is
// set. The zero Augment does nothing.
type Augment struct {
	CropPad int
	Flip    bool
	// ResizedCrop, where its Max is positive, crops each image as
	// torchvision's RandomResizedCrop(size, scale=(Min, Max), ratio=(3/4,
	// 4/3)) does — a box of a random fraction of the stored image's area
	// in [Min, Max] and of a random aspect ratio (log-uniform), at a
	// random place, up to ten tries, then the centre crop — and resizes
	// the box to the model's input as the view resizes (bilinear,
	// antialiased where it shrinks): the resize and its centre crop are
	// for evaluation then, as in torchvision's ImageNet recipes. The
	// stored image is the one loaded (the window kept, where the images
	// were fitted as they loaded). Images only; not with CropPad.
	ResizedCrop AreaRange
}

// AreaRange is a range of fractions of an image's area, (0, 1].
type AreaRange struct{ Min, Max float64 }

// IsNone reports whether a does nothing.
func (a Augment) IsNone() bool { return a.CropPad == 0 && !a.Flip && a.ResizedCrop.Max == 0 }

// check refuses a ResizedCrop range outside (0, 1] or reversed, and one
// given with CropPad.
func (a Augment) check() error {
	r := a.ResizedCrop
	switch {
	case a.CropPad < 0:
		return fmt.Errorf("negative crop padding %d", a.CropPad)
	case r == AreaRange{}:
		return nil
	case !(r.Min > 0 && r.Min <= r.Max && r.Max <= 1):
		return fmt.Errorf("rrc=%v-%v: want area fractions 0 < min ≤ max ≤ 1", r.Min, r.Max)
	case a.CropPad > 0:
		return fmt.Errorf("rrc (a random resized crop, in place of the resize) and crop=%d (a crop of the resized image, padded): give one", a.CropPad)
	}
	return nil
}

// ParseAugment parses an augmentation flag: "none" (or empty), or a
// comma-separated list of "crop=N" (random crop with N pixels of zero
// padding) and "flip" (random horizontal flip), e.g. "crop=4,flip".
func ParseAugment(s string) (Augment, error) {
	var a Augment
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" || t == "none" {
		return a, nil
	}
	for _, part := range strings.Split(t, ",") {
		part = strings.TrimSpace(part)
		key, val, hasVal := strings.Cut(part, "=")
		switch {
		case (key == "flip" || key == "hflip") && !hasVal:
			a.Flip = true
		case key == "crop" && hasVal:
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > 1<<16 {
				return Augment{}, fmt.Errorf("augment %q: crop=%s: want a non-negative padding in pixels", s, val)
			}
			a.CropPad = n
		case key == "rrc" || key == "resized-crop":
			r := AreaRange{Min: 0.08, Max: 1} // torchvision's default scale
			if hasVal {
				lo, hi, isRange := strings.Cut(val, "-")
				var err1, err2 error
				r.Min, err1 = strconv.ParseFloat(lo, 64)
				if isRange {
					r.Max, err2 = strconv.ParseFloat(hi, 64)
				}
				if err1 != nil || err2 != nil {
					return Augment{}, fmt.Errorf("augment %q: %s: want rrc, rrc=MIN or rrc=MIN-MAX, fractions of the image's area", s, part)
				}
			}
			a.ResizedCrop = r
		default:
			return Augment{}, fmt.Errorf("augment %q: unknown item %q (valid: none, crop=N, rrc[=MIN[-MAX]], flip)", s, part)
		}
	}
	if err := a.check(); err != nil {
		return Augment{}, fmt.Errorf("augment %q: %v", s, err)
	}
	return a, nil
}

// String formats a as ParseAugment reads it.
func (a Augment) String() string {
	var parts []string
	if a.CropPad > 0 {
		parts = append(parts, "crop="+strconv.Itoa(a.CropPad))
	}
	if r := a.ResizedCrop; r.Max > 0 {
		parts = append(parts, "rrc="+strconv.FormatFloat(r.Min, 'g', -1, 64)+"-"+strconv.FormatFloat(r.Max, 'g', -1, 64))
	}
	if a.Flip {
		parts = append(parts, "flip")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}
