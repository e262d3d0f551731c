package graph

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

func attrFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

func attrFloats(name string, v ...float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOATS.Enum(), Floats: v}
}

func f32t(v ...float32) *Tensor {
	return &Tensor{DType: Float32, Shape: []int64{int64(len(v))}, F32: v}
}

// specAxis evaluates the interpolation of one axis straight from the ONNX
// specification's formulas, written independently of ResizeAxis: the
// source coordinate of each output, then the kernel's weight at every
// input index near it (the index clamped into the input: edge padding),
// with the antialias stretch and the exclude_outside renormalization, or
// for nearest the index the rounding rule picks. It returns the dense
// Out×In matrix and the extrapolated outputs.
func specAxis(t *testing.T, s *ResizeSpec, d int) ([]float64, []bool) {
	t.Helper()
	in, out := int(s.In[d]), int(s.Out[d])
	scale := s.Scale[d]
	width := scale * float64(in)
	m := make([]float64, out*in)
	outside := make([]bool, out)
	fin := float64(in)
	for o := 0; o < out; o++ {
		xr := float64(o)
		var x float64
		switch s.Coord {
		case "half_pixel":
			x = (xr+0.5)/scale - 0.5
		case "half_pixel_symmetric":
			adjustment := float64(out) / width
			center := fin / 2
			offset := center * (1 - adjustment)
			x = offset + (xr+0.5)/scale - 0.5
		case "pytorch_half_pixel":
			if width > 1 {
				x = (xr+0.5)/scale - 0.5
			} else {
				x = 0
			}
		case "align_corners":
			if width == 1 {
				x = 0
			} else {
				x = xr * (fin - 1) / (width - 1)
			}
		case "asymmetric":
			x = xr / scale
		case "tf_half_pixel_for_nn":
			x = (xr + 0.5) / scale
		case "tf_crop_and_resize":
			start, end := s.ROIStart[d], s.ROIEnd[d]
			if width > 1 {
				x = start*(fin-1) + xr*(end-start)*(fin-1)/(width-1)
			} else {
				x = 0.5 * (start + end) * (fin - 1)
			}
			if x < 0 || x > fin-1 {
				outside[o] = true
				continue
			}
		default:
			t.Fatalf("coordinate mode %q", s.Coord)
		}
		clamp := func(j int) int { return min(max(j, 0), in-1) }
		if s.Mode == "nearest" {
			var j float64
			switch {
			case x == math.Floor(x):
				j = x
			case s.Nearest == "round_prefer_floor":
				j = math.Ceil(x - 0.5)
			case s.Nearest == "round_prefer_ceil":
				j = math.Floor(x + 0.5)
			case s.Nearest == "floor":
				j = math.Floor(x)
			default:
				j = math.Ceil(x)
			}
			m[o*in+clamp(int(j))] = 1
			continue
		}
		stretch := 1.0
		if s.Antialias && scale < 1 {
			stretch = 1 / scale
		}
		kernel := func(dist float64) float64 {
			a := math.Abs(dist) / stretch
			if s.Mode == "linear" {
				return math.Max(0, 1-a)
			}
			A := s.CubicA
			switch {
			case a <= 1:
				return (A+2)*a*a*a - (A+3)*a*a + 1
			case a < 2:
				return A*a*a*a - 5*A*a*a + 8*A*a - 4*A
			}
			return 0
		}
		reach := 2 * stretch
		var js []int
		var ws []float64
		sum := 0.0
		for j := int(math.Floor(x-reach)) - 1; j <= int(math.Ceil(x+reach))+1; j++ {
			w := kernel(float64(j) - x)
			if w == 0 || s.ExcludeOutside && (j < 0 || j >= in) {
				continue
			}
			js, ws = append(js, j), append(ws, w)
			sum += w
		}
		if !s.Antialias && !s.ExcludeOutside {
			sum = 1 // the plain kernels sum to 1 by construction
		}
		for k, j := range js {
			m[o*in+clamp(j)] += ws[k] / sum
		}
	}
	return m, outside
}

