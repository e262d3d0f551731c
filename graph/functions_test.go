package graph

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// fn builds a model-local function of domain "local".
func fn(name string, ins, outs []string, nodes ...*onnxpb.NodeProto) *onnxpb.FunctionProto {
	return &onnxpb.FunctionProto{Name: proto.String(name), Domain: proto.String("local"), Input: ins, Output: outs, Node: nodes,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}, {Domain: proto.String("local"), Version: proto.Int64(1)}}}
}

// fnode is a node of a function body (or a graph): unnamed where name is
// "", of domain "local" where op starts with "local.".
func fnode(name, op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	np := &onnxpb.NodeProto{OpType: proto.String(op), Input: ins, Output: outs, Attribute: attrs}
	if name != "" {
		np.Name = proto.String(name)
	}
	if i := strings.LastIndex(op, "."); i >= 0 {
		np.Domain, np.OpType = proto.String(op[:i]), proto.String(op[i+1:])
	}
	return np
}

func attrRef(name string, typ onnxpb.AttributeProto_AttributeType, ref string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: typ.Enum(), RefAttrName: proto.String(ref)}
}

// fmodel is a model at opset 18 importing "local", with input x (2, 3),
// the given nodes and functions, and outputs outs.
func fmodel(nodes []*onnxpb.NodeProto, funcs []*onnxpb.FunctionProto, outs ...string) *onnxpb.ModelProto {
	b := newBuilder(18).input("x", 2, 3)
	b.p.OpsetImport = append(b.p.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("local"), Version: proto.Int64(1)})
	b.p.Graph.Node = nodes
	b.p.Functions = funcs
	for _, o := range outs {
		b.output(o)
	}
	return b.p
}

// summary lists the nodes as "name: Op(in, …) -> out, … [attr=value …]"
// with the node's opset where it is not 18.
func summary(g *Graph) []string {
	var out []string
	for _, n := range g.Nodes {
		var ins, outs, attrs []string
		for _, v := range n.Inputs {
			if v == nil {
				ins = append(ins, "")
			} else {
				ins = append(ins, v.Name)
			}
		}
		for _, v := range n.Outputs {
			if v != nil {
				outs = append(outs, v.Name)
			}
		}
		for _, a := range n.Attrs {
			switch a.GetType() {
			case onnxpb.AttributeProto_INT:
				attrs = append(attrs, fmt.Sprintf("%s=%d", a.GetName(), a.GetI()))
			case onnxpb.AttributeProto_FLOAT:
				attrs = append(attrs, fmt.Sprintf("%s=%g", a.GetName(), a.GetF()))
			case onnxpb.AttributeProto_STRING:
				attrs = append(attrs, fmt.Sprintf("%s=%s", a.GetName(), a.GetS()))
			default:
				attrs = append(attrs, a.GetName())
			}
		}
		s := fmt.Sprintf("%s: %s(%s) -> %s", n.Name, n.OpType, strings.Join(ins, ", "), strings.Join(outs, ", "))
		if len(attrs) > 0 {
			s += " [" + strings.Join(attrs, " ") + "]"
		}
		if n.Opset != 18 {
			s += fmt.Sprintf(" @%d", n.Opset)
		}
		out = append(out, s)
	}
	return out
}

