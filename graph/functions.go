package graph

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Model-local functions (ModelProto.functions) are inlined when the graph
// is loaded: the runtime, shape inference and export only ever see
// operators, never calls. PyTorch's dynamo exporter wraps modules this way
// and onnxscript writes models of functions calling functions.

// Bounds on what a model's functions can make the loader build. A function
// is a template: a file of a few kilobytes whose functions call each other
// ten thousand times each describes more nodes than any machine holds, so
// the expanded size is counted before anything is expanded.
const (
	// MaxExpandedNodes bounds the nodes function expansion adds to the
	// main graph; a model whose calls would add more is refused before
	// anything is expanded. Inlined, the largest vision transformers have
	// a few thousand nodes and large language models some 10^5.
	MaxExpandedNodes = 1 << 20
	// MaxFunctionDepth bounds how deeply calls nest inside functions
	// (recursion, which ONNX forbids, is refused as such). Exporters nest
	// one level per module (model, block, attention, linear): a handful.
	MaxFunctionDepth = 64
)

// funcKey identifies a function as a node calls it: domain (canonical),
// name (the node's op_type) and overload (IR 10).
type funcKey struct{ domain, name, overload string }

func (k funcKey) String() string {
	s := k.name
	if k.domain != "" {
		s = k.domain + "." + s
	}
	if k.overload != "" {
		s += ":" + k.overload
	}
	return s
}

func nodeKey(np *onnxpb.NodeProto) funcKey {
	return funcKey{canonicalDomain(np.GetDomain()), np.GetOpType(), np.GetOverload()}
}

// loadedNode is a node of the main graph after function expansion: the
// proto to build it from and, for a node that came out of a function, the
// opset its domain has in that function (0: the model's) and the function.
type loadedNode struct {
	proto *onnxpb.NodeProto
	opset int64
	from  string
}

// expander inlines the function calls of one model.
type expander struct {
	funcs  map[funcKey]*onnxpb.FunctionProto
	opsets map[string]int64 // the model's imports
	sizes  map[funcKey]int64
	// values and nodes hold every value and node name in use, so that
	// the names given to inlined values and nodes are fresh; nextValue
	// and nextNode the last suffix tried for each base name.
	values, nodes       map[string]bool
	nextValue, nextNode map[string]int
	out                 []loadedNode
	infos               []*onnxpb.ValueInfoProto
}

// expandFunctions returns the nodes of the model's main graph with every
// call of a model-local function replaced by the function's nodes, and the
// value_info of the functions' values under their new names. A model
// without functions keeps its node protos as they are.
func expandFunctions(gp *onnxpb.GraphProto, mp *onnxpb.ModelProto, opsets map[string]int64) ([]loadedNode, []*onnxpb.ValueInfoProto, error) {
	nodes := gp.GetNode()
	plain := func() []loadedNode {
		out := make([]loadedNode, len(nodes))
		for i, np := range nodes {
			out[i] = loadedNode{proto: np}
		}
		return out
	}
	if len(mp.GetFunctions()) == 0 {
		return plain(), nil, nil
	}
	e := &expander{funcs: map[funcKey]*onnxpb.FunctionProto{}, opsets: opsets, sizes: map[funcKey]int64{}}
	for _, f := range mp.GetFunctions() {
		k := funcKey{canonicalDomain(f.GetDomain()), f.GetName(), f.GetOverload()}
		if k.name == "" {
			return nil, nil, fmt.Errorf("graph: a model-local function in domain %q has no name", f.GetDomain())
		}
		if _, dup := e.funcs[k]; dup {
			return nil, nil, fmt.Errorf("graph: function %s is defined twice", k)
		}
		e.funcs[k] = f
	}
	// Count first: nothing is built for a model whose expansion is too
	// large or recursive.
	var total int64
	calls := false
	for i, np := range nodes {
		f, err := e.callee(np)
		if err != nil {
			return nil, nil, fmt.Errorf("graph: node %d (%s): %w", i, protoLabel(np), err)
		}
		if f == nil {
			continue
		}
		calls = true
		n, err := e.size(nodeKey(np), nil)
		if err != nil {
			return nil, nil, fmt.Errorf("graph: node %s: %w", protoLabel(np), err)
		}
		if n > MaxExpandedNodes {
			return nil, nil, fmt.Errorf("graph: node %s calls function %s, which expands to more than %d nodes, the bound on what function expansion may add",
				protoLabel(np), nodeKey(np), MaxExpandedNodes)
		}
		if total += n; total > MaxExpandedNodes {
			return nil, nil, fmt.Errorf("graph: node %s calls function %s (%d nodes): the model's function calls would expand to more than %d nodes, the bound on what function expansion may add",
				protoLabel(np), nodeKey(np), n, MaxExpandedNodes)
		}
	}
	if !calls {
		return plain(), nil, nil
	}
	e.values, e.nodes = map[string]bool{}, map[string]bool{}
	e.nextValue, e.nextNode = map[string]int{}, map[string]int{}
	for _, vi := range gp.GetInput() {
		e.values[vi.GetName()] = true
	}
	for _, vi := range gp.GetOutput() {
		e.values[vi.GetName()] = true
	}
	for _, vi := range gp.GetValueInfo() {
		e.values[vi.GetName()] = true
	}
	for _, tp := range gp.GetInitializer() {
		e.values[tp.GetName()] = true
	}
	for _, np := range nodes {
		e.nodes[np.GetName()] = true
		for _, s := range np.GetInput() {
			e.values[s] = true
		}
		for _, s := range np.GetOutput() {
			e.values[s] = true
		}
	}
	for _, np := range nodes {
		f, _ := e.callee(np)
		if f == nil {
			e.out = append(e.out, loadedNode{proto: np})
			continue
		}
		if err := e.inline(np, f, attrMap(np.GetAttribute()), callLabel(np), 1); err != nil {
			return nil, nil, fmt.Errorf("graph: node %s: %w", protoLabel(np), err)
		}
	}
	return e.out, e.infos, nil
}

