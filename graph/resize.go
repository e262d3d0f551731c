package graph

import (
	"errors"
	"fmt"
	"math"
)

// Resize (opsets 10–27) and the deprecated Upsample (7–9) are read here
// once for every user of the graph: shape inference, the batch-layout
// analysis of package rewrite (is the batch axis resized?) and the
// runtime, which runs the interpolation along each axis as a product with
// the ResizeAxis weights. The formulas are the ONNX specification's,
// made exact by onnx's reference implementation
// (onnx/reference/ops/op_resize.py), where the two agree; the places where
// they do not are commented.

// ResizeSpec is what a Resize or Upsample node computes for an input of a
// known shape, with every attribute and constant input read and checked.
type ResizeSpec struct {
	// Mode is "nearest", "linear" or "cubic".
	Mode string
	// Coord is the coordinate_transformation_mode: "half_pixel",
	// "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
	// "asymmetric", "tf_half_pixel_for_nn" (opsets 11–12) or
	// "tf_crop_and_resize". Resize-10 and Upsample have no attribute and
	// are "asymmetric".
	Coord string
	// Nearest is the nearest_mode: "round_prefer_floor",
	// "round_prefer_ceil", "floor" or "ceil" (mode "nearest" only).
	// Resize-10 and Upsample floor: their nearest upsampling repeats each
	// element (onnx's Upsample test case; Resize-10 is Upsample-9 with
	// downsampling allowed).
	Nearest string
	// CubicA is cubic_coeff_a, the a of the cubic convolution kernel.
	CubicA float64
	// ExcludeOutside sets the weights of sampling locations outside the
	// input to 0 and renormalizes the others to sum to 1.
	ExcludeOutside bool
	// Antialias widens the linear and cubic kernels by 1/scale on the
	// axes that are downsampled (opset 18).
	Antialias bool
	// Extrapolation is the extrapolation_value: the output where a
	// tf_crop_and_resize coordinate falls outside the input.
	Extrapolation float32
	// In and Out are the input and output shapes.
	In, Out []int64
	// Scale is, per axis, the scale the coordinate transform divides by:
	// the given scale (not Out/In: floor(In·scale) rounds) when scales are
	// given, Out/In for sizes, the common scale of a
	// keep_aspect_ratio_policy other than "stretch", 1 on axes not resized.
	Scale []float64
	// ROIStart and ROIEnd are the region of interest of
	// tf_crop_and_resize, per axis, in coordinates normalized to the input
	// (0 and 1 on axes the roi does not name); nil in other modes.
	ROIStart, ROIEnd []float64
}

// resizeCoords are the coordinate transformation modes from the opset
// they enter to the opset they leave (0: still in).
var resizeCoords = map[string][2]int64{
	"half_pixel": {11, 0}, "pytorch_half_pixel": {11, 0}, "align_corners": {11, 0}, "asymmetric": {11, 0},
	"tf_crop_and_resize": {11, 0}, "tf_half_pixel_for_nn": {11, 13}, "half_pixel_symmetric": {19, 0},
}

var resizeNearestModes = map[string]bool{"round_prefer_floor": true, "round_prefer_ceil": true, "floor": true, "ceil": true}

// maxResizeAxis bounds an output axis of a Resize: larger sizes come
// from malformed scales, and the runtime indexes elements with int32.
const maxResizeAxis = math.MaxInt32

