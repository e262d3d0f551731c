package graph

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Control flow whose structure is static is unrolled when the graph is
// loaded, so that the runtime, which runs neither control flow nor
// sequences, sees only operators.
//
// PyTorch's TorchScript exporter writes a Python loop over a list of
// tensors — torch.tensor_split by a list of indices, as torchvision's MViT
// splits the class token from the pooled tokens — as an ONNX Loop of a
// constant trip count whose body appends a slice to a sequence
// (SequenceEmpty, SequenceInsert), read back by SequenceAt at constant
// positions; and torch's squeeze(dim) of a dimension whose size it did not
// see at export time (a model exported with dynamic axes) as an If on that
// size. Here:
//   - a Loop whose trip count is a constant (at most MaxUnrolledTrips)
//     and whose condition is constantly true becomes that many copies of
//     its body, the iteration number a constant in each, the loop-carried
//     values chained and the scan outputs concatenated (unrollLoops);
//   - the sequences of the result, built and read at constant positions,
//     become the tensors they hold (resolveSequences);
//   - an If whose condition is a constant, or folds to the same value for
//     a batch of 2 and of 3 samples (a condition on a dimension that is not
//     the batch's; at an export's fixed batch, that batch), becomes the
//     nodes of the branch it takes (Graph.inlineStaticIfs).
//
// What is not static stays as it is, and CheckOps names it.

// MaxUnrolledTrips bounds the iterations of one Loop that unrolling
// makes; the nodes it adds count against MaxExpandedNodes with function
// expansion's.
const MaxUnrolledTrips = 4096

// unroller rewrites the main graph's node protos.
type unroller struct {
	m      *onnx.Model
	opset  int64                          // the default domain's
	consts map[string]*onnxpb.TensorProto // initializers and Constant outputs
	values map[string]bool                // every value name in use
	outs   map[string]bool                // the graph's outputs
	nodes  map[string]bool
	nextV  map[string]int
	nextN  map[string]int
	added  int64
	loops  int // unrolled
}

func newUnroller(m *onnx.Model, gp *onnxpb.GraphProto, nodes []loadedNode, opset int64) *unroller {
	u := &unroller{m: m, opset: opset, consts: map[string]*onnxpb.TensorProto{}, values: map[string]bool{}, outs: map[string]bool{}, nodes: map[string]bool{},
		nextV: map[string]int{}, nextN: map[string]int{}}
	for _, tp := range gp.GetInitializer() {
		u.consts[tp.GetName()] = tp
		u.values[tp.GetName()] = true
	}
	for _, vi := range gp.GetInput() {
		u.values[vi.GetName()] = true
	}
	for _, vi := range gp.GetOutput() {
		u.values[vi.GetName()] = true
		u.outs[vi.GetName()] = true
	}
	var walk func(ns []*onnxpb.NodeProto)
	walk = func(ns []*onnxpb.NodeProto) {
		for _, np := range ns {
			u.nodes[np.GetName()] = true
			for _, s := range np.GetOutput() {
				u.values[s] = true
			}
			for _, a := range np.GetAttribute() {
				if a.GetG() != nil {
					walk(a.GetG().GetNode())
				}
				for _, sg := range a.GetGraphs() {
					walk(sg.GetNode())
				}
			}
		}
	}
	for _, ln := range nodes {
		walk([]*onnxpb.NodeProto{ln.proto})
	}
	return u
}

// unrollLoops applies the static rewrites of control flow to the main
// graph's nodes (see above); nodes it cannot rewrite are kept as they are.
// It returns the nodes and the number of Loops unrolled.
func unrollLoops(m *onnx.Model, gp *onnxpb.GraphProto, nodes []loadedNode, opsets map[string]int64) ([]loadedNode, int, error) {
	has := false
	for _, ln := range nodes {
		switch ln.proto.GetOpType() {
		case "Loop", "SequenceEmpty", "SequenceConstruct":
			has = canonicalDomain(ln.proto.GetDomain()) == "" || has
		}
	}
	if !has {
		return nodes, 0, nil
	}
	u := newUnroller(m, gp, nodes, opsets[""])
	out, err := u.run(nodes)
	if err != nil {
		return nil, 0, err
	}
	return u.resolveSequences(out), u.loops, nil
}