// resizeNode is a Resize or Upsample graph on input "x" of shape in.
type resizeNode struct {
	op     string
	opset  int64
	in     []int64
	scales []float32 // input (or Upsample-7 attribute)
	sizes  []int64
	roi    []float32
	attrs  []*onnxpb.AttributeProto
}

func (r resizeNode) graph(t *testing.T) *Graph {
	t.Helper()
	b := newBuilder(r.opset).input("x", r.in...)
	ins := []string{"x"}
	switch {
	case r.op == "Upsample" && r.opset < 9:
		r.attrs = append(r.attrs, attrFloats("scales", r.scales...))
	case r.op == "Upsample" || r.opset == 10:
		b.init("scales", f32t(r.scales...))
		ins = append(ins, "scales")
	default:
		ins = append(ins, "", "", "")
		if r.roi != nil {
			b.init("roi", f32t(r.roi...))
			ins[1] = "roi"
		}
		if r.scales != nil {
			b.init("scales", f32t(r.scales...))
			ins[2] = "scales"
		}
		if r.sizes != nil {
			b.init("sizes", i64([]int64{int64(len(r.sizes))}, r.sizes...))
			ins[3] = "sizes"
		}
		for ins[len(ins)-1] == "" {
			ins = ins[:len(ins)-1]
		}
	}
	return b.node(r.op, ins, []string{"y"}, r.attrs...).output("y").graph(t)
}

// spec returns the node's ResizeSpec, after shape inference has run on it.
func (r resizeNode) spec(t *testing.T) *ResizeSpec {
	t.Helper()
	g := r.graph(t)
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	s, err := g.Nodes[0].ResizeSpec(r.in)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Values["y"].Shape.Ints(); fmt.Sprint(got) != fmt.Sprint(s.Out) {
		t.Fatalf("inferred shape %v, spec %v", got, s.Out)
	}
	return s
}