// ResizeSpec reads a Resize (opsets 10–27; 20–27 change only its types)
// or Upsample (7–9) node for an input of shape in (every dimension known):
// its attributes with their
// defaults at the node's opset, and its roi, scales and sizes, which must
// be constants. Errors name the attribute or input at fault; the callers
// add the node.
func (n *Node) ResizeSpec(in []int64) (*ResizeSpec, error) {
	r := len(in)
	for i, d := range in {
		if d < 0 {
			return nil, fmt.Errorf("input dimension %d is unknown; Resize needs a known input shape", i)
		}
	}
	s := &ResizeSpec{Coord: "asymmetric", Nearest: "floor", CubicA: -0.75, In: append([]int64(nil), in...)}
	var err error
	if s.Mode, err = n.Str("mode"); err != nil {
		return nil, err
	}
	var scales []float64
	var sizes []int64
	var roi []float64
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	switch {
	case n.OpType == "Upsample" && n.Opset >= 7 && n.Opset <= 9:
		// Upsample's specification asks for scales ≥ 1; smaller ones
		// downsample as Resize-10, its successor, does (as onnxruntime's).
		if s.Mode != "nearest" && s.Mode != "linear" {
			return nil, fmt.Errorf("attribute \"mode\": %q is not an Upsample mode (nearest, linear)", s.Mode)
		}
		if n.Opset < 9 {
			f, err := n.Floats("scales", nil)
			if err != nil {
				return nil, err
			}
			if f == nil {
				return nil, errors.New("attribute \"scales\" is required")
			}
			for _, v := range f {
				scales = append(scales, float64(v))
			}
		} else {
			if scales, err = resizeFloats(n, 1, "scales"); err != nil {
				return nil, err
			}
			if scales == nil {
				return nil, errors.New("input 1 (scales) is required")
			}
		}
	case n.OpType == "Resize" && n.Opset == 10:
		if s.Mode != "nearest" && s.Mode != "linear" {
			return nil, fmt.Errorf("attribute \"mode\": %q is not a Resize-10 mode (nearest, linear; cubic came with opset 11)", s.Mode)
		}
		if scales, err = resizeFloats(n, 1, "scales"); err != nil {
			return nil, err
		}
		if scales == nil {
			return nil, errors.New("input 1 (scales) is required")
		}
	case n.OpType == "Resize" && n.Opset >= 11 && n.Opset <= 27:
		if err := s.readAttrs(n); err != nil {
			return nil, err
		}
		if scales, err = resizeFloats(n, 2, "scales"); err != nil {
			return nil, err
		}
		if sizes, err = resizeInts(n, 3, "sizes"); err != nil {
			return nil, err
		}
		if s.Coord == "tf_crop_and_resize" {
			if roi, err = resizeFloats(n, 1, "roi"); err != nil {
				return nil, err
			}
		}
		if n.Opset >= 18 {
			a, err := n.Ints("axes", nil)
			if err != nil {
				return nil, err
			}
			if a != nil {
				if axes, err = resizeAxes(a, r); err != nil {
					return nil, err
				}
			}
		}
	default:
		return nil, fmt.Errorf("%s opset %d is not supported (Resize 10–27, Upsample 7–9)", n.OpType, n.Opset)
	}
	switch {
	case scales != nil && sizes != nil:
		return nil, errors.New("both scales and sizes are given; exactly one must be")
	case scales == nil && sizes == nil:
		return nil, errors.New("neither scales nor sizes is given; exactly one must be")
	case scales != nil && len(scales) != len(axes):
		return nil, fmt.Errorf("scales has %d values for %d axes", len(scales), len(axes))
	case sizes != nil && len(sizes) != len(axes):
		return nil, fmt.Errorf("sizes has %d values for %d axes", len(sizes), len(axes))
	case roi != nil && len(roi) != 2*len(axes):
		return nil, fmt.Errorf("roi has %d values for %d axes; it needs a start and an end per axis", len(roi), len(axes))
	case s.Coord == "tf_crop_and_resize" && roi == nil:
		return nil, errors.New("coordinate_transformation_mode \"tf_crop_and_resize\" needs the roi input")
	}
	s.Out = append([]int64(nil), in...)
	s.Scale = make([]float64, r)
	for i := range s.Scale {
		s.Scale[i] = 1
	}
	for i, v := range roi {
		if math.IsInf(v, 0) {
			return nil, fmt.Errorf("roi[%d] = %v; the roi must be finite", i, v)
		}
	}
	if roi != nil {
		s.ROIStart, s.ROIEnd = make([]float64, r), make([]float64, r)
		for i := range s.ROIEnd {
			s.ROIEnd[i] = 1
		}
		for i, d := range axes {
			s.ROIStart[d], s.ROIEnd[d] = roi[i], roi[len(axes)+i]
		}
	}
	for _, d := range axes {
		if in[d] == 0 {
			return nil, fmt.Errorf("axis %d of the input is empty; it cannot be resized", d)
		}
	}
	if scales != nil {
		if policy, _ := n.Str("keep_aspect_ratio_policy"); n.Opset >= 18 && policy != "stretch" {
			return nil, fmt.Errorf("attribute \"keep_aspect_ratio_policy\" %q applies to sizes, not scales", policy)
		}
		for i, d := range axes {
			sc := scales[i]
			if !(sc > 0) || math.IsInf(sc, 0) {
				return nil, fmt.Errorf("scales[%d] = %v; scales must be positive and finite", i, sc)
			}
			// The output is floor(in·scale) (onnx's shape inference and
			// reference implementation; the specification's text also
			// multiplies by the roi's extent, which neither does).
			o := math.Floor(float64(in[d]) * sc)
			if o < 1 || o > maxResizeAxis {
				return nil, fmt.Errorf("scales[%d] = %v makes axis %d of size %d %.0f long; it must be 1 to %d", i, sc, d, in[d], o, maxResizeAxis)
			}
			s.Out[d], s.Scale[d] = int64(o), sc
		}
		return s, nil
	}
	for i, v := range sizes {
		if v < 1 || v > maxResizeAxis {
			return nil, fmt.Errorf("sizes[%d] = %d; sizes must be 1 to %d", i, v, maxResizeAxis)
		}
	}
	policy := "stretch"
	if n.Opset >= 18 {
		if policy, err = n.Str("keep_aspect_ratio_policy"); err != nil {
			return nil, err
		}
	}
	switch policy {
	case "stretch":
		for i, d := range axes {
			s.Out[d] = sizes[i]
			s.Scale[d] = float64(sizes[i]) / float64(in[d])
		}
	case "not_larger", "not_smaller":
		// One scale for every axis named, the smallest (largest) ratio,
		// and sizes rounded half up from it.
		sc := float64(sizes[0]) / float64(in[axes[0]])
		for i, d := range axes {
			v := float64(sizes[i]) / float64(in[d])
			if policy == "not_larger" {
				sc = math.Min(sc, v)
			} else {
				sc = math.Max(sc, v)
			}
		}
		for _, d := range axes {
			o := math.Floor(sc*float64(in[d]) + 0.5)
			if o < 1 || o > maxResizeAxis {
				return nil, fmt.Errorf("keep_aspect_ratio_policy %q makes axis %d of size %d %.0f long; it must be 1 to %d", policy, d, in[d], o, maxResizeAxis)
			}
			s.Out[d], s.Scale[d] = int64(o), sc
		}
	default:
		return nil, fmt.Errorf("attribute \"keep_aspect_ratio_policy\": %q is not one of stretch, not_larger, not_smaller", policy)
	}
	return s, nil
}