// run unrolls every static Loop of nodes, and the Loops their bodies hold.
func (u *unroller) run(nodes []loadedNode) ([]loadedNode, error) {
	var out []loadedNode
	for _, ln := range nodes {
		np := ln.proto
		if np.GetOpType() == "Constant" && canonicalDomain(np.GetDomain()) == "" && len(np.GetOutput()) == 1 {
			if a := attrMap(np.GetAttribute())["value"]; a != nil && a.GetT() != nil {
				u.consts[np.GetOutput()[0]] = a.GetT()
			}
		}
		if np.GetOpType() != "Loop" || canonicalDomain(np.GetDomain()) != "" {
			out = append(out, ln)
			continue
		}
		body, err := u.unroll(ln)
		if err != nil {
			return nil, fmt.Errorf("graph: node %s: %w", protoLabel(np), err)
		}
		if body == nil {
			out = append(out, ln)
			continue
		}
		u.loops++
		body, err = u.run(body)
		if err != nil {
			return nil, err
		}
		out = append(out, body...)
	}
	return out, nil
}

// constScalar returns the value of the constant named name, where it is
// an integer or boolean tensor of one element.
func (u *unroller) constScalar(name string) (int64, bool) {
	tp := u.consts[name]
	if tp == nil {
		return 0, false
	}
	t, err := TensorFromProto(u.m, tp)
	if err != nil || t.Len() != 1 {
		return 0, false
	}
	switch {
	case t.I64 != nil:
		return t.I64[0], true // exact: a while loop's trip count is 2⁶³−1
	case t.B != nil:
		if t.B[0] {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// unroll returns the nodes that replace the Loop ln, or nil where its trip
// count or condition is not static.
func (u *unroller) unroll(ln loadedNode) ([]loadedNode, error) {
	np := ln.proto
	ins := np.GetInput()
	if len(ins) < 2 || ins[0] == "" {
		return nil, nil
	}
	trips, ok := u.constScalar(ins[0])
	if !ok {
		return nil, nil
	}
	if ins[1] != "" {
		c, ok := u.constScalar(ins[1])
		if !ok {
			return nil, nil
		}
		if c == 0 {
			trips = 0
		}
	}
	if trips < 0 || trips > MaxUnrolledTrips {
		return nil, fmt.Errorf("a Loop of %d iterations: unrolled, at most %d", trips, MaxUnrolledTrips)
	}
	body := attrMap(np.GetAttribute())["body"].GetG()
	if body == nil {
		return nil, fmt.Errorf("Loop without a body")
	}
	carried := ins[2:]
	bin, bout := body.GetInput(), body.GetOutput()
	k := len(carried)
	scans := len(bout) - 1 - k
	if len(bin) != 2+k || scans < 0 || len(np.GetOutput()) != k+scans {
		return nil, fmt.Errorf("Loop body of %d inputs and %d outputs for %d carried values and %d outputs", len(bin), len(bout), k, len(np.GetOutput()))
	}
	if !u.staticTrue(body, bout[0].GetName(), bin[1].GetName()) {
		return nil, nil
	}
	if scans > 0 && trips == 0 {
		return nil, nil // an empty scan output's shape is not known here
	}
	n := trips*int64(len(body.GetNode())+1) + int64(k+2*scans)
	if u.added+n > MaxExpandedNodes {
		return nil, fmt.Errorf("unrolling %d iterations of %d nodes would add more than %d nodes, the bound on what the loader may add", trips, len(body.GetNode()), MaxExpandedNodes)
	}
	u.added += n
	label := np.GetName()
	if label == "" && len(np.GetOutput()) > 0 {
		label = np.GetOutput()[0]
	}
	if label == "" {
		label = "Loop"
	}
	var out []loadedNode
	emit := func(op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) {
		p := &onnxpb.NodeProto{Name: proto.String(u.freshNode(label + "/" + op)), OpType: proto.String(op), Input: ins, Output: outs, Attribute: attrs}
		out = append(out, loadedNode{proto: p, opset: ln.opset, from: ln.from})
	}
	constant := func(base string, t *onnxpb.TensorProto) string {
		name := u.freshValue(base)
		t.Name = proto.String(name)
		emit("Constant", nil, []string{name}, &onnxpb.AttributeProto{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t})
		u.consts[name] = t
		return name
	}
	cond := ins[1]
	if cond == "" {
		cond = constant(label+"/cond", &onnxpb.TensorProto{DataType: proto.Int32(int32(Bool)), Int32Data: []int32{1}})
	}
	// The iteration number has the shape the body declares for it:
	// TorchScript's exports read it as a vector of one element, and
	// onnxruntime takes Slice bounds that way only.
	var iterDims []int64
	if sh := bin[0].GetType().GetTensorType().GetShape(); sh != nil && len(sh.GetDim()) == 1 {
		iterDims = []int64{1}
	}
	cur := slices.Clone(carried)
	scanned := make([][]string, scans)
	for i := range trips {
		rename := map[string]string{
			bin[0].GetName(): constant(fmt.Sprintf("%s/iter%d", label, i), &onnxpb.TensorProto{DataType: proto.Int32(int32(Int64)), Dims: iterDims, Int64Data: []int64{i}}),
			bin[1].GetName(): cond,
		}
		for j := range k {
			rename[bin[2+j].GetName()] = cur[j]
		}
		for _, bn := range body.GetNode() {
			c := proto.Clone(bn).(*onnxpb.NodeProto)
			c.Name = proto.String(u.freshNode(label + "/" + bn.GetName()))
			for j, s := range c.Input {
				if r, ok := rename[s]; ok {
					c.Input[j] = r
				}
			}
			for j, s := range c.Output {
				if s != "" {
					r := u.freshValue(fmt.Sprintf("%s/%d/%s", label, i, s))
					rename[s] = r
					c.Output[j] = r
				}
			}
			renameCaptures(c.Attribute, rename)
			out = append(out, loadedNode{proto: c, opset: ln.opset, from: ln.from})
			if c.GetOpType() == "Constant" {
				if a := attrMap(c.GetAttribute())["value"]; a != nil && a.GetT() != nil {
					u.consts[c.Output[0]] = a.GetT()
				}
			}
		}
		get := func(s string) string {
			if r, ok := rename[s]; ok {
				return r
			}
			return s
		}
		for j := range k {
			cur[j] = get(bout[1+j].GetName())
		}
		for s := range scans {
			scanned[s] = append(scanned[s], get(bout[1+k+s].GetName()))
		}
	}
	outs := np.GetOutput()
	for j := range k {
		if outs[j] != "" {
			emit("Identity", []string{cur[j]}, []string{outs[j]})
		}
	}
	for s := range scans {
		if outs[k+s] == "" {
			continue
		}
		// Each iteration's value gains the leading axis the scan stacks.
		var parts []string
		axes := constant(label+"/scan_axes", &onnxpb.TensorProto{DataType: proto.Int32(int32(Int64)), Dims: []int64{1}, Int64Data: []int64{0}})
		for _, v := range scanned[s] {
			p := u.freshValue(v + "/unsqueezed")
			if u.opset >= 13 {
				emit("Unsqueeze", []string{v, axes}, []string{p})
			} else {
				emit("Unsqueeze", []string{v}, []string{p}, &onnxpb.AttributeProto{Name: proto.String("axes"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: []int64{0}})
			}
			parts = append(parts, p)
		}
		emit("Concat", parts, []string{outs[k+s]}, &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)})
	}
	return out, nil
}

// staticTrue reports whether a Loop body's condition output name is
// constantly true: the body's condition input (itself constant, checked
// by the caller), or a chain of Identity nodes ending in it or in a
// constant true (a Constant of the body or of the outer graph).
func (u *unroller) staticTrue(body *onnxpb.GraphProto, name, condIn string) bool {
	prod := map[string]*onnxpb.NodeProto{}
	for _, bn := range body.GetNode() {
		for _, o := range bn.GetOutput() {
			prod[o] = bn
		}
	}
	for range len(body.GetNode()) + 1 {
		if name == condIn {
			return true
		}
		p := prod[name]
		if p == nil {
			v, ok := u.constScalar(name)
			return ok && v != 0
		}
		switch p.GetOpType() {
		case "Identity":
			name = p.GetInput()[0]
		case "Constant":
			a := attrMap(p.GetAttribute())["value"]
			if a == nil || a.GetT() == nil {
				return false
			}
			t, err := TensorFromProto(u.m, a.GetT())
			return err == nil && t.Len() == 1 && t.At(0) != 0
		default:
			return false
		}
	}
	return false
}

// renameCaptures renames, in the subgraphs of attrs, the references to
// outer names that rename maps and the subgraph does not define itself.
func renameCaptures(attrs []*onnxpb.AttributeProto, rename map[string]string) {
	for _, a := range attrs {
		gs := a.GetGraphs()
		if a.GetG() != nil {
			gs = append([]*onnxpb.GraphProto{a.GetG()}, gs...)
		}
		for _, sg := range gs {
			local := map[string]bool{}
			for _, vi := range sg.GetInput() {
				local[vi.GetName()] = true
			}
			for _, tp := range sg.GetInitializer() {
				local[tp.GetName()] = true
			}
			for _, n := range sg.GetNode() {
				for _, o := range n.GetOutput() {
					local[o] = true
				}
			}
			inner := map[string]string{}
			for k, v := range rename {
				if !local[k] {
					inner[k] = v
				}
			}
			for _, n := range sg.GetNode() {
				for j, s := range n.Input {
					if r, ok := inner[s]; ok {
						n.Input[j] = r
					}
				}
				renameCaptures(n.Attribute, inner)
			}
			for _, vi := range sg.GetOutput() {
				if r, ok := inner[vi.GetName()]; ok {
					// An output that passes an outer value through: an
					// Identity keeps the subgraph's own output name.
					sg.Node = append(sg.Node, &onnxpb.NodeProto{OpType: proto.String("Identity"), Input: []string{r}, Output: []string{vi.GetName()}})
				}
			}
		}
	}
}

func (u *unroller) freshValue(base string) string { return fresh(u.values, u.nextV, base) }
func (u *unroller) freshNode(base string) string  { return fresh(u.nodes, u.nextN, base) }

// resolveSequences replaces the sequences of nodes that are built and
// read at constant positions by the tensors they hold: SequenceEmpty,
// SequenceConstruct, SequenceInsert and SequenceErase build them,
// SequenceAt becomes an Identity of the tensor, SequenceLength a
// constant, ConcatFromSequence a Concat. Where any sequence is read
// otherwise (a graph output, a Loop left as it is, a position that is not
// constant), the nodes are returned unchanged.
func (u *unroller) resolveSequences(nodes []loadedNode) []loadedNode {
	seqs := map[string][]string{}
	var out []loadedNode
	pos := func(name string, n int, insert bool) (int, bool) {
		v, ok := u.constScalar(name)
		if !ok {
			return 0, false
		}
		if v < 0 {
			v += int64(n)
		}
		hi := int64(n - 1)
		if insert {
			hi = int64(n)
		}
		return int(v), v >= 0 && v <= hi
	}
	for _, ln := range nodes {
		np := ln.proto
		ins, outs := np.GetInput(), np.GetOutput()
		seqIn := func(i int) ([]string, bool) {
			if i >= len(ins) {
				return nil, false
			}
			s, ok := seqs[ins[i]]
			return s, ok
		}
		rewrite := func(op string, in []string, attrs ...*onnxpb.AttributeProto) {
			p := &onnxpb.NodeProto{Name: np.Name, OpType: proto.String(op), Input: in, Output: outs[:1], Attribute: attrs}
			out = append(out, loadedNode{proto: p, opset: ln.opset, from: ln.from})
		}
		if canonicalDomain(np.GetDomain()) != "" || len(outs) == 0 {
			out = append(out, ln)
			continue
		}
		switch np.GetOpType() {
		case "SequenceEmpty":
			seqs[outs[0]] = nil
			continue
		case "SequenceConstruct":
			seqs[outs[0]] = slices.Clone(ins)
			continue
		case "SequenceInsert":
			s, ok := seqIn(0)
			if !ok || len(ins) < 2 {
				return nodes
			}
			at := len(s)
			if len(ins) > 2 && ins[2] != "" {
				if at, ok = pos(ins[2], len(s), true); !ok {
					return nodes
				}
			}
			seqs[outs[0]] = slices.Insert(slices.Clone(s), at, ins[1])
			continue
		case "SequenceErase":
			s, ok := seqIn(0)
			if !ok || len(s) == 0 {
				return nodes
			}
			at := len(s) - 1
			if len(ins) > 1 && ins[1] != "" {
				if at, ok = pos(ins[1], len(s), false); !ok {
					return nodes
				}
			}
			seqs[outs[0]] = slices.Delete(slices.Clone(s), at, at+1)
			continue
		case "SequenceAt":
			s, ok := seqIn(0)
			if !ok || len(ins) < 2 {
				return nodes
			}
			at, ok := pos(ins[1], len(s), false)
			if !ok {
				return nodes
			}
			rewrite("Identity", []string{s[at]})
			continue
		case "SequenceLength":
			s, ok := seqIn(0)
			if !ok {
				return nodes
			}
			t := &onnxpb.TensorProto{Name: proto.String(outs[0]), DataType: proto.Int32(int32(Int64)), Int64Data: []int64{int64(len(s))}}
			rewrite("Constant", nil, &onnxpb.AttributeProto{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t})
			continue
		case "ConcatFromSequence":
			s, ok := seqIn(0)
			if !ok || len(s) == 0 {
				return nodes
			}
			a := attrMap(np.GetAttribute())
			axis := a["axis"].GetI()
			if a["new_axis"].GetI() != 0 {
				// Each tensor gains the axis first; a negative one counts
				// from the end of the result, one axis longer.
				parts := make([]string, len(s))
				for i, v := range s {
					parts[i] = u.freshValue(v + "/unsqueezed")
					var p *onnxpb.NodeProto
					if u.opset >= 13 {
						axes := u.freshValue(outs[0] + "/axes")
						t := &onnxpb.TensorProto{Name: proto.String(axes), DataType: proto.Int32(int32(Int64)), Dims: []int64{1}, Int64Data: []int64{axis}}
						out = append(out, loadedNode{proto: &onnxpb.NodeProto{OpType: proto.String("Constant"), Output: []string{axes},
							Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}}}, opset: ln.opset, from: ln.from})
						p = &onnxpb.NodeProto{OpType: proto.String("Unsqueeze"), Input: []string{v, axes}, Output: []string{parts[i]}}
					} else {
						p = &onnxpb.NodeProto{OpType: proto.String("Unsqueeze"), Input: []string{v}, Output: []string{parts[i]},
							Attribute: []*onnxpb.AttributeProto{{Name: proto.String("axes"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: []int64{axis}}}}
					}
					out = append(out, loadedNode{proto: p, opset: ln.opset, from: ln.from})
				}
				s = parts
			}
			rewrite("Concat", slices.Clone(s), &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(axis)})
			continue
		case "Identity":
			if s, ok := seqIn(0); ok {
				seqs[outs[0]] = s
				continue
			}
		}
		for _, s := range ins {
			if _, ok := seqs[s]; ok {
				return nodes
			}
		}
		if capturesAny(np.GetAttribute(), seqs) {
			return nodes
		}
		out = append(out, ln)
	}
	for s := range seqs {
		if u.outs[s] {
			return nodes
		}
	}
	return out
}