func TestFunctionExpansion(t *testing.T) {
	f32 := onnxpb.AttributeProto_FLOAT
	cases := []struct {
		name string
		m    func() *onnxpb.ModelProto
		want []string
	}{
		{"simple", func() *onnxpb.ModelProto {
			f := fn("NegRelu", []string{"a"}, []string{"b"},
				fnode("", "Neg", []string{"a"}, []string{"t"}), fnode("relu", "Relu", []string{"t"}, []string{"b"}))
			return fmodel([]*onnxpb.NodeProto{fnode("call", "local.NegRelu", []string{"x"}, []string{"y"})}, []*onnxpb.FunctionProto{f}, "y")
		}, []string{
			"call/Neg_0: Neg(x) -> call/t",
			"call/relu: Relu(call/t) -> y",
		}},
		{"attributes: call value, default, dropped", func() *onnxpb.ModelProto {
			f := fn("Act", []string{"a"}, []string{"b"},
				fnode("", "LeakyRelu", []string{"a"}, []string{"t"}, attrRef("alpha", f32, "slope")),
				fnode("", "Elu", []string{"t"}, []string{"u"}, attrRef("alpha", f32, "elu_alpha")),
				fnode("", "HardSigmoid", []string{"u"}, []string{"b"}, attrRef("alpha", f32, "unset"), attrFloat("beta", 0.25)))
			f.Attribute = []string{"slope", "unset"}
			f.AttributeProto = []*onnxpb.AttributeProto{attrFloat("elu_alpha", 0.75), attrFloat("slope", 0.5)}
			return fmodel([]*onnxpb.NodeProto{fnode("c", "local.Act", []string{"x"}, []string{"y"}, attrFloat("slope", 0.125))},
				[]*onnxpb.FunctionProto{f}, "y")
		}, []string{
			"c/LeakyRelu_0: LeakyRelu(x) -> c/t [alpha=0.125]",
			"c/Elu_1: Elu(c/t) -> c/u [alpha=0.75]",
			"c/HardSigmoid_2: HardSigmoid(c/u) -> y [beta=0.25]",
		}},
		{"nested, attribute passed down, per-function opset", func() *onnxpb.ModelProto {
			inner := fn("Inner", []string{"p"}, []string{"q"}, fnode("", "LeakyRelu", []string{"p"}, []string{"q"}, attrRef("alpha", f32, "k")))
			inner.OpsetImport[0].Version = proto.Int64(18)
			outer := fn("Outer", []string{"a"}, []string{"b"},
				fnode("first", "local.Inner", []string{"a"}, []string{"m"}, attrRef("k", f32, "s")),
				fnode("", "local.Inner", []string{"m"}, []string{"b"}, attrFloat("k", 0.3)))
			return fmodel([]*onnxpb.NodeProto{fnode("top", "local.Outer", []string{"x"}, []string{"y"}, attrFloat("s", 0.2))},
				[]*onnxpb.FunctionProto{outer, inner}, "y")
		}, []string{
			"top/first/LeakyRelu_0: LeakyRelu(x) -> top/m [alpha=0.2]",
			"top/Inner_1/LeakyRelu_0: LeakyRelu(top/m) -> y [alpha=0.3]",
		}},
		{"names that collide with the graph's, two calls unnamed", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"t"}), fnode("", "Abs", []string{"t"}, []string{"b"}))
			return fmodel([]*onnxpb.NodeProto{
				fnode("", "local.F", []string{"x"}, []string{"h"}),
				fnode("h/Neg_0", "Relu", []string{"h"}, []string{"h/t"}),
				fnode("", "local.F", []string{"h/t"}, []string{"y"}),
			}, []*onnxpb.FunctionProto{f}, "y")
		}, []string{
			"h/Neg_0_1: Neg(x) -> h/t_1",
			"h/Abs_1: Abs(h/t_1) -> h",
			"h/Neg_0: Relu(h) -> h/t",
			"y/Neg_0: Neg(h/t) -> y/t",
			"y/Abs_1: Abs(y/t) -> y",
		}},
		{"omitted optional input, output that is an input, unread output", func() *onnxpb.ModelProto {
			f := fn("Pass", []string{"a", "lo"}, []string{"b", "c", "d"},
				fnode("", "Clip", []string{"a", "lo"}, []string{"b"}), fnode("", "Neg", []string{"a"}, []string{"d"}))
			f.Output = []string{"b", "a", "d"}
			return fmodel([]*onnxpb.NodeProto{fnode("p", "local.Pass", []string{"x"}, []string{"y", "z"})}, []*onnxpb.FunctionProto{f}, "y", "z")
		}, []string{
			"p/Clip_0: Clip(x, ) -> y",
			"p/Neg_1: Neg(x) -> p/d",
			"p/a/Identity: Identity(x) -> z",
		}},
		{"overloads", func() *onnxpb.ModelProto {
			f1 := fn("G", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
			f2 := fn("G", []string{"a"}, []string{"b"}, fnode("", "Abs", []string{"a"}, []string{"b"}))
			f2.Overload = proto.String("abs")
			call := fnode("c", "local.G", []string{"x"}, []string{"y"})
			call.Overload = proto.String("abs")
			return fmodel([]*onnxpb.NodeProto{call}, []*onnxpb.FunctionProto{f1, f2}, "y")
		}, []string{"c/Abs_0: Abs(x) -> y"}},
		{"function not importing the default domain takes the model's", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
			f.OpsetImport = f.OpsetImport[1:]
			return fmodel([]*onnxpb.NodeProto{fnode("c", "local.F", []string{"x"}, []string{"y"})}, []*onnxpb.FunctionProto{f}, "y")
		}, []string{"c/Neg_0: Neg(x) -> y"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := FromONNX(onnx.NewModel(c.m()))
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Validate(); err != nil {
				t.Fatal(err)
			}
			got := summary(g)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("expanded to\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(c.want, "\n\t"))
			}
			// The export holds the expansion and reads back the same.
			m, err := g.ToONNX()
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			m2, err := onnx.LoadBytes(b, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, np := range m2.Proto.GetGraph().GetNode() {
				if np.GetDomain() == "local" {
					t.Fatalf("exported model still calls %s", np.GetOpType())
				}
			}
			g2, err := FromONNX(m2)
			if err != nil {
				t.Fatal(err)
			}
			if again := summary(g2); strings.Join(again, "\n") != strings.Join(got, "\n") {
				t.Fatalf("exported model reads back as\n\t%s", strings.Join(again, "\n\t"))
			}
		})
	}
}