// callee returns the function np calls, or nil when np is an operator. A
// node of a domain the model neither imports nor defines the operator in,
// but that holds functions, names a function that is missing: that is
// reported here, where the functions of the domain can be listed.
func (e *expander) callee(np *onnxpb.NodeProto) (*onnxpb.FunctionProto, error) {
	k := nodeKey(np)
	if f, ok := e.funcs[k]; ok {
		return f, nil
	}
	if _, imported := e.opsets[k.domain]; imported {
		return nil, nil
	}
	var have []string
	for fk := range e.funcs {
		if fk.domain == k.domain {
			have = append(have, fk.String())
		}
	}
	if len(have) == 0 {
		return nil, nil // the loader reports the unimported domain
	}
	sort.Strings(have)
	return nil, fmt.Errorf("calls function %s, which the model does not define (its functions of domain %q: %s)",
		k, k.domain, strings.Join(have, ", "))
}

// size returns the number of nodes function k expands to, calls inlined,
// saturating just past MaxExpandedNodes. stack is the chain of functions
// being counted: finding k on it is recursion, which ONNX forbids.
func (e *expander) size(k funcKey, stack []funcKey) (int64, error) {
	if n, ok := e.sizes[k]; ok {
		return n, nil
	}
	for i, s := range stack {
		if s == k {
			chain := make([]string, 0, len(stack)-i+1)
			for _, c := range stack[i:] {
				chain = append(chain, c.String())
			}
			return 0, fmt.Errorf("function %s calls itself (%s → %s): recursive functions cannot be expanded", k, strings.Join(chain, " → "), k)
		}
	}
	if len(stack) >= MaxFunctionDepth {
		return 0, fmt.Errorf("function calls nest deeper than %d levels (at %s)", MaxFunctionDepth, k)
	}
	f := e.funcs[k]
	stack = append(stack, k)
	var n int64
	for _, np := range f.GetNode() {
		c, err := e.callee(np)
		if err != nil {
			return 0, fmt.Errorf("function %s: node %s: %w", k, protoLabel(np), err)
		}
		if c == nil {
			n++
		} else {
			m, err := e.size(nodeKey(np), stack)
			if err != nil {
				return 0, err
			}
			n += m
		}
		if n > MaxExpandedNodes {
			break
		}
	}
	// An output that is one of the function's inputs costs an Identity.
	n += int64(len(f.GetOutput()))
	n = min(n, MaxExpandedNodes+1)
	e.sizes[k] = n
	return n, nil
}

