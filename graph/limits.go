package graph

import (
	"fmt"
	"math"
	"sort"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Limits on what a model file can make the process materialise. Shapes
// come from the file (ConstantOfShape, Expand, Tile, Reshape targets, …), so
// they are checked before anything is allocated.
const (
	// MaxTensorBytes bounds one tensor of the inferred graph. No real
	// model comes near it (a batch of 1024 ResNet stems is 13 GB); a value
	// beyond it is a malformed or hostile file, refused at shape inference
	// before any buffer is planned.
	MaxTensorBytes = 1 << 40
	// maxFoldBytes bounds a folded constant of an operator that only
	// folding can compute (ConstantOfShape, Range): the runtime has no
	// kernel for it, so a larger one is an error rather than left to run.
	maxFoldBytes = 4 * maxFoldElements
)

// mustFold lists the operators the runtime cannot run: they are folded or
// the model is refused.
var mustFold = map[string]bool{"ConstantOfShape": true, "Range": true, "Constant": true}

// mustFoldOps names the operators of mustFold that compute data (for
// messages), sorted.
func mustFoldOps() []string {
	var ops []string
	for op := range mustFold {
		if op != "Constant" {
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	return ops
}

// ShapeElements returns the number of elements of a static shape, and
// false when a dimension is unknown or negative or the product overflows
// int64.
func ShapeElements(dims []int64) (int64, bool) {
	n := int64(1)
	for _, d := range dims {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// elemBytes is the size of one element of dt, counting 1 for types without
// a fixed size so that every value is bounded.
func elemBytes(dt DType) int64 {
	if es := onnx.ElemSize(onnxpb.TensorProto_DataType(dt)); es > 0 {
		return int64(es)
	}
	return 1
}

// checkOutputSizes refuses an inferred output that no machine could hold:
// an element count that overflows or a size over MaxTensorBytes.
func checkOutputSizes(n *Node) error {
	for _, v := range n.Outputs {
		if v == nil || !v.Shape.Static() {
			continue
		}
		dims := v.Shape.Ints()
		elems, ok := ShapeElements(dims)
		if !ok {
			return fmt.Errorf("graph: node %s: output %q has shape %v, whose element count overflows", n, v.Name, v.Shape)
		}
		es := elemBytes(v.DType)
		if elems > MaxTensorBytes/es {
			return fmt.Errorf("graph: node %s: output %q of shape %v (%v) would take %s, over the %s limit for one tensor",
				n, v.Name, v.Shape, v.DType, FormatBytes(float64(elems)*float64(es)), FormatBytes(MaxTensorBytes))
		}
	}
	return nil
}

// foldTooLarge reports whether folding n would materialise an output over
// maxFoldElements, judging from the inferred output shapes before
// anything is evaluated. For an operator only folding can compute, that is
// an error naming the size asked for and the limit.
func foldTooLarge(n *Node) (bool, error) {
	for _, v := range n.Outputs {
		if v == nil || !v.Shape.Static() {
			continue
		}
		elems, _ := ShapeElements(v.Shape.Ints())
		if elems <= maxFoldElements {
			continue
		}
		if mustFold[n.OpType] {
			return true, fmt.Errorf("graph: node %s: folding output %q of shape %v (%v) would take %s, over the %s limit for a folded constant",
				n, v.Name, v.Shape, v.DType, FormatBytes(float64(elems)*float64(elemBytes(v.DType))), FormatBytes(maxFoldBytes))
		}
		return true, nil
	}
	return false, nil
}

// FormatBytes writes a byte count with a binary unit ("4 PiB", "512 MiB").
func FormatBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 || b == math.Trunc(b) {
		return fmt.Sprintf("%.0f %s", b, units[i])
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}