// readAttrs reads the attributes of Resize 11–19, refusing values and
// attributes the node's opset does not have.
func (s *ResizeSpec) readAttrs(n *Node) error {
	switch s.Mode {
	case "nearest", "linear", "cubic":
	default:
		return fmt.Errorf("attribute \"mode\": %q is not one of nearest, linear, cubic", s.Mode)
	}
	if n.Opset < 18 {
		for _, a := range []string{"antialias", "axes", "keep_aspect_ratio_policy"} {
			if n.Has(a) {
				return fmt.Errorf("attribute %q came with opset 18; the model imports opset %d", a, n.Opset)
			}
		}
	}
	var err error
	if s.Coord, err = n.Str("coordinate_transformation_mode"); err != nil {
		return err
	}
	if span, ok := resizeCoords[s.Coord]; !ok || n.Opset < span[0] || (span[1] != 0 && n.Opset >= span[1]) {
		var valid []string
		for _, c := range []string{"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"} {
			if sp := resizeCoords[c]; n.Opset >= sp[0] && (sp[1] == 0 || n.Opset < sp[1]) {
				valid = append(valid, c)
			}
		}
		return fmt.Errorf("attribute \"coordinate_transformation_mode\": %q is not one of %v at opset %d", s.Coord, valid, n.Opset)
	}
	if s.Nearest, err = n.Str("nearest_mode"); err != nil {
		return err
	}
	if !resizeNearestModes[s.Nearest] {
		return fmt.Errorf("attribute \"nearest_mode\": %q is not one of round_prefer_floor, round_prefer_ceil, floor, ceil", s.Nearest)
	}
	a, err := n.Float("cubic_coeff_a")
	if err != nil {
		return err
	}
	s.CubicA = float64(a)
	ex, err := n.Int("exclude_outside")
	if err != nil {
		return err
	}
	s.ExcludeOutside = ex != 0
	if s.Extrapolation, err = n.Float("extrapolation_value"); err != nil {
		return err
	}
	if n.Opset >= 18 {
		aa, err := n.Int("antialias")
		if err != nil {
			return err
		}
		s.Antialias = aa != 0
	}
	return nil
}