// inline appends the nodes of f called by call (whose attributes, already
// resolved, are attrs) to e.out. label names the call in new names.
func (e *expander) inline(call *onnxpb.NodeProto, f *onnxpb.FunctionProto, attrs map[string]*onnxpb.AttributeProto, label string, depth int) error {
	k := funcKey{canonicalDomain(f.GetDomain()), f.GetName(), f.GetOverload()}
	if depth > MaxFunctionDepth {
		return fmt.Errorf("function calls nest deeper than %d levels (at %s)", MaxFunctionDepth, k)
	}
	fail := func(format string, a ...any) error {
		return fmt.Errorf("function %s: "+format, append([]any{k}, a...)...)
	}
	if len(call.GetInput()) > len(f.GetInput()) {
		return fail("called with %d inputs, it takes %d", len(call.GetInput()), len(f.GetInput()))
	}
	if len(call.GetOutput()) > len(f.GetOutput()) {
		return fail("called with %d outputs, it has %d", len(call.GetOutput()), len(f.GetOutput()))
	}
	imports := map[string]int64{}
	for _, op := range f.GetOpsetImport() {
		imports[canonicalDomain(op.GetDomain())] = op.GetVersion()
	}
	// rename maps the function's value names to the graph's: formal
	// inputs to the call's actual inputs ("" for an omitted optional
	// one), formal outputs to the call's outputs, and every other value
	// the function computes to a fresh name under the call's label.
	rename := map[string]string{}
	for i, formal := range f.GetInput() {
		actual := ""
		if i < len(call.GetInput()) {
			actual = call.GetInput()[i]
		}
		rename[formal] = actual
	}
	isInput := map[string]bool{}
	for _, formal := range f.GetInput() {
		isInput[formal] = true
	}
	produced := map[string]bool{}
	for _, np := range f.GetNode() {
		for _, o := range np.GetOutput() {
			if o == "" {
				continue
			}
			if produced[o] || isInput[o] {
				return fail("value %q is computed twice (or is also an input)", o)
			}
			produced[o] = true
		}
	}
	outName := map[string]string{}
	for i, formal := range f.GetOutput() {
		actual := ""
		if i < len(call.GetOutput()) {
			actual = call.GetOutput()[i]
		}
		if actual == "" {
			actual = e.freshValue(label + "/" + formal) // computed, read by nobody
		}
		if !produced[formal] && !isInput[formal] {
			return fail("output %q is neither computed by a node nor an input", formal)
		}
		outName[formal] = actual
	}
	for formal := range produced {
		if a, ok := outName[formal]; ok {
			rename[formal] = a
		}
	}
	// Fresh names in the function's node order, so that they do not
	// depend on map iteration.
	for _, np := range f.GetNode() {
		for _, o := range np.GetOutput() {
			if _, done := rename[o]; !done && o != "" {
				rename[o] = e.freshValue(label + "/" + o)
			}
		}
	}
	for _, vi := range f.GetValueInfo() {
		if to, ok := rename[vi.GetName()]; ok && to != "" && !isInput[vi.GetName()] {
			c := proto.Clone(vi).(*onnxpb.ValueInfoProto)
			c.Name = proto.String(to)
			e.infos = append(e.infos, c)
		}
	}
	for i, np := range f.GetNode() {
		nodeLabel := np.GetName()
		if nodeLabel == "" {
			nodeLabel = fmt.Sprintf("%s_%d", np.GetOpType(), i)
		}
		name := e.freshNode(label + "/" + nodeLabel)
		ins := make([]string, len(np.GetInput()))
		for j, s := range np.GetInput() {
			if s == "" {
				continue
			}
			to, ok := rename[s]
			if !ok {
				return fail("node %s reads %q, which is neither an input of the function nor computed in it", protoLabel(np), s)
			}
			ins[j] = to
		}
		outs := make([]string, len(np.GetOutput()))
		for j, s := range np.GetOutput() {
			if s != "" {
				outs[j] = rename[s]
			}
		}
		resolved, err := resolveAttrs(np, attrs, f)
		if err != nil {
			return fail("node %s: %w", protoLabel(np), err)
		}
		inner := &onnxpb.NodeProto{Name: proto.String(name), OpType: np.OpType, Domain: np.Domain, Overload: np.Overload,
			Input: ins, Output: outs, Attribute: resolved, DocString: np.DocString, MetadataProps: np.MetadataProps}
		c, err := e.callee(np)
		if err != nil {
			return fail("node %s: %w", protoLabel(np), err)
		}
		if c != nil {
			if err := e.inline(inner, c, attrMap(resolved), name, depth+1); err != nil {
				return fmt.Errorf("function %s: node %s: %w", k, protoLabel(np), err)
			}
			continue
		}
		dom := canonicalDomain(np.GetDomain())
		ver, ok := imports[dom]
		if mv, imported := e.opsets[dom]; ok && imported && mv != ver {
			// Export writes one version per domain, the model's: the
			// node would be saved under another version than it was
			// written for. Refused rather than guessed compatible.
			return fail("node %s (%s) is written for version %d of domain %q, the model imports version %d; "+
				"a model holds one version per domain, so the expanded node could not be saved with its meaning: "+
				"re-export the model with matching opsets", protoLabel(np), np.GetOpType(), ver, dom, mv)
		} else if ok && !imported {
			return fail("node %s (%s) uses domain %q (version %d), which the model does not import; the expanded node could not be saved",
				protoLabel(np), np.GetOpType(), dom, ver)
		}
		e.out = append(e.out, loadedNode{proto: inner, opset: ver, from: k.String()})
	}
	// An output that is a formal input: pass the actual value through.
	for _, formal := range f.GetOutput() {
		if produced[formal] {
			continue
		}
		src := rename[formal]
		if src == "" {
			return fail("output %q is the optional input %q, which the call omits", formal, formal)
		}
		name := e.freshNode(label + "/" + formal + "/Identity")
		e.out = append(e.out, loadedNode{proto: &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String("Identity"),
			Input: []string{src}, Output: []string{outName[formal]}}, from: k.String()})
	}
	return nil
}

