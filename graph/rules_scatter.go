package graph

import (
	"errors"
	"fmt"
	"math"
)

// ScatterND: torchvision's swin_t builds its shifted-window attention mask
// with index_put, which exports as ScatterND on shape-derived constants;
// folding it turns the mask into a constant.

func init() {
	rules["ScatterND"] = rule{infer: inferScatterND, eval: evalScatterND}
}

// ScatterReduction returns the reduction of a ScatterND or ScatterElements
// node: "none" (replace), "add", "mul", "max" or "min". Opsets before 16
// have no reduction attribute; "max" and "min" arrive in 18.
func (n *Node) ScatterReduction() (string, error) {
	r := "none"
	if a := n.Attr("reduction"); a != nil {
		r = string(a.GetS())
	}
	switch r {
	case "none":
	case "add", "mul":
		if n.Opset != 0 && n.Opset < 16 {
			return "", fmt.Errorf("reduction %q needs opset 16 (the model imports opset %d)", r, n.Opset)
		}
	case "max", "min":
		if n.Opset != 0 && n.Opset < 18 {
			return "", fmt.Errorf("reduction %q needs opset 18 (the model imports opset %d)", r, n.Opset)
		}
	default:
		return "", fmt.Errorf("unknown reduction %q", r)
	}
	return r, nil
}

// ScatterNDTargets returns, for every element of the updates of a
// ScatterND on data of shape data with indices of shape idxShape (last
// axis k: each index tuple names a slice data[i₀,…,i_{k−1}, …]), the flat
// offset in data the element goes to. Negative indices count from the end.
func ScatterNDTargets(data, idxShape, indices []int64) ([]int, error) {
	if len(idxShape) == 0 {
		return nil, errors.New("indices must have rank ≥ 1")
	}
	k := int(idxShape[len(idxShape)-1])
	if k < 1 || k > len(data) {
		return nil, fmt.Errorf("indices %v address %d axes of data %v", idxShape, k, data)
	}
	tuples := numel(idxShape[:len(idxShape)-1])
	if len(indices) != tuples*k {
		return nil, fmt.Errorf("indices hold %d values, shape %v needs %d", len(indices), idxShape, tuples*k)
	}
	slice := numel(data[k:])
	st := stridesOf(data)
	out := make([]int, 0, tuples*slice)
	for t := 0; t < tuples; t++ {
		base := 0
		for a := 0; a < k; a++ {
			i := indices[t*k+a]
			if i < 0 {
				i += data[a]
			}
			if i < 0 || i >= data[a] {
				return nil, fmt.Errorf("index %d out of range for axis %d of size %d (tuple %d)", indices[t*k+a], a, data[a], t)
			}
			base += int(i) * st[a]
		}
		for j := 0; j < slice; j++ {
			out = append(out, base+j)
		}
	}
	return out, nil
}

// scatterNDUpdatesShape is the shape ScatterND's updates must have.
func scatterNDUpdatesShape(data, idx Shape) (Shape, error) {
	if data == nil || idx == nil {
		return nil, nil
	}
	if len(idx) == 0 {
		return nil, errors.New("indices must have rank ≥ 1")
	}
	k := idx[len(idx)-1].Size
	if k < 0 {
		return nil, nil
	}
	if k < 1 || int(k) > len(data) {
		return nil, fmt.Errorf("indices %v address %d axes of data %v", idx, k, data)
	}
	return append(append(Shape{}, idx[:len(idx)-1]...), data[k:]...), nil
}

func inferScatterND(g *Graph, n *Node) error {
	x, idx, upd := n.Input(0), n.Input(1), n.Input(2)
	if x == nil || idx == nil || upd == nil {
		return errors.New("ScatterND needs data, indices and updates")
	}
	if _, err := n.ScatterReduction(); err != nil {
		return err
	}
	want, err := scatterNDUpdatesShape(x.Shape, idx.Shape)
	if err != nil {
		return err
	}
	if want != nil && upd.Shape != nil {
		if len(want) != len(upd.Shape) {
			return fmt.Errorf("updates have shape %v, want %v", upd.Shape, want)
		}
		for i, d := range want {
			if d.Size >= 0 && upd.Shape[i].Size >= 0 && d.Size != upd.Shape[i].Size {
				return fmt.Errorf("updates have shape %v, want %v", upd.Shape, want)
			}
		}
	}
	setOut(n, 0, x.DType, x.Shape)
	return nil
}

func evalScatterND(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x, ind, upd := in[0], in[1], in[2]
	indices, err := ind.Ints()
	if err != nil {
		return nil, err
	}
	tgt, err := ScatterNDTargets(x.Shape, ind.Shape, indices)
	if err != nil {
		return nil, err
	}
	if len(tgt) != upd.Len() {
		return nil, fmt.Errorf("updates %v hold %d elements, the indices address %d", upd.Shape, upd.Len(), len(tgt))
	}
	if upd.DType != x.DType {
		return nil, fmt.Errorf("updates are %v, data %v", upd.DType, x.DType)
	}
	red, err := n.ScatterReduction()
	if err != nil {
		return nil, err
	}
	// Replacement works for every dtype: pick from data ++ updates.
	if red == "none" {
		both, err := concatFlat(x, upd)
		if err != nil {
			return nil, err
		}
		idx := identityIndex(x.Len())
		for u, j := range tgt {
			idx[j] = x.Len() + u
		}
		return []*Tensor{both.take(x.Shape, idx)}, nil
	}
	out := x.take(x.Shape, identityIndex(x.Len()))
	vals := make([]float64, x.Len())
	for i := range vals {
		vals[i] = x.At(i)
	}
	for u, j := range tgt {
		v := upd.At(u)
		switch red {
		case "add":
			vals[j] += v
		case "mul":
			vals[j] *= v
		case "max":
			vals[j] = math.Max(vals[j], v)
		case "min":
			vals[j] = math.Min(vals[j], v)
		}
	}
	return []*Tensor{out}, out.setFloat64s(vals)
}

// setFloat64s stores vals in a numeric tensor, rounding to its own type.
func (t *Tensor) setFloat64s(vals []float64) error {
	switch {
	case t.F32 != nil:
		for i, v := range vals {
			t.F32[i] = float32(v)
		}
	case t.F64 != nil:
		copy(t.F64, vals)
	case t.I64 != nil:
		for i, v := range vals {
			t.I64[i] = int64(v)
		}
	default:
		return fmt.Errorf("cannot fold arithmetic on %v", t.DType)
	}
	return nil
}