// resizeInput returns input i's constant data, nil when the input is
// absent or an empty tensor (how exporters omit roi and scales before
// opset 13).
func resizeInput(n *Node, i int, what string) (*Tensor, error) {
	t, err := constInput(n, i)
	if err != nil {
		return nil, fmt.Errorf("input %d (%s): %w", i, what, err)
	}
	if t == nil || t.Len() == 0 {
		return nil, nil
	}
	if len(t.Shape) != 1 {
		return nil, fmt.Errorf("input %d (%s) has shape %v; it must be 1-D", i, what, t.Shape)
	}
	return t, nil
}

func resizeFloats(n *Node, i int, what string) ([]float64, error) {
	t, err := resizeInput(n, i, what)
	if t == nil || err != nil {
		return nil, err
	}
	if t.F32 == nil && t.F64 == nil {
		return nil, fmt.Errorf("input %d (%s) is %v; it must be float or double", i, what, t.DType)
	}
	out := make([]float64, t.Len())
	for k := range out {
		out[k] = t.At(k)
		if math.IsNaN(out[k]) {
			return nil, fmt.Errorf("input %d (%s) holds NaN", i, what)
		}
	}
	return out, nil
}

func resizeInts(n *Node, i int, what string) ([]int64, error) {
	t, err := resizeInput(n, i, what)
	if t == nil || err != nil {
		return nil, err
	}
	if t.DType != Int64 {
		return nil, fmt.Errorf("input %d (%s) is %v; it must be int64", i, what, t.DType)
	}
	return t.I64, nil
}

// resizeAxes normalizes the axes attribute (negative from the back) and
// refuses repeats, whose meaning the specification leaves undefined.
func resizeAxes(a []int64, r int) ([]int, error) {
	out := make([]int, len(a))
	seen := make([]bool, r)
	for i, v := range a {
		if v < -int64(r) || v >= int64(r) {
			return nil, fmt.Errorf("attribute \"axes\": %d is out of range for rank %d", v, r)
		}
		if v < 0 {
			v += int64(r)
		}
		if seen[v] {
			return nil, fmt.Errorf("attribute \"axes\": axis %d is repeated", v)
		}
		seen[v] = true
		out[i] = int(v)
	}
	return out, nil
}

// ResizeAxis is the interpolation along one axis of a Resize: output
// index o is Σ_t Weight[o·Taps+t]·x[Index[o·Taps+t]] over the Taps
// sampling locations, indices already clamped into [0, In) (edge
// padding), or, where Outside[o], the extrapolation value.
type ResizeAxis struct {
	In, Out int
	Taps    int
	Index   []int
	Weight  []float64
	// Outside marks the outputs whose tf_crop_and_resize coordinate falls
	// outside [0, In−1]; their weights are 0. Nil in other modes.
	Outside []bool
}

// maxResizeTaps bounds the kernel of an antialiased axis (2·⌈2/scale⌉
// taps): a scale of 1e-6 would otherwise ask for millions per output.
const maxResizeTaps = 1 << 16