// capturesAny reports whether a subgraph of attrs reads one of names.
func capturesAny(attrs []*onnxpb.AttributeProto, names map[string][]string) bool {
	for _, a := range attrs {
		gs := a.GetGraphs()
		if a.GetG() != nil {
			gs = append(gs, a.GetG())
		}
		for _, sg := range gs {
			for _, n := range sg.GetNode() {
				for _, s := range n.GetInput() {
					if _, ok := names[s]; ok {
						return true
					}
				}
				if capturesAny(n.GetAttribute(), names) {
					return true
				}
			}
			for _, vi := range sg.GetOutput() {
				if _, ok := names[vi.GetName()]; ok {
					return true
				}
			}
		}
	}
	return false
}

// maxStaticIfs bounds the If nodes whose condition the loader evaluates
// (each on a copy of the graph, at two batch sizes), and maxIfInferences
// the node inferences all those evaluations may take: past it, the Ifs
// left stay (and are named as unsupported).
const maxStaticIfs = 1024

var maxIfInferences = 1 << 23 // a variable for the tests

// inlineStaticIfs replaces each If whose condition is static by the nodes
// of the branch it takes (see above). An If whose condition is not
// static, or that the graph's declared input shapes do not let it
// evaluate, stays.
func (g *Graph) inlineStaticIfs() error {
	inlined := false
	defer func() {
		// The branches read the values they capture without an edge, so
		// that a parameter whose only edges led to an If's condition
		// looked like the data of a mask (onlyMasks); inlined, they are
		// edges.
		if inlined {
			for _, v := range g.Initializers {
				v.NoGradient = v.NoGradient && onlyMasks(g, v)
			}
		}
	}()
	tried := map[*Node]bool{}
	budget := maxIfInferences
	for len(tried) < maxStaticIfs && budget > 0 {
		var n *Node
		var take bool
		for _, c := range g.Nodes {
			if c.OpType != "If" || c.Domain != "" || len(c.Inputs) != 1 || c.Inputs[0] == nil || tried[c] {
				continue
			}
			tried[c] = true
			if t, ok := g.staticCondition(c.Inputs[0], &budget); ok {
				n, take = c, t
				break
			}
		}
		if n == nil {
			return nil
		}
		done, err := g.inlineIf(n, take)
		if err != nil {
			return fmt.Errorf("graph: node %s: %w", n, err)
		}
		if done {
			inlined = true
			g.InlinedIfs++
		}
	}
	return nil
}

