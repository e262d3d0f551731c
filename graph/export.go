package graph

import (
	"bytes"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// ToONNX writes the graph back into a model. Everything the IR did not
// change is carried over from the loaded model as it was: model and graph
// fields (names, doc strings, metadata, opset imports, functions), node
// protos, initializers whose data is unchanged (including external data
// references), declared input and output types (symbolic batch axes stay
// symbolic), and value_info of values that still exist. Folded constants
// become initializers. A graph that no pass changed re-encodes to the bytes
// it was loaded from.
func (g *Graph) ToONNX() (*onnx.Model, error) {
	src := g.model
	if src == nil {
		src = onnx.NewModel(&onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: &onnxpb.GraphProto{}})
		for d, v := range g.Opsets {
			src.Proto.OpsetImport = append(src.Proto.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(d), Version: proto.Int64(v)})
		}
	}
	orig := src.Proto
	// Clone the model without its graph, and the graph without its lists,
	// so that unknown fields and everything untouched survive.
	og := orig.Graph
	orig.Graph = nil
	mp := proto.Clone(orig).(*onnxpb.ModelProto)
	orig.Graph = og
	gp := &onnxpb.GraphProto{}
	if og != nil {
		saved := [5]any{og.Node, og.Initializer, og.Input, og.Output, og.ValueInfo}
		og.Node, og.Initializer, og.Input, og.Output, og.ValueInfo = nil, nil, nil, nil, nil
		gp = proto.Clone(og).(*onnxpb.GraphProto)
		og.Node = saved[0].([]*onnxpb.NodeProto)
		og.Initializer = saved[1].([]*onnxpb.TensorProto)
		og.Input = saved[2].([]*onnxpb.ValueInfoProto)
		og.Output = saved[3].([]*onnxpb.ValueInfoProto)
		og.ValueInfo = saved[4].([]*onnxpb.ValueInfoProto)
	}
	mp.Graph = gp

	// Declared types stay valid only where the IR did not touch the value:
	// its producing node or initializer is carried over unchanged.
	// A value is untouched when its producer is carried over unchanged and
	// so is everything upstream of it (a new head changes the shapes below
	// it even where node protos are unchanged).
	untouched := map[string]bool{}
	for _, v := range g.Inputs {
		untouched[v.Name] = true
	}
	var inits []*onnxpb.TensorProto
	for _, v := range g.Initializers {
		if g.Values[v.Name] != v {
			continue
		}
		tp := initializerProto(src, v)
		inits = append(inits, tp)
		if tp == v.proto {
			untouched[v.Name] = true
		}
	}
	for _, n := range g.Nodes {
		np := n.toProto()
		gp.Node = append(gp.Node, np)
		clean := np == n.proto
		for _, in := range n.Inputs {
			folded := in != nil && in.Const != nil && !in.Initializer
			if in != nil && !untouched[in.Name] && !folded {
				clean = false
			}
		}
		if clean {
			for _, o := range np.GetOutput() {
				untouched[o] = true
			}
		}
	}
	gp.Initializer = inits
	for _, v := range g.Constants() {
		gp.Initializer = append(gp.Initializer, v.Const.ToProto(v.Name))
	}

	isInput := map[string]*Value{}
	for _, v := range g.Inputs {
		isInput[v.Name] = v
	}
	written := map[string]bool{}
	redeclared := false // an input's shape differs from the loaded model's
	if og != nil {
		for _, vi := range og.Input {
			name := vi.GetName()
			v, ok := g.Values[name]
			switch {
			case ok && isInput[name] == v && compatible(vi, v):
				gp.Input = append(gp.Input, vi)
			case ok && isInput[name] == v:
				gp.Input = append(gp.Input, valueInfo(v, vi))
				redeclared = true
			case ok && v.Initializer && untouched[name]:
				gp.Input = append(gp.Input, vi)
			case ok && v.Initializer:
				gp.Input = append(gp.Input, valueInfo(v, vi))
			default:
				continue
			}
			written[name] = true
		}
	}
	for _, v := range g.Inputs {
		if !written[v.Name] {
			gp.Input = append(gp.Input, valueInfo(v, nil))
		}
	}
	declared := map[string]*onnxpb.ValueInfoProto{}
	if og != nil {
		for _, vi := range og.Output {
			declared[vi.GetName()] = vi
		}
	}
	for _, v := range g.Outputs {
		vi := declared[v.Name]
		if vi != nil && compatible(vi, v) {
			gp.Output = append(gp.Output, vi)
		} else {
			gp.Output = append(gp.Output, valueInfo(v, vi))
		}
	}
	// The loaded model's intermediate shapes hold for its own input
	// shapes only (a released batch axis changes them all).
	if og != nil && !redeclared {
		for _, vi := range og.ValueInfo {
			if v, ok := g.Values[vi.GetName()]; ok && v.Producer != nil && untouched[vi.GetName()] {
				gp.ValueInfo = append(gp.ValueInfo, vi)
			}
		}
	}
	// torch.export's signature marks (TorchInputKind) on the initializers'
	// value_info: without them a model trained and loaded again would take
	// its parameters for values the exporter's optimizer made (a folded
	// convolution weight, ExportForm; the state dict, rewrite.StateDictOf).
	// Written afresh, with the initializer's own shape and type as it is
	// written (a replaced head's differ from the loaded entry's).
	if og != nil && g.ExportSignature {
		inValueInfo := map[string]bool{}
		for _, vi := range gp.ValueInfo {
			inValueInfo[vi.GetName()] = true
		}
		for _, vi := range og.ValueInfo {
			name := vi.GetName()
			v, ok := g.Values[name]
			if !ok || !v.Initializer || v.Const == nil || inValueInfo[name] || written[name] || !hasTorchKind(vi.GetMetadataProps()) {
				continue
			}
			inValueInfo[name] = true
			dims := &onnxpb.TensorShapeProto{}
			for _, d := range v.Const.Shape {
				dims.Dim = append(dims.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
			}
			gp.ValueInfo = append(gp.ValueInfo, &onnxpb.ValueInfoProto{Name: proto.String(name), DocString: vi.DocString, MetadataProps: vi.MetadataProps,
				Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(v.Const.DType)), Shape: dims}}}})
		}
	}
	return src.Derive(mp), nil
}