// TestResizeWeights holds ResizeSpec.Axis to specAxis on every
// combination of mode, nearest_mode, coordinate transformation,
// cubic_coeff_a, exclude_outside and antialias, up- and downsampling by
// scales and by sizes, odd sizes and sizes of 1.
func TestResizeWeights(t *testing.T) {
	type geometry struct {
		in, out int64
		scale   float32 // 0: by sizes
	}
	geometries := []geometry{
		{5, 3, 0}, {4, 7, 0}, {1, 3, 0}, {3, 1, 0}, {7, 7, 0}, {6, 3, 0}, {20, 16, 0}, {2, 1, 0}, {1, 1, 0},
		{5, 0, 0.6}, {4, 0, 1.7}, {3, 0, 2}, {7, 0, 0.45}, {9, 0, 0.25}, {1, 0, 3}, {6, 0, 0.2}, {8, 0, 1},
	}
	type kernel struct {
		mode, nearest string
		a             float32
		exclude, aa   int64
	}
	kernels := []kernel{
		{"nearest", "round_prefer_floor", 0, 0, 0}, {"nearest", "round_prefer_ceil", 0, 0, 0},
		{"nearest", "floor", 0, 0, 0}, {"nearest", "ceil", 0, 0, 0},
		{"linear", "", 0, 0, 0}, {"linear", "", 0, 1, 0}, {"linear", "", 0, 0, 1}, {"linear", "", 0, 1, 1},
		{"cubic", "", -0.75, 0, 0}, {"cubic", "", -0.5, 1, 0}, {"cubic", "", -0.75, 0, 1}, {"cubic", "", -0.5, 1, 1},
	}
	coords := []string{"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"}
	rois := [][2]float32{{0, 1}, {0.2, 0.9}, {-0.3, 1.4}}
	checked := 0
	for _, geo := range geometries {
		for _, k := range kernels {
			for _, coord := range coords {
				opset := int64(19)
				if coord == "tf_half_pixel_for_nn" {
					if k.aa != 0 {
						continue // antialias came with opset 18, this mode left at 13
					}
					opset = 11
				}
				for ri, roi := range rois {
					if ri > 0 && coord != "tf_crop_and_resize" {
						continue
					}
					name := fmt.Sprintf("%d→%d×%v/%s%s/a%v/ex%d/aa%d/%s/roi%v", geo.in, geo.out, geo.scale, k.mode, k.nearest, k.a, k.exclude, k.aa, coord, roi)
					attrs := []*onnxpb.AttributeProto{attrStr("mode", k.mode), attrStr("coordinate_transformation_mode", coord),
						attrInt("exclude_outside", k.exclude)}
					if k.nearest != "" {
						attrs = append(attrs, attrStr("nearest_mode", k.nearest))
					}
					if k.a != 0 {
						attrs = append(attrs, attrFloat("cubic_coeff_a", k.a))
					}
					if opset >= 18 {
						attrs = append(attrs, attrInt("antialias", k.aa))
					}
					r := resizeNode{op: "Resize", opset: opset, in: []int64{2, geo.in}, attrs: attrs}
					if geo.scale != 0 {
						r.scales = []float32{1, geo.scale}
					} else {
						r.sizes = []int64{2, geo.out}
					}
					if coord == "tf_crop_and_resize" {
						r.roi = []float32{0, roi[0], 1, roi[1]}
					}
					// exclude_outside on a nearest location outside the
					// input leaves no weight: an error (below).
					g := r.graph(t)
					if err := g.InferShapes(nil); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					s, err := g.Nodes[0].ResizeSpec(r.in)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					a, err := s.Axis(1)
					if err != nil {
						if k.exclude != 0 && strings.Contains(err.Error(), "exclude_outside") {
							continue
						}
						t.Fatalf("%s: %v", name, err)
					}
					want, outside := specAxis(t, s, 1)
					got := a.Matrix()
					for i := range want {
						if !(math.Abs(got[i]-want[i]) <= 1e-12) { // NaN fails too
							t.Fatalf("%s: weight (%d, %d) = %v, the spec's %v\n got %v\nwant %v", name, i/a.In, i%a.In, got[i], want[i], got, want)
						}
					}
					for o, w := range outside {
						if got := a.Outside != nil && a.Outside[o]; got != w {
							t.Fatalf("%s: output %d extrapolated %v, the spec's %v", name, o, got, w)
						}
					}
					// (tf_half_pixel_for_nn shifts even an unscaled axis by
					// half a pixel.)
					if id, _ := s.Axis(0); !id.Identity() && coord != "tf_half_pixel_for_nn" {
						t.Errorf("%s: the unresized axis is not the identity", name)
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d combinations", checked)
}

// TestResizeSpec: output shapes and the scale the coordinates divide by,
// by scales (floor, the given scale), sizes (their ratio), the aspect
// policies (one scale, rounded half up), axes (negative ones from the
// back) and every version's defaults.
func TestResizeSpec(t *testing.T) {
	cases := []struct {
		name      string
		r         resizeNode
		out       []int64
		scale     []float64
		mode      string
		coord     string
		nearest   string
		antialias bool
	}{
		{"scales floor, given scale", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 5, 4}, scales: []float32{1, 1, 0.7, 1.7}},
			[]int64{1, 2, 3, 6}, []float64{1, 1, float64(float32(0.7)), float64(float32(1.7))}, "nearest", "half_pixel", "round_prefer_floor", false},
		{"sizes ratio", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 5, 4}, sizes: []int64{1, 2, 3, 6}},
			[]int64{1, 2, 3, 6}, []float64{1, 1, 0.6, 1.5}, "nearest", "half_pixel", "round_prefer_floor", false},
		{"240 → 224 by scales", resizeNode{op: "Resize", opset: 13, in: []int64{1, 3, 240, 240}, scales: []float32{1, 1, 224.0 / 240, 224.0 / 240}},
			[]int64{1, 3, 224, 224}, []float64{1, 1, float64(float32(224.0 / 240)), float64(float32(224.0 / 240))}, "nearest", "half_pixel", "round_prefer_floor", false},
		{"not_larger", resizeNode{op: "Resize", opset: 18, in: []int64{1, 2, 4, 5}, sizes: []int64{7, 8},
			attrs: []*onnxpb.AttributeProto{attrInts("axes", 2, 3), attrStr("keep_aspect_ratio_policy", "not_larger")}},
			[]int64{1, 2, 6, 8}, []float64{1, 1, 1.6, 1.6}, "nearest", "half_pixel", "round_prefer_floor", false},
		{"not_smaller, negative axes", resizeNode{op: "Resize", opset: 18, in: []int64{1, 2, 5, 4}, sizes: []int64{3, 2},
			attrs: []*onnxpb.AttributeProto{attrInts("axes", -1, -2), attrStr("keep_aspect_ratio_policy", "not_smaller")}},
			[]int64{1, 2, 4, 3}, []float64{1, 1, 0.75, 0.75}, "nearest", "half_pixel", "round_prefer_floor", false},
		{"axes subset by scales", resizeNode{op: "Resize", opset: 18, in: []int64{2, 3, 4, 5}, scales: []float32{2},
			attrs: []*onnxpb.AttributeProto{attrInts("axes", 1), attrStr("mode", "linear"), attrInt("antialias", 1)}},
			[]int64{2, 6, 4, 5}, []float64{1, 2, 1, 1}, "linear", "half_pixel", "round_prefer_floor", true},
		{"Resize-10 defaults", resizeNode{op: "Resize", opset: 10, in: []int64{1, 1, 2, 3}, scales: []float32{1, 1, 2, 3}},
			[]int64{1, 1, 4, 9}, []float64{1, 1, 2, 3}, "nearest", "asymmetric", "floor", false},
		{"Upsample-7 attribute", resizeNode{op: "Upsample", opset: 7, in: []int64{1, 1, 2, 3}, scales: []float32{1, 1, 2, 1.5},
			attrs: []*onnxpb.AttributeProto{attrStr("mode", "linear")}},
			[]int64{1, 1, 4, 4}, []float64{1, 1, 2, 1.5}, "linear", "asymmetric", "floor", false},
		{"Upsample-9 input", resizeNode{op: "Upsample", opset: 9, in: []int64{1, 1, 2, 3}, scales: []float32{1, 1, 2, 2}},
			[]int64{1, 1, 4, 6}, []float64{1, 1, 2, 2}, "nearest", "asymmetric", "floor", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.r.spec(t)
			if fmt.Sprint(s.Out) != fmt.Sprint(c.out) || fmt.Sprint(s.Scale) != fmt.Sprint(c.scale) {
				t.Errorf("out %v scale %v, want %v %v", s.Out, s.Scale, c.out, c.scale)
			}
			if s.Mode != c.mode || s.Coord != c.coord || s.Nearest != c.nearest || s.Antialias != c.antialias {
				t.Errorf("mode %q coord %q nearest %q antialias %v, want %q %q %q %v", s.Mode, s.Coord, s.Nearest, s.Antialias, c.mode, c.coord, c.nearest, c.antialias)
			}
		})
	}
}