// staticCondition returns the value of an If's condition where it is a
// constant, or where the shape arithmetic behind it folds to one value
// both at a batch of 2 and of 3 samples, the graph's inputs otherwise at
// their declared shapes. Each node inferred takes one from *budget.
func (g *Graph) staticCondition(v *Value, budget *int) (bool, bool) {
	if v.Const != nil {
		return v.Const.Len() == 1 && v.Const.At(0) != 0, v.Const.Len() == 1
	}
	var got [2]bool
	sizes := g.probeBatches()
	for i, b := range sizes {
		if i > 0 && b == sizes[0] {
			got[i] = got[0] // a fixed batch: one size
			continue
		}
		at, ok := g.inferAt(b, []*Value{v}, budget)
		if !ok {
			return false, false
		}
		cv := at(v)
		if cv.Const == nil || cv.Const.Len() != 1 {
			return false, false
		}
		got[i] = cv.Const.At(0) != 0
	}
	return got[0], got[0] == got[1]
}

// probeBatches are the two batch sizes at which the loader reads what
// must not depend on the batch: 2 and 3. An export with a fixed batch (no
// dynamic_axes) defines the model at that batch only: it is read there,
// and the release of the batch (rewrite.ReleaseBatch) then generalizes
// what was read as it does the Reshape targets, its check comparing each
// sample's outputs at another batch with the export's.
func (g *Graph) probeBatches() [2]int64 {
	if fixed := g.FixedBatch(); fixed > 0 {
		return [2]int64{fixed, fixed}
	}
	return [2]int64{2, 3}
}