// resolveAttrs returns the attributes of a function's node np with every
// reference (ref_attr_name) to an attribute of the function replaced by
// the call's value, else the function's default (attribute_proto), else
// left out: the ONNX rule for a reference to an attribute the call does
// not set. Attributes holding subgraphs are kept as they are: nothing in
// a subgraph is renamed or expanded (the runtime runs no control flow and
// refuses such nodes by name).
func resolveAttrs(np *onnxpb.NodeProto, call map[string]*onnxpb.AttributeProto, f *onnxpb.FunctionProto) ([]*onnxpb.AttributeProto, error) {
	var out []*onnxpb.AttributeProto
	for _, a := range np.GetAttribute() {
		ref := a.GetRefAttrName()
		if ref == "" {
			out = append(out, a)
			continue
		}
		src := call[ref]
		if src == nil {
			for _, d := range f.GetAttributeProto() {
				if d.GetName() == ref {
					src = d
					break
				}
			}
		}
		if src == nil {
			continue
		}
		if a.Type != nil && src.Type != nil && a.GetType() != src.GetType() {
			return nil, fmt.Errorf("attribute %q refers to %q, which is %v, want %v", a.GetName(), ref, src.GetType(), a.GetType())
		}
		c := proto.Clone(src).(*onnxpb.AttributeProto)
		c.Name = proto.String(a.GetName())
		c.RefAttrName = nil
		if c.Type == nil {
			c.Type = a.Type
		}
		out = append(out, c)
	}
	return out, nil
}

func attrMap(attrs []*onnxpb.AttributeProto) map[string]*onnxpb.AttributeProto {
	m := make(map[string]*onnxpb.AttributeProto, len(attrs))
	for _, a := range attrs {
		m[a.GetName()] = a
	}
	return m
}

// freshValue reserves a value name based on base that nothing uses.
func (e *expander) freshValue(base string) string { return fresh(e.values, e.nextValue, base) }

// freshNode reserves a node name based on base that no node has.
func (e *expander) freshNode(base string) string { return fresh(e.nodes, e.nextNode, base) }

func fresh(used map[string]bool, next map[string]int, base string) string {
	name := base
	for used[name] {
		next[base]++
		name = fmt.Sprintf("%s_%d", base, next[base])
	}
	used[name] = true
	return name
}

// callLabel is the prefix of the names inlining gives for a call of the
// main graph: the call's name, else its first output, else its operator.
func callLabel(np *onnxpb.NodeProto) string {
	if np.GetName() != "" {
		return np.GetName()
	}
	for _, o := range np.GetOutput() {
		if o != "" {
			return o
		}
	}
	return np.GetOpType()
}

// protoLabel names a node proto in messages: its name, else its first
// output.
func protoLabel(np *onnxpb.NodeProto) string {
	if np.GetName() != "" {
		return fmt.Sprintf("%s %q", np.GetOpType(), np.GetName())
	}
	if len(np.GetOutput()) > 0 {
		return fmt.Sprintf("%s (output %q)", np.GetOpType(), np.GetOutput()[0])
	}
	return np.GetOpType()
}
