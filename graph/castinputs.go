package graph

// CastInputsToFloat lets a model exported with its preprocessing run on
// float32 data: a uint8 graph input (pixels) that every consumer casts to
// float32 at once (x.float() / 255 …) is computed as float32 holding the
// same integer values, each Cast then a float32 copy, and keeps its type
// for the export (Value.Declared). It returns the inputs it changed.
func (g *Graph) CastInputsToFloat() []*Value {
	var out []*Value
	for _, in := range g.Inputs {
		if in.DType != Uint8 || len(in.Consumers) == 0 {
			continue
		}
		all := true
		for _, n := range in.Consumers {
			to, err := n.Int("to")
			all = all && n.OpType == "Cast" && err == nil && DType(to) == Float32
		}
		if all {
			in.Declared, in.DType = in.DType, Float32
			out = append(out, in)
		}
	}
	return out
}