// inferAt infers the shapes, and folds what it can, of a copy of the
// nodes that compute want, the graph's inputs at a batch of b and
// otherwise at their declared shapes, and returns the map from a value of
// g to its copy there. Each node inferred takes one from *budget; it
// reports false where the budget is spent, where an input's shape is not
// declared, where those nodes hold control flow, or where the inference
// fails.
func (g *Graph) inferAt(b int64, want []*Value, budget *int) (func(*Value) *Value, bool) {
	c := g.Clone()
	var outs []*Value
	for _, v := range want {
		if v != nil {
			outs = append(outs, c.Values[v.Name])
		}
	}
	need := producers(outs)
	var nodes []*Node
	for _, n := range c.Nodes {
		if need[n] {
			if n.OpType == "If" || n.OpType == "Loop" {
				return nil, false
			}
			nodes = append(nodes, n)
		}
	}
	c.Nodes, c.Outputs = nodes, outs
	if *budget -= len(nodes); *budget < 0 {
		return nil, false
	}
	shapes := map[string][]int64{}
	for _, in := range c.Inputs {
		if len(in.Shape) == 0 {
			return nil, false
		}
		dims := []int64{b}
		for _, d := range in.Shape[1:] {
			if d.Size <= 0 {
				return nil, false
			}
			dims = append(dims, d.Size)
		}
		shapes[in.Name] = dims
	}
	c.relink()
	// Inference and folding take a validated graph (every node's arity):
	// the loader validates later, after this.
	if err := c.Validate(); err != nil {
		return nil, false
	}
	if err := c.InferShapes(shapes); err != nil {
		return nil, false
	}
	return func(v *Value) *Value {
		if v == nil {
			return nil
		}
		return c.Values[v.Name]
	}, true
}