// TestResizeRefusals: every malformed or unsupported Resize/Upsample is
// an error at shape inference naming the node and what is wrong.
func TestResizeRefusals(t *testing.T) {
	at := func(opset int64, attrs ...*onnxpb.AttributeProto) resizeNode {
		return resizeNode{op: "Resize", opset: opset, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 2, 2}, attrs: attrs}
	}
	cases := []struct {
		name string
		r    resizeNode
		want string
	}{
		{"both scales and sizes", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 2, 2}, sizes: []int64{1, 2, 8, 8}}, "both scales and sizes"},
		{"neither", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}}, "neither scales nor sizes"},
		{"scales length", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{2, 2}}, "scales has 2 values for 4 axes"},
		{"sizes length", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, sizes: []int64{8, 8}}, "sizes has 2 values for 4 axes"},
		{"sizes vs axes", resizeNode{op: "Resize", opset: 18, in: []int64{1, 2, 4, 4}, sizes: []int64{1, 2, 8, 8}, attrs: []*onnxpb.AttributeProto{attrInts("axes", 2, 3)}}, "sizes has 4 values for 2 axes"},
		{"zero scale", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 0, 2}}, "scales must be positive"},
		{"negative scale", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, -2, 2}}, "scales must be positive"},
		{"infinite scale", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, float32(math.Inf(1)), 2}}, "finite"},
		{"NaN scale", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, float32(math.NaN()), 2}}, "NaN"},
		{"scale to nothing", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 0.1, 2}}, "it must be 1 to"},
		{"scale overflow", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 1e30, 2}}, "it must be 1 to"},
		{"zero size", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, sizes: []int64{1, 2, 0, 4}}, "sizes must be 1 to"},
		{"mode", at(13, attrStr("mode", "bilinear")), `"bilinear" is not one of nearest, linear, cubic`},
		{"coordinate mode", at(13, attrStr("coordinate_transformation_mode", "centered")), `"centered" is not one of`},
		{"tf_half_pixel_for_nn at 13", at(13, attrStr("coordinate_transformation_mode", "tf_half_pixel_for_nn")), `"tf_half_pixel_for_nn" is not one of`},
		{"half_pixel_symmetric at 18", at(18, attrStr("coordinate_transformation_mode", "half_pixel_symmetric")), `"half_pixel_symmetric" is not one of`},
		{"nearest mode", at(13, attrStr("nearest_mode", "round")), `"round" is not one of`},
		{"antialias at 13", at(13, attrInt("antialias", 1)), "came with opset 18"},
		{"axes at 17", at(17, attrInts("axes", 2, 3)), "came with opset 18"},
		{"axes out of range", resizeNode{op: "Resize", opset: 18, in: []int64{1, 2, 4, 4}, scales: []float32{2}, attrs: []*onnxpb.AttributeProto{attrInts("axes", 4)}}, "out of range"},
		{"axes repeated", resizeNode{op: "Resize", opset: 18, in: []int64{1, 2, 4, 4}, scales: []float32{2, 2}, attrs: []*onnxpb.AttributeProto{attrInts("axes", 2, -2)}}, "repeated"},
		{"aspect policy with scales", at(18, attrStr("keep_aspect_ratio_policy", "not_larger")), "applies to sizes, not scales"},
		{"aspect policy", resizeNode{op: "Resize", opset: 18, in: []int64{1, 2, 4, 4}, sizes: []int64{1, 2, 8, 8}, attrs: []*onnxpb.AttributeProto{attrStr("keep_aspect_ratio_policy", "fit")}}, `"fit" is not one of stretch`},
		{"crop without roi", at(13, attrStr("coordinate_transformation_mode", "tf_crop_and_resize")), "needs the roi input"},
		{"roi length", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 2, 2}, roi: []float32{0, 1},
			attrs: []*onnxpb.AttributeProto{attrStr("coordinate_transformation_mode", "tf_crop_and_resize")}}, "roi has 2 values for 4 axes"},
		{"infinite roi", resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 2, 2}, roi: []float32{0, 0, 0, float32(math.Inf(-1)), 1, 1, 1, 1},
			attrs: []*onnxpb.AttributeProto{attrStr("coordinate_transformation_mode", "tf_crop_and_resize")}}, "the roi must be finite"},
		{"cubic at 10", resizeNode{op: "Resize", opset: 10, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 2, 2}, attrs: []*onnxpb.AttributeProto{attrStr("mode", "cubic")}}, "cubic came with opset 11"},
		{"Upsample mode", resizeNode{op: "Upsample", opset: 9, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 2, 2}, attrs: []*onnxpb.AttributeProto{attrStr("mode", "cubic")}}, "not an Upsample mode"},
		{"Upsample at 10", resizeNode{op: "Upsample", opset: 10, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 2, 2}}, "Upsample opset 10 is not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.r.graph(t).InferShapes(nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "node "+c.r.op+` "`+c.r.op+`_y"`) {
				t.Errorf("err = %v; want one naming the node and containing %q", err, c.want)
			}
		})
	}
	// sizes computed at run time (not folded): the node and the input.
	g := newBuilder(13).input("x", 1, 2, 4, 4).input("s", 4).
		node("Cast", []string{"s"}, []string{"sz"}, attrInt("to", int64(Int64))).
		node("Resize", []string{"x", "", "", "sz"}, []string{"y"}).output("y").graph(t)
	if err := g.InferShapes(nil); err == nil || !strings.Contains(err.Error(), `Resize "Resize_y"`) || !strings.Contains(err.Error(), "must be a constant") {
		t.Errorf("run-time sizes: err = %v", err)
	}
	// exclude_outside leaving an output without weight: half_pixel puts
	// output 0 of a doubled axis at −0.25, which nearest_mode floor
	// takes to index −1, outside the input.
	r := resizeNode{op: "Resize", opset: 13, in: []int64{1, 1, 3, 4}, scales: []float32{1, 1, 1, 2}, attrs: []*onnxpb.AttributeProto{
		attrStr("nearest_mode", "floor"), attrInt("exclude_outside", 1)}}
	if _, err := r.spec(t).Axis(3); err == nil || !strings.Contains(err.Error(), "exclude_outside leaves no sampling location") {
		t.Errorf("nearest floor outside with exclude_outside: err = %v", err)
	}
}