// initializerProto returns the loaded proto of v if its shape and data are
// unchanged, else a fresh one with raw_data.
func initializerProto(src *onnx.Model, v *Value) *onnxpb.TensorProto {
	if p := v.proto; p != nil && int32(v.Const.DType) == p.GetDataType() && slices.Equal(v.Const.Shape, p.GetDims()) {
		if old, err := src.TensorBytes(p); err == nil && bytes.Equal(old, v.Const.Bytes()) {
			return p
		}
	}
	t := v.Const.ToProto(v.Name)
	if v.proto != nil {
		t.DocString = v.proto.DocString
		t.MetadataProps = v.proto.MetadataProps
	}
	return t
}

// toProto returns the node's loaded proto if the IR still matches it, else
// a new proto that keeps its name, domain, doc string and metadata.
func (n *Node) toProto() *onnxpb.NodeProto {
	ins := make([]string, len(n.Inputs))
	for i, v := range n.Inputs {
		if v != nil {
			ins[i] = v.Name
		}
	}
	outs := make([]string, len(n.Outputs))
	for i, v := range n.Outputs {
		if v != nil {
			outs[i] = v.Name
		}
	}
	p := n.proto
	if p != nil && p.GetOpType() == n.OpType && slices.Equal(p.GetInput(), ins) && slices.Equal(p.GetOutput(), outs) &&
		sameAttrs(p.GetAttribute(), n.Attrs) && p.GetName() == n.Name {
		return p
	}
	np := &onnxpb.NodeProto{Input: ins, Output: outs, OpType: proto.String(n.OpType), Attribute: n.Attrs}
	if n.Name != "" {
		np.Name = proto.String(n.Name)
	}
	if n.Domain != "" {
		np.Domain = proto.String(n.Domain)
	}
	if p != nil {
		if p.Domain != nil && canonicalDomain(p.GetDomain()) == n.Domain {
			np.Domain = p.Domain
		}
		np.DocString, np.Overload, np.MetadataProps, np.DeviceConfigurations = p.DocString, p.Overload, p.MetadataProps, p.DeviceConfigurations
	}
	return np
}

func sameAttrs(a, b []*onnxpb.AttributeProto) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// compatible reports whether a declared type still describes v: same dtype
// and rank, and every statically declared dim equal to v's.
func compatible(vi *onnxpb.ValueInfoProto, v *Value) bool {
	dt, sh, err := typeOf(vi)
	if err != nil || (dt != v.DType && dt != v.Declared && v.DType != Undefined) {
		return false
	}
	if sh == nil || v.Shape == nil {
		return true
	}
	if len(sh) != len(v.Shape) {
		return false
	}
	for i, d := range sh {
		if d.Size >= 0 && v.Shape[i].Size >= 0 && d.Size != v.Shape[i].Size {
			return false
		}
		// A fixed size made symbolic (a released batch axis) is declared
		// anew.
		if d.Size >= 0 && v.Shape[i].Size < 0 && v.Shape[i].Param != "" {
			return false
		}
	}
	return true
}

// valueInfo describes v; dims that prev declared symbolic stay symbolic.
func valueInfo(v *Value, prev *onnxpb.ValueInfoProto) *onnxpb.ValueInfoProto {
	_, psh, _ := typeOf(prev)
	sh := &onnxpb.TensorShapeProto{}
	for i, d := range v.Shape {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		switch {
		case i < len(psh) && psh[i].Size < 0 && psh[i].Param != "":
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: psh[i].Param}
		case d.Size >= 0:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d.Size}
		case d.Param != "":
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d.Param}
		}
		sh.Dim = append(sh.Dim, dim)
	}
	dt := v.DType
	if v.Declared != Undefined {
		dt = v.Declared
	}
	tt := &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dt))}
	if v.Shape != nil {
		tt.Shape = sh
	}
	vi := &onnxpb.ValueInfoProto{Name: proto.String(v.Name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: tt}}}
	if prev != nil {
		vi.DocString = prev.DocString
		vi.MetadataProps = prev.MetadataProps
	}
	return vi
}

// hasTorchKind says whether md holds a torch.export signature mark.
func hasTorchKind(md []*onnxpb.StringStringEntryProto) bool {
	for _, e := range md {
		if e.GetKey() == TorchInputKind {
			return true
		}
	}
	return false
}