func TestFunctionErrors(t *testing.T) {
	f32 := onnxpb.AttributeProto_FLOAT
	call := func(op string) []*onnxpb.NodeProto {
		return []*onnxpb.NodeProto{fnode("caller", op, []string{"x"}, []string{"y"})}
	}
	cases := []struct {
		name string
		m    func() *onnxpb.ModelProto
		want []string // substrings of the error
	}{
		{"recursion", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "local.G", []string{"a"}, []string{"b"}))
			g := fn("G", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"t"}), fnode("", "local.F", []string{"t"}, []string{"b"}))
			return fmodel(call("local.F"), []*onnxpb.FunctionProto{f, g}, "y")
		}, []string{`"caller"`, "local.F calls itself", "local.F → local.G → local.F", "recursive"}},
		{"self call", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "local.F", []string{"a"}, []string{"b"}))
			return fmodel(call("local.F"), []*onnxpb.FunctionProto{f}, "y")
		}, []string{"local.F calls itself"}},
		{"missing function", func() *onnxpb.ModelProto {
			m := fmodel(call("other.Nope"), []*onnxpb.FunctionProto{
				func() *onnxpb.FunctionProto {
					f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
					f.Domain = proto.String("other")
					return f
				}()}, "y")
			return m
		}, []string{`"caller"`, "other.Nope", "does not define", "other.F"}},
		{"missing nested function", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("inner", "local2.Nope", []string{"a"}, []string{"b"}))
			g := fn("H", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
			g.Domain = proto.String("local2")
			return fmodel(call("local.F"), []*onnxpb.FunctionProto{f, g}, "y")
		}, []string{`"caller"`, "function local.F", `"inner"`, "local2.Nope", "local2.H"}},
		{"opset differs from the model's", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("red", "ReduceMean", []string{"a"}, []string{"b"}, attrInts("axes", 1)))
			f.OpsetImport[0].Version = proto.Int64(17)
			return fmodel(call("local.F"), []*onnxpb.FunctionProto{f}, "y")
		}, []string{`"caller"`, "function local.F", `"red"`, "version 17", "imports version 18"}},
		{"domain the model does not import", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "com.microsoft.Gelu", []string{"a"}, []string{"b"}))
			f.OpsetImport = append(f.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("com.microsoft"), Version: proto.Int64(1)})
			return fmodel(call("local.F"), []*onnxpb.FunctionProto{f}, "y")
		}, []string{"function local.F", `domain "com.microsoft"`, "does not import"}},
		{"attribute of the wrong type", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "LeakyRelu", []string{"a"}, []string{"b"}, attrRef("alpha", f32, "s")))
			return fmodel([]*onnxpb.NodeProto{fnode("caller", "local.F", []string{"x"}, []string{"y"}, attrInt("s", 2))}, []*onnxpb.FunctionProto{f}, "y")
		}, []string{`"caller"`, "function local.F", `"alpha" refers to "s"`, "INT"}},
		{"reads a value from outside", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Add", []string{"a", "x"}, []string{"b"}))
			return fmodel(call("local.F"), []*onnxpb.FunctionProto{f}, "y")
		}, []string{"function local.F", `reads "x"`}},
		{"output never computed", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"c"}))
			return fmodel(call("local.F"), []*onnxpb.FunctionProto{f}, "y")
		}, []string{"function local.F", `output "b"`}},
		{"too many inputs", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
			return fmodel([]*onnxpb.NodeProto{fnode("caller", "local.F", []string{"x", "x"}, []string{"y"})}, []*onnxpb.FunctionProto{f}, "y")
		}, []string{"called with 2 inputs, it takes 1"}},
		{"defined twice", func() *onnxpb.ModelProto {
			f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
			return fmodel(call("local.F"), []*onnxpb.FunctionProto{f, f}, "y")
		}, []string{"local.F is defined twice"}},
		{"nested too deep", func() *onnxpb.ModelProto {
			var fs []*onnxpb.FunctionProto
			for i := 0; i < MaxFunctionDepth+5; i++ {
				fs = append(fs, fn(fmt.Sprint("F", i), []string{"a"}, []string{"b"}, fnode("", fmt.Sprint("local.F", i+1), []string{"a"}, []string{"b"})))
			}
			fs = append(fs, fn(fmt.Sprint("F", MaxFunctionDepth+5), []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"})))
			return fmodel(call("local.F0"), fs, "y")
		}, []string{"nest deeper than 64"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromONNX(onnx.NewModel(c.m()))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestFunctionExpansionBound: 10^4 calls of a function of 10^4 nodes
// (10^8 nodes) are refused from the counts alone, before anything is
// built; a function that fans out 10^4 ways per level is refused the same
// way however few nodes the file holds.
func TestFunctionExpansionBound(t *testing.T) {
	const k = 10000
	wide := func(name string, body func(i int) *onnxpb.NodeProto) *onnxpb.FunctionProto {
		f := fn(name, []string{"a"}, []string{"b"})
		prev := "a"
		for i := 0; i < k; i++ {
			np := body(i)
			np.Input, np.Output = []string{prev}, []string{fmt.Sprint("t", i)}
			prev = np.Output[0]
			f.Node = append(f.Node, np)
		}
		f.Node = append(f.Node, fnode("", "Identity", []string{prev}, []string{"b"}))
		return f
	}
	big := wide("Big", func(int) *onnxpb.NodeProto { return fnode("", "Neg", nil, nil) })
	var calls []*onnxpb.NodeProto
	prev := "x"
	for i := 0; i < k; i++ {
		out := fmt.Sprint("h", i)
		if i == k-1 {
			out = "y"
		}
		calls = append(calls, fnode(fmt.Sprint("call", i), "local.Big", []string{prev}, []string{out}))
		prev = out
	}
	// A tower: each level calls the one below 10^4 times (10^12 nodes
	// from 3·10^4 node protos).
	lvl1 := wide("L1", func(int) *onnxpb.NodeProto { return fnode("", "local.Small", nil, nil) })
	lvl2 := wide("L2", func(int) *onnxpb.NodeProto { return fnode("", "local.L1", nil, nil) })
	small := fn("Small", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
	for _, c := range []struct {
		name string
		m    *onnxpb.ModelProto
	}{
		{"many calls", fmodel(calls, []*onnxpb.FunctionProto{big}, "y")},
		{"tower", fmodel([]*onnxpb.NodeProto{fnode("top", "local.L2", []string{"x"}, []string{"y"})}, []*onnxpb.FunctionProto{lvl2, lvl1, small}, "y")},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, err := FromONNX(onnx.NewModel(c.m))
			if err == nil || !strings.Contains(err.Error(), "more than 1048576 nodes, the bound") {
				t.Fatalf("got %v, want the expansion bound", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("refusing took %v", d)
			}
			t.Log(err)
		})
	}
}

// TestFunctionSubgraphsKept: an If inside a function is inlined with its
// branches as they are (nothing in them is renamed or expanded), and one
// in the main graph is left alone; neither crashes the loader.
func TestFunctionSubgraphsKept(t *testing.T) {
	branch := &onnxpb.GraphProto{Name: proto.String("then"), Node: []*onnxpb.NodeProto{fnode("", "local.F", []string{"a"}, []string{"r"})},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("r")}}}
	graphAttr := func(name string) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: branch}
	}
	f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
	withIf := fn("W", []string{"a", "c"}, []string{"b"}, fnode("", "If", []string{"c"}, []string{"b"}, graphAttr("then_branch"), graphAttr("else_branch")))
	m := fmodel([]*onnxpb.NodeProto{
		fnode("w", "local.W", []string{"x", "cond"}, []string{"y"}),
		fnode("top_if", "If", []string{"cond"}, []string{"z"}, graphAttr("then_branch"), graphAttr("else_branch")),
	}, []*onnxpb.FunctionProto{f, withIf}, "y", "z")
	m.Graph.Initializer = append(m.Graph.Initializer, (&Tensor{DType: Bool, Shape: []int64{}, B: []bool{true}}).ToProto("cond"))
	g, err := FromONNX(onnx.NewModel(m))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(summary(g), "\n")
	want := "w/If_0: If(cond) -> y [then_branch else_branch]\ntop_if: If(cond) -> z [then_branch else_branch]"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if g.Nodes[0].Attr("then_branch").GetG() != branch {
		t.Error("the branch was changed")
	}
}

// TestNoFunctionsUnchanged: a model with functions that nothing calls
// keeps its node protos (and so re-encodes byte for byte).
func TestNoFunctionsUnchanged(t *testing.T) {
	f := fn("F", []string{"a"}, []string{"b"}, fnode("", "Neg", []string{"a"}, []string{"b"}))
	m := fmodel([]*onnxpb.NodeProto{fnode("n", "Relu", []string{"x"}, []string{"y"})}, []*onnxpb.FunctionProto{f}, "y")
	g, err := FromONNX(onnx.NewModel(m))
	if err != nil {
		t.Fatal(err)
	}
	if g.Nodes[0].proto != m.Graph.Node[0] {
		t.Error("node proto replaced")
	}
	out, err := g.ToONNX()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := onnx.NewModel(m).Bytes()
	b, _ := out.Bytes()
	if string(a) != string(b) {
		t.Error("model re-encodes to different bytes")
	}
}