// Axis returns the interpolation weights of axis d. Every other axis is
// interpolated the same way, independently: N-linear and N-cubic
// interpolation are separable.
func (s *ResizeSpec) Axis(d int) (*ResizeAxis, error) {
	in, out := int(s.In[d]), int(s.Out[d])
	scale := s.Scale[d]
	n := 2 // sampling locations: nearest and linear 2, cubic 4, more when antialiased
	switch {
	case s.Mode == "cubic" && s.Antialias:
		n = 2 - 2*int(math.Floor(-2/math.Min(scale, 1))+1)
	case s.Mode == "cubic":
		n = 4
	case s.Mode == "linear" && s.Antialias:
		n = 2 - 2*int(math.Floor(-1/math.Min(scale, 1))+1)
	}
	if n > maxResizeTaps || n < 2 {
		return nil, fmt.Errorf("axis %d: scale %v antialiased needs %d sampling locations per output; at most %d are supported", d, scale, n, maxResizeTaps)
	}
	taps := n
	if s.Mode == "nearest" {
		taps = 1
	}
	a := &ResizeAxis{In: in, Out: out, Taps: taps, Index: make([]int, out*taps), Weight: make([]float64, out*taps)}
	coeff := make([]float64, n)
	for o := 0; o < out; o++ {
		x := s.source(d, o)
		if s.Coord == "tf_crop_and_resize" && (x < 0 || x > float64(in-1)) {
			if a.Outside == nil {
				a.Outside = make([]bool, out)
			}
			a.Outside[o] = true
			for t := 0; t < taps; t++ {
				a.Index[o*taps+t] = min(o, in-1) // any valid index: its weight is 0
			}
			continue
		}
		// The sampling locations are the n integers nearest to x,
		// preferring smaller ones, which makes the distance of the
		// location left of x, ratio, lie in (0, 1].
		fl := math.Floor(x)
		ratio, left := x-fl, int(fl)
		if ratio == 0 {
			ratio, left = 1, left-1
		}
		s.coefficients(ratio, scale, coeff)
		// onnx's reference pads the input by n/2 on each side (edge
		// values) and takes the n nearest locations there: a window that
		// would leave the padded range is moved inside it.
		start := left - n/2 + 1
		start = max(start, -n/2)
		start = min(start, in+n/2-n)
		if s.ExcludeOutside {
			sum := 0.0
			for j := range coeff {
				if k := start + j; k < 0 || k >= in {
					coeff[j] = 0
				}
				sum += coeff[j]
			}
			if sum == 0 {
				return nil, fmt.Errorf("axis %d, output %d: exclude_outside leaves no sampling location inside the input (coordinate %v)", d, o, x)
			}
			for j := range coeff {
				coeff[j] /= sum
			}
		}
		if s.Mode == "nearest" {
			j := 0
			if coeff[1] != 0 {
				j = 1
			}
			a.Index[o] = min(max(start+j, 0), in-1)
			a.Weight[o] = 1
			continue
		}
		for j, c := range coeff {
			a.Index[o*taps+j] = min(max(start+j, 0), in-1)
			a.Weight[o*taps+j] = c
		}
	}
	return a, nil
}

// source is the input coordinate of output index o along axis d: the
// coordinate_transformation_mode's formula, in float64 from the scale
// as given.
func (s *ResizeSpec) source(d, o int) float64 {
	x, in, scale := float64(o), float64(s.In[d]), s.Scale[d]
	// The output length the scale asks for, possibly fractional (the
	// specification's output_width; length_resized in its formulas is
	// this value too in onnx's reference).
	width := scale * in
	switch s.Coord {
	case "align_corners":
		if width == 1 {
			return 0
		}
		return x * (in - 1) / (width - 1)
	case "asymmetric":
		return x / scale
	case "tf_half_pixel_for_nn":
		return (x + 0.5) / scale
	case "tf_crop_and_resize":
		st, en := s.ROIStart[d], s.ROIEnd[d]
		if width == 1 {
			return (en-st)*(in-1)/2 + st*(in-1)
		}
		return x*(en-st)*(in-1)/(width-1) + st*(in-1)
	case "pytorch_half_pixel":
		// The specification (and onnxruntime) use 0 for an output of
		// length 1; onnx's reference uses −0.5, which differs in cubic
		// mode only.
		if width == 1 {
			return 0
		}
		return (x+0.5)/scale - 0.5
	case "half_pixel_symmetric":
		// Centres the region the scale covers on the output:
		// a shift where floor(in·scale) rounded the length down.
		adj := float64(s.Out[d]) / width
		return in/2*(1-adj) + (x+0.5)/scale - 0.5
	}
	return (x+0.5)/scale - 0.5 // half_pixel
}