// TestResizeIdentityAxes: axes that keep their length under the
// identity transform are recognized (the runtime skips them), and the
// others are not.
func TestResizeIdentityAxes(t *testing.T) {
	for _, c := range []struct {
		attrs []*onnxpb.AttributeProto
		want  []bool
	}{
		{[]*onnxpb.AttributeProto{attrStr("mode", "cubic")}, []bool{true, true, false, true}},
		{[]*onnxpb.AttributeProto{attrStr("mode", "linear"), attrStr("coordinate_transformation_mode", "align_corners")}, []bool{true, true, false, true}},
		{[]*onnxpb.AttributeProto{attrStr("mode", "nearest"), attrStr("coordinate_transformation_mode", "asymmetric")}, []bool{true, true, false, true}},
		// tf_half_pixel_for_nn shifts every axis by half a pixel: nearest
		// rounds the shift away (ties go down), linear interpolates
		// neighbours even on unscaled axes, as the specification says.
		{[]*onnxpb.AttributeProto{attrStr("coordinate_transformation_mode", "tf_half_pixel_for_nn")}, []bool{true, true, false, true}},
		{[]*onnxpb.AttributeProto{attrStr("mode", "linear"), attrStr("coordinate_transformation_mode", "tf_half_pixel_for_nn")}, []bool{false, false, false, false}},
	} {
		opset := int64(13)
		if strings.Contains(fmt.Sprint(c.attrs), "tf_half_pixel_for_nn") {
			opset = 11
		}
		s := resizeNode{op: "Resize", opset: opset, in: []int64{2, 3, 4, 5}, scales: []float32{1, 1, 2, 1}, attrs: c.attrs}.spec(t)
		for d, w := range c.want {
			a, err := s.Axis(d)
			if err != nil {
				t.Fatal(err)
			}
			if a.Identity() != w {
				t.Errorf("%v axis %d: identity %v, want %v", c.attrs, d, a.Identity(), w)
			}
		}
	}
}

// TestResizeArgument: a float initializer read as a Resize's scales is an
// argument of the operator, not a parameter; one also read as data is not.
func TestResizeArgument(t *testing.T) {
	g := resizeNode{op: "Resize", opset: 13, in: []int64{1, 2, 4, 4}, scales: []float32{1, 1, 2, 2}}.graph(t)
	if v := g.Values["scales"]; !v.IsParam() || !v.ResizeArgument() {
		t.Errorf("scales: param %v, argument %v", v.IsParam(), v.ResizeArgument())
	}
	if g.Values["x"].ResizeArgument() {
		t.Error("the data input is an argument")
	}
	g = newBuilder(13).input("x", 1, 4).init("s", f32t(1, 2)).node("Resize", []string{"x", "", "s"}, []string{"y"}).
		node("Mul", []string{"y", "s"}, []string{"z"}).output("z").graph(t)
	if g.Values["s"].ResizeArgument() {
		t.Error("an initializer also multiplied is an argument")
	}
}