// inlineIf replaces n by the nodes of its then branch (take) or else
// branch, an Identity giving each of n's outputs its branch's output, and
// reports whether it did (a branch the graph cannot hold keeps its If).
func (g *Graph) inlineIf(n *Node, take bool) (bool, error) {
	name := "else_branch"
	if take {
		name = "then_branch"
	}
	var br *onnxpb.GraphProto
	for _, a := range n.Attrs {
		if a.GetName() == name {
			br = a.GetG()
		}
	}
	if br == nil {
		return false, fmt.Errorf("no %s", name)
	}
	if len(br.GetOutput()) != len(n.Outputs) {
		return false, fmt.Errorf("%s has %d outputs for the node's %d", name, len(br.GetOutput()), len(n.Outputs))
	}
	used := func(s string) bool { _, ok := g.Values[s]; return ok }
	freshName := func(base string) string {
		s := base
		for i := 1; used(s); i++ {
			s = fmt.Sprintf("%s_%d", base, i)
		}
		return s
	}
	label := n.Name
	if label == "" {
		label = "If"
	}
	// A branch the main graph cannot hold as it is — a call of a
	// function, which expansion did not reach inside the branch, or a read
	// of a name nothing outside computes — keeps its If.
	local := map[string]bool{}
	for _, bn := range br.GetNode() {
		if _, ok := g.Opsets[canonicalDomain(bn.GetDomain())]; !ok {
			return false, nil
		}
		for _, s := range bn.GetInput() {
			if s != "" && !local[s] && !used(s) {
				return false, nil
			}
		}
		for _, s := range bn.GetOutput() {
			local[s] = true
		}
	}
	for _, bo := range br.GetOutput() {
		if !local[bo.GetName()] && !used(bo.GetName()) {
			return false, nil
		}
	}
	rename := map[string]string{}
	var added []*Node
	add := func(p *onnxpb.NodeProto, outs []*Value) error {
		d := canonicalDomain(p.GetDomain())
		ver, ok := g.Opsets[d]
		if !ok {
			return fmt.Errorf("%s: domain %q is not imported", protoLabel(p), p.GetDomain())
		}
		nn := &Node{Name: p.GetName(), OpType: p.GetOpType(), Domain: d, Opset: ver, Attrs: p.GetAttribute(), proto: p}
		for _, s := range p.GetInput() {
			if s == "" {
				nn.Inputs = append(nn.Inputs, nil)
				continue
			}
			v, ok := g.Values[s]
			if !ok {
				return fmt.Errorf("%s of %s reads %q, which nothing computes", protoLabel(p), name, s)
			}
			nn.Inputs = append(nn.Inputs, v)
		}
		for i, s := range p.GetOutput() {
			var v *Value
			switch {
			case s == "":
			case outs != nil:
				v = outs[i]
			default:
				v = &Value{Name: s}
				g.Values[s] = v
			}
			if v != nil {
				v.Producer = nn
			}
			nn.Outputs = append(nn.Outputs, v)
		}
		added = append(added, nn)
		return nil
	}
	for _, bn := range br.GetNode() {
		c := proto.Clone(bn).(*onnxpb.NodeProto)
		c.Name = proto.String(label + "/" + bn.GetName())
		for j, s := range c.Input {
			if r, ok := rename[s]; ok {
				c.Input[j] = r
			}
		}
		for j, s := range c.Output {
			if s != "" {
				r := freshName(label + "/" + s)
				rename[s] = r
				c.Output[j] = r
			}
		}
		renameCaptures(c.Attribute, rename)
		if err := add(c, nil); err != nil {
			return false, err
		}
	}
	for j, bo := range br.GetOutput() {
		if n.Outputs[j] == nil {
			continue
		}
		src := bo.GetName()
		if r, ok := rename[src]; ok {
			src = r
		}
		p := &onnxpb.NodeProto{Name: proto.String(fmt.Sprintf("%s/output_%d", label, j)), OpType: proto.String("Identity"), Input: []string{src}, Output: []string{n.Outputs[j].Name}}
		if err := add(p, []*Value{n.Outputs[j]}); err != nil {
			return false, err
		}
	}
	g.ReplaceNode(n, added)
	g.relink()
	return true, g.sortTopological()
}