// coefficients writes the weights of the len(c) sampling locations around
// a coordinate whose left neighbour is ratio ∈ (0, 1] away.
func (s *ResizeSpec) coefficients(ratio, scale float64, c []float64) {
	switch s.Mode {
	case "nearest":
		// onnx's reference: an integer coordinate is its own nearest
		// location (the right one of the pair).
		right := false
		switch {
		case ratio == 1:
			right = true
		case s.Nearest == "round_prefer_floor":
			right = ratio > 0.5
		case s.Nearest == "round_prefer_ceil":
			right = ratio >= 0.5
		case s.Nearest == "ceil":
			right = true
		}
		c[0], c[1] = 1, 0
		if right {
			c[0], c[1] = 0, 1
		}
	case "linear":
		if !s.Antialias {
			c[0], c[1] = 1-ratio, ratio
			return
		}
		// The triangle kernel stretched by 1/scale when downsampling,
		// normalized to sum 1.
		sc := math.Min(scale, 1)
		first := -(len(c)/2 - 1)
		sum := 0.0
		for j := range c {
			v := 1 - math.Abs((float64(first+j)-ratio)*sc)
			c[j] = math.Max(0, math.Min(1, v))
			sum += c[j]
		}
		for j := range c {
			c[j] /= sum
		}
	case "cubic":
		A := s.CubicA
		if !s.Antialias {
			c[0] = ((A*(ratio+1)-5*A)*(ratio+1)+8*A)*(ratio+1) - 4*A
			c[1] = ((A+2)*ratio-(A+3))*ratio*ratio + 1
			c[2] = ((A+2)*(1-ratio)-(A+3))*(1-ratio)*(1-ratio) + 1
			c[3] = ((A*((1-ratio)+1)-5*A)*((1-ratio)+1)+8*A)*((1-ratio)+1) - 4*A
			return
		}
		sc := math.Min(scale, 1)
		first := -(len(c)/2 - 1)
		sum := 0.0
		for j := range c {
			x := math.Abs(sc * (float64(first+j) - ratio))
			switch {
			case x <= 1:
				c[j] = (A+2)*x*x*x - (A+3)*x*x + 1
			case x < 2:
				c[j] = A*x*x*x - 5*A*x*x + 8*A*x - 4*A
			default:
				c[j] = 0
			}
			sum += c[j]
		}
		for j := range c {
			c[j] /= sum
		}
	}
}

// Identity reports whether the axis maps every input index to itself:
// the same length, no extrapolated output, and output o the sum of
// weights 1 on input o and 0 elsewhere (a cubic kernel at integer
// coordinates has zero weights on the neighbours).
func (a *ResizeAxis) Identity() bool {
	if a.In != a.Out || a.Outside != nil {
		return false
	}
	for o := 0; o < a.Out; o++ {
		self := 0.0
		for t := 0; t < a.Taps; t++ {
			k, w := a.Index[o*a.Taps+t], a.Weight[o*a.Taps+t]
			if k == o {
				self += w
			} else if w != 0 && !a.cancels(o, k) {
				return false
			}
		}
		if self != 1 {
			return false
		}
	}
	return true
}

// cancels reports whether the weights of output o on input k sum to 0.
func (a *ResizeAxis) cancels(o, k int) bool {
	sum := 0.0
	for t := 0; t < a.Taps; t++ {
		if a.Index[o*a.Taps+t] == k {
			sum += a.Weight[o*a.Taps+t]
		}
	}
	return sum == 0
}

// Matrix returns the axis as a dense Out×In row-major matrix R (y = R·x
// along the axis), the weights of repeated indices summed; extrapolated
// rows are zero.
func (a *ResizeAxis) Matrix() []float64 {
	m := make([]float64, a.Out*a.In)
	for o := 0; o < a.Out; o++ {
		for t := 0; t < a.Taps; t++ {
			m[o*a.In+a.Index[o*a.Taps+t]] += a.Weight[o*a.Taps+t]
		}
	}
	return m
}

// inferResize infers a Resize or Upsample output: the input's dtype and
// ResizeSpec's shape. The roi, scales and sizes must be constants by then
// (exports compute sizes from Shape, which folds once the input shape is
// fixed).
func inferResize(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	if !x.Shape.Static() {
		return fmt.Errorf("input %q has shape %v; Resize needs a known input shape", x.Name, x.Shape)
	}
	s, err := n.ResizeSpec(x.Shape.Ints())
	if err != nil {
		return err
	}
	setOut(n, 0, x.DType, StaticShape(s.Out...))
	return nil
}

// ResizeArgument reports whether v is read only as an argument of Resize
// or Upsample (roi, scales, sizes), never as data: a float initializer
// read there is a constant of the operator (a hand-written model may store
// scales as one), not a parameter that training could change.
func (v *Value) ResizeArgument() bool {
	if len(v.Consumers) == 0 {
		return false
	}
	for _, n := range v.Consumers {
		if n.OpType != "Resize" && n.OpType != "Upsample" || n.Domain != "" {
			return false
		}
		for i, in := range n.Inputs {
			if in == v && i == 0 {
				return false
			}
		}
	}
	return true
}
