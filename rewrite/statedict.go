package rewrite

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// StateEntry is one tensor of a model's PyTorch state dict: the
// initializer holding it and how the initializer lays it out.
type StateEntry struct {
	// Key is the state-dict name ("layer1.0.conv1.weight").
	Key string `json:"key"`
	// Source is the initializer's name in the ONNX model.
	Source string `json:"source"`
	// Shape is the tensor's shape in PyTorch.
	Shape []int64 `json:"shape"`
	// Transposed says the initializer holds the transpose of a Linear
	// weight, (in, out): the exporter folded the transpose that
	// F.linear's product x·Wᵀ reads into the initializer.
	Transposed bool `json:"transposed,omitempty"`

	t *graph.Tensor // the initializer's data (an untied copy's included)
}

// GroupNormModule is a normalization module the state dict holds as
// torch.nn.GroupNorm(Groups, Channels, eps=Epsilon): where a run replaced
// BatchNorm by GroupNorm (--bn groupnorm), the module the user's model has
// as BatchNorm must be replaced so before the state dict loads.
type GroupNormModule struct {
	Module   string  `json:"module"`
	Groups   int64   `json:"groups"`
	Channels int64   `json:"channels"`
	Epsilon  float64 `json:"epsilon"`
}

// UnnamedTensor is a floating-point initializer of more than one element
// whose state-dict name the graph does not tell.
type UnnamedTensor struct {
	Source string  `json:"source"`
	Shape  []int64 `json:"shape"`
	Reason string  `json:"reason"`
}

// StateDict is what a model holds of its PyTorch module's state dict.
type StateDict struct {
	Entries    []StateEntry      `json:"entries"`
	GroupNorms []GroupNormModule `json:"groupnorms,omitempty"`
	Unnamed    []UnnamedTensor   `json:"unnamed,omitempty"`
}

// ErrFoldedExport says the model's BatchNorms were folded into its
// convolutions (an eval-mode export): its convolution weights are no
// module's weights.
var ErrFoldedExport = errors.New("the exporter folded its BatchNorms into the convolutions (torch.onnx.export of model.eval() with constant folding, or the dynamo exporter's optimizer): each such convolution's weight and bias are its weight and its BatchNorm's together, which no state dict of the module holds; export in training mode with do_constant_folding=False (README, \"Export\"; the dynamo exporter: optimize=False) and train that export for weights that load into the module")

// OwnPrefix begins the names of the initializers dpfinetune itself adds
// to a model (calibrate's temperature, each label's scale and shift):
// StateDictOf lists them under their names, for the caller to tell from
// the module's tensors.
const OwnPrefix = "dpfinetune."

// foldedWeight says whether w, a convolution's weight, is one an exporter
// made by folding a BatchNorm into it: TorchScript's exporter names it
// anew (onnx::Conv_497), the dynamo exporter's optimizer keeps the name
// but not the signature's mark (ExportForm's reading).
func foldedWeight(g *graph.Graph, w *graph.Value) bool {
	if g.ExportSignature {
		return w.ExportKind == "" && !w.ExportConstant && !w.NoGradient
	}
	return ExporterNamed(w.Name)
}

// StateDictOf says which of g's initializers are which tensors of the
// PyTorch module's state dict, and in what layout:
//
//   - an initializer keeps its state-dict name where the exporter gave it
//     one (TorchScript's exporter names parameters and buffers by their
//     state-dict keys; the dynamo exporter marks them PARAMETER or BUFFER
//     in its signature);
//   - an exporter-named weight (onnx::Conv_12, onnx::MatMul_40) is named by
//     the module scope of the Conv, Gemm, MatMul or normalization that reads
//     it (ModuleName), and a weight the product reads as (in, out) — the
//     exporter folded F.linear's transpose into it — is written back
//     transposed;
//   - an unnamed (in, out) weight a MatMul reads whose product then adds a
//     named bias "Xbias" of out elements is "Xweight", transposed
//     (linearByBias: "mlp.0.bias", nn.MultiheadAttention's
//     "in_proj_bias"; the dynamo exporter's optimizer folds a Linear's
//     transpose into "val_34"); one whose product adds no such bias is
//     named by the module whose forward multiplies by it only where that
//     module holds no other key, a Linear of its own (BEiT's attention
//     multiplies by its qkv weight in its own forward: unnamed);
//   - a GroupNorm's scale and shift of shape (C, 1, …, 1), RewriteBatchNorm's
//     and ExportGraph's form, are the module's (C) tensors, and the module is
//     listed in GroupNorms (a run's --bn groupnorm replaced the BatchNorm
//     the user's module has there).
//
// Float initializers of one element no layer reads as its weight or bias
// (GELU's constants, attention's scale) and values no gradient reaches
// (masks) are constants, not state; any other initializer is listed in
// Unnamed with the reason. Two initializers named alike are an error, as
// is a model one of whose BatchNorms the exporter folded into a
// convolution (ErrFoldedExport: an eval-form export, DenseNet's first
// convolution even where its other BatchNorms stay).
// With folded set, such convolutions are read as any (UnfoldBatchNorm
// then gives their BatchNorms back). sample is one sample's shape (nil:
// the model's), which finds the GroupNorms; g is not changed.
func StateDictOf(g *graph.Graph, sample []int64, folded bool) (*StateDict, error) {
	if !folded {
		for _, n := range g.Nodes {
			if w := n.Input(1); (n.OpType == "Conv" || n.OpType == "ConvTranspose") && w != nil && w.Initializer && w.Const != nil && foldedWeight(g, w) {
				return nil, fmt.Errorf("rewrite: state dict: convolution %s reads %s: %w", nodeLabel(n), w.Name, ErrFoldedExport)
			}
		}
	}
	c := g.Clone()
	// The exporter stores equal tensors once and reads the others through
	// Identity nodes named as theirs (two zero biases); untied, each is
	// an initializer under its own key.
	if _, err := Cleanup(c); err != nil {
		return nil, fmt.Errorf("rewrite: state dict: %w", err)
	}
	relink(c)
	// A GroupNorm decomposed (RewriteBatchNorm's written form, PyTorch's
	// nn.GroupNorm before opset 21) is fused to read its affine as one
	// node's; the fusion needs the shapes.
	decomposed := slices.ContainsFunc(c.Nodes, func(n *graph.Node) bool {
		return n.OpType == "InstanceNormalization" || n.OpType == "ReduceMean"
	})
	if decomposed {
		shapes, err := StaticShapes(c, sample, 1)
		if err != nil {
			return nil, fmt.Errorf("rewrite: state dict: %w", err)
		}
		if _, err := FuseGroupNorm(c, shapes); err != nil {
			return nil, fmt.Errorf("rewrite: state dict: %w", err)
		}
		relink(c)
	}
	sd := &StateDict{}
	// The keys a name or a bias tells first; a weight named only by the
	// module scope of the product reading it then, once every other key
	// is known (stateKey's candidates).
	type named struct {
		v          *graph.Value
		key        string
		transposed bool
		scoped     bool
	}
	var all []named
	for _, v := range c.Initializers {
		if !v.DType.IsFloat() || v.Const == nil || len(v.Consumers) == 0 {
			continue
		}
		key, transposed, scoped, why := stateKey(c, v)
		if key == "" {
			if why != "" {
				sd.Unnamed = append(sd.Unnamed, UnnamedTensor{Source: v.Name, Shape: append([]int64{}, v.Const.Shape...), Reason: why})
			}
			continue
		}
		all = append(all, named{v, key, transposed, scoped})
	}
	sources := map[string]string{}
	for _, a := range all {
		if a.scoped {
			// A product's module scope names its weight only where that
			// module is a layer of its own: a module with parameters of
			// its children's around it computes with a parameter the
			// export does not name (BEiT's attention multiplies by its
			// qkv.weight functionally, inside attn).
			mod := strings.TrimSuffix(a.key, ".weight")
			parent := ""
			for _, b := range all {
				if !b.scoped && b.key != a.key && strings.HasPrefix(b.key, mod+".") {
					parent = b.key
					break
				}
			}
			if parent != "" {
				sd.Unnamed = append(sd.Unnamed, UnnamedTensor{Source: a.v.Name, Shape: append([]int64{}, a.v.Const.Shape...),
					Reason: fmt.Sprintf("a weight module %s multiplies by in its own forward (it holds %s too, so it is no Linear of its own), which the export does not name; an export without constant folding (do_constant_folding=False; the dynamo exporter's optimize=False) keeps its name", mod, parent)})
				continue
			}
		}
		v := a.v
		if prev, ok := sources[a.key]; ok {
			return nil, fmt.Errorf("rewrite: state dict: initializers %q and %q are both %q", prev, v.Name, a.key)
		}
		sources[a.key] = v.Name
		e := StateEntry{Key: a.key, Source: v.Name, Shape: append([]int64{}, v.Const.Shape...), Transposed: a.transposed, t: v.Const}
		switch {
		case a.transposed:
			e.Shape = []int64{e.Shape[1], e.Shape[0]}
		case groupNormAffine(v) != nil:
			e.Shape = e.Shape[:1]
		}
		sd.Entries = append(sd.Entries, e)
	}
	for _, n := range c.Nodes {
		if !ownGroupNorm(n) || n.Inputs[1].Const == nil {
			continue
		}
		key := ""
		for _, e := range sd.Entries {
			if e.Source == n.Inputs[1].Name {
				key = e.Key
			}
		}
		mod, ok := strings.CutSuffix(key, ".weight")
		if !ok {
			continue
		}
		groups, err := n.Int("num_groups")
		if err != nil {
			return nil, fmt.Errorf("rewrite: state dict: GroupNorm %s: %w", nodeLabel(n), err)
		}
		eps, err := n.Float("epsilon")
		if err != nil {
			eps = 1e-5
		}
		// ε as written (1e-05), not float32's nearest in float64.
		eps64, _ := strconv.ParseFloat(strconv.FormatFloat(float64(eps), 'g', -1, 32), 64)
		sd.GroupNorms = append(sd.GroupNorms, GroupNormModule{Module: mod, Groups: groups, Channels: n.Inputs[1].Const.Shape[0], Epsilon: eps64})
	}
	return sd, nil
}

// groupNormAffine returns the GroupNormalization node that reads v, an
// initializer of shape (C, 1, …, 1), as its scale or shift, or nil.
func groupNormAffine(v *graph.Value) *graph.Node {
	if len(v.Const.Shape) < 2 {
		return nil
	}
	for _, n := range v.Consumers {
		if ownGroupNorm(n) && (n.Inputs[1] == v || n.Inputs[2] == v) {
			return n
		}
	}
	return nil
}

// stateKey returns v's state-dict key and whether v holds its transpose;
// "" and why where it has none ("" and "" for a constant). scoped says
// the key is only the module scope of the product that reads v, which
// StateDictOf checks against the other keys.
func stateKey(g *graph.Graph, v *graph.Value) (key string, transposed, scoped bool, why string) {
	if strings.HasPrefix(v.Name, OwnPrefix) {
		// What dpfinetune itself added (calibrate's temperature): named
		// so by its writer, whatever the exporter.
		return v.Name, false, false, ""
	}
	if v.NoGradient {
		return "", false, false, ""
	}
	if g.ExportSignature {
		switch v.ExportKind {
		case "PARAMETER", "BUFFER":
			return v.Name, false, false, ""
		case "":
		default: // CONSTANT_TENSOR, …
			return "", false, false, ""
		}
		if v.Const.Len() == 1 && v.ExportConstant {
			return "", false, false, ""
		}
		if k := linearByBias(g, v); k != "" {
			return k, true, false, ""
		}
		scope := ScopeOf(v)
		if scope != "" && len(v.Const.Shape) == 2 && isProductOperand(v) {
			// The module whose forward multiplies by it: a Linear of its
			// own where no other key lies under it (PatchMerging's
			// reduction), else checked and refused by StateDictOf.
			return scope + ".weight", true, true, ""
		}
		why := "the exporter's optimizer made it (no state-dict name): a value it computed from parameters, or one it folded; export with optimize=False to keep the parameters it was computed from"
		if scope != "" {
			why += "; read in " + scope
		}
		return "", false, false, why
	}
	if !ExporterNamed(v.Name) {
		return v.Name, false, false, ""
	}
	if v.Const.Len() == 1 && !layerOperand(v) {
		return "", false, false, ""
	}
	if k := linearByBias(g, v); k != "" {
		return k, true, false, ""
	}
	if m := ModuleName(v); m != "" && layerOperand(v) {
		tr := readsTransposed(v)
		return m, tr, tr || isProductOperand(v), ""
	}
	return "", false, false, "the exporter named it and no layer's module scope names it: a value computed from parameters and folded (Swin's position biases gathered from their table); an export without constant folding (do_constant_folding=False) keeps the parameters it was computed from"
}

// isProductOperand says whether a Gemm or MatMul reads v as its weight.
func isProductOperand(v *graph.Value) bool {
	for _, n := range v.Consumers {
		u, r := reader(v, n)
		if (r.OpType == "MatMul" || r.OpType == "Gemm") && r.Input(1) == u {
			return true
		}
	}
	return false
}

// layerOperand says whether v is read, through Identity or Cast, as the
// weight or bias of a Conv, ConvTranspose, Gemm or normalization, or as
// a MatMul's second operand of rank 2: the operands whose module scope
// names them.
func layerOperand(v *graph.Value) bool {
	for _, n := range v.Consumers {
		u, r := reader(v, n)
		switch r.OpType {
		case "Conv", "ConvTranspose", "Gemm", "LayerNormalization", "GroupNormalization", "InstanceNormalization", "BatchNormalization":
			for _, in := range r.Inputs[1:] {
				if in == u {
					return true
				}
			}
		case "MatMul":
			if len(r.Inputs) == 2 && r.Inputs[1] == u && len(v.Const.Shape) == 2 {
				return true
			}
		}
	}
	return false
}

// readsTransposed says whether v is a rank-2 weight read as (in, out): by
// a MatMul as its second operand, or by a Gemm without transB.
func readsTransposed(v *graph.Value) bool {
	if len(v.Const.Shape) != 2 {
		return false
	}
	for _, n := range v.Consumers {
		u, r := reader(v, n)
		switch {
		case r.OpType == "MatMul" && r.Input(1) == u:
			return true
		case r.OpType == "Gemm" && r.Input(1) == u:
			tb, _ := r.Int("transB")
			return tb == 0
		}
	}
	return false
}

// linearByBias names v, an (in, out) initializer a MatMul reads as its
// second operand, after the named bias its product adds: "Xweight" for a
// bias "Xbias" of out elements ("mlp.0.bias" gives "mlp.0.weight",
// nn.MultiheadAttention's "in_proj_bias" its "in_proj_weight"; F.linear
// exported as MatMul then Add). "" where the product adds no such bias.
func linearByBias(g *graph.Graph, v *graph.Value) string {
	if len(v.Const.Shape) != 2 {
		return ""
	}
	for _, n := range v.Consumers {
		u, r := reader(v, n)
		if r.OpType != "MatMul" || r.Input(1) != u || len(r.Outputs) != 1 || r.Outputs[0] == nil {
			continue
		}
		for _, a := range r.Outputs[0].Consumers {
			if a.OpType != "Add" {
				continue
			}
			for _, b := range a.Inputs {
				if b == nil || b.Const == nil || !b.Initializer || len(b.Const.Shape) != 1 || b.Const.Shape[0] != v.Const.Shape[1] {
					continue
				}
				if g.ExportSignature && b.ExportKind != "PARAMETER" || !g.ExportSignature && ExporterNamed(b.Name) {
					continue
				}
				if m, ok := strings.CutSuffix(b.Name, "bias"); ok && (m == "" || strings.HasSuffix(m, ".") || strings.HasSuffix(m, "_")) {
					return m + "weight"
				}
			}
		}
	}
	return ""
}

// Values returns e's tensor as PyTorch lays it out, in float32 (a float64
// model's values rounded).
func (e StateEntry) Values() ([]float32, error) {
	t := e.t
	if t == nil {
		return nil, fmt.Errorf("rewrite: state dict: %q: no values (not an entry of StateDictOf)", e.Key)
	}
	n := t.Len()
	out := make([]float32, n)
	if t.F32 != nil {
		copy(out, t.F32)
	} else {
		for i := range out {
			out[i] = float32(t.At(i))
		}
	}
	if !e.Transposed {
		return out, nil
	}
	rows, cols := int(t.Shape[0]), int(t.Shape[1])
	tr := make([]float32, n)
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			tr[j*rows+i] = out[i*cols+j]
		}
	}
	return tr, nil
}

// UnfoldBatchNorm gives sd, the state dict of tuned, back the BatchNorms
// folded into its convolutions — by a run with --bn freeze
// (RewriteBatchNorm's BNFreeze) or by the exporter (an eval-form export,
// StateDictOf with folded set) — from original, an export of the same
// module that keeps them (the one a --bn freeze run started from, or the
// training-form export, do_constant_folding=False), whose
// BatchNormalization nodes name the module's BatchNorm tensors. It
// returns how many it gave back.
//
// A BatchNorm frozen with its running statistics computes s·x + t with
// s = γ/√(var + ε) and t = β − s·mean. Folded into the convolution before
// it, the model computes with (and a run trained) W' = s·W and the bias
// b' = s·(c − mean) + β, c the convolution's own bias or none: the module's
// convolution gets W = W'/s and its bias c as it was, its BatchNorm γ,
// mean and var as they were and β = b' − s·(c − mean) — exact in eval
// mode, where the module's BatchNorm computes s·x + β − s·mean. A channel
// whose γ is 0 gets γ = √(var + ε) instead (s = 1), which its W' needs. A
// frozen BatchNorm a run left as a Mul and an Add (not after a
// convolution of its own) holds s and t themselves, of shape (C, 1, …, 1)
// under γ's and β's names: γ = s·√(var + ε), β = t + s·mean. A BatchNorm
// the run trained as GroupNorm (sd.GroupNorms) stays one, as does one
// tuned still holds as a BatchNorm.
//
// A BatchNorm of original that tuned holds in none of these forms is an
// error, as are a convolution of tuned whose folded BatchNorm original
// does not name and a folded copy of a shared weight (…_bnfold), which the
// run trained apart from it.
func UnfoldBatchNorm(sd *StateDict, tuned, original *graph.Graph) (int, error) {
	c := original.Clone()
	if _, err := Cleanup(c); err != nil {
		return 0, fmt.Errorf("rewrite: unfolding BatchNorm: %w", err)
	}
	relink(c)
	byKey := func(k string) int {
		for i := range sd.Entries {
			if sd.Entries[i].Key == k {
				return i
			}
		}
		return -1
	}
	set := func(key string, shape []int64, vals []float64) {
		t := floatTensor(graph.Float32, shape, vals)
		e := StateEntry{Key: key, Source: key, Shape: shape, t: t}
		if i := byKey(key); i >= 0 {
			sd.Entries[i] = e
		} else {
			sd.Entries = append(sd.Entries, e)
		}
	}
	// drop removes what sd read from the tuned initializer named src.
	drop := func(src string) {
		sd.Entries = slices.DeleteFunc(sd.Entries, func(e StateEntry) bool { return e.Source == src })
		sd.Unnamed = slices.DeleteFunc(sd.Unnamed, func(u UnnamedTensor) bool { return u.Source == src })
	}
	groupNorm := map[string]bool{}
	for _, gn := range sd.GroupNorms {
		groupNorm[gn.Module+".weight"] = true
	}
	// The tuned convolutions a BatchNorm may have been folded into, by
	// the original's name of their weight.
	convs := map[string]*graph.Node{}
	for _, m := range tuned.Nodes {
		w := m.Input(1)
		if m.OpType != "Conv" || w == nil || !w.Initializer || w.Const == nil {
			continue
		}
		name := strings.TrimSuffix(w.Name, "_bnfold")
		if !tuned.ExportSignature && ExporterNamed(w.Name) {
			name = ModuleName(w)
		}
		if name != "" {
			convs[name] = m
		}
	}
	unfolded := map[*graph.Node]bool{}
	given := 0
	for _, n := range c.Nodes {
		if n.OpType != "BatchNormalization" || n.Domain != "" || len(n.Inputs) < 5 {
			continue
		}
		var p [4][]float64 // γ, β, mean, var
		for j := range p {
			v := n.Inputs[1+j]
			if v == nil || v.Const == nil || ExporterNamed(v.Name) {
				return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: its input %d is no named initializer", nodeLabel(n), 1+j)
			}
			vals, err := floats(v.Const)
			if err != nil {
				return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: %w", nodeLabel(n), err)
			}
			p[j] = vals
		}
		gamma, beta, mean, vr := p[0], p[1], p[2], p[3]
		ch := len(gamma)
		if len(beta) != ch || len(mean) != ch || len(vr) != ch {
			return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: its tensors differ in length", nodeLabel(n))
		}
		gk, bk, mk, vk := n.Inputs[1].Name, n.Inputs[2].Name, n.Inputs[3].Name, n.Inputs[4].Name
		if i := byKey(gk); groupNorm[gk] || i >= 0 && len(sd.Entries[i].Shape) == 1 && byKey(mk) >= 0 {
			// Trained as GroupNorm, or still a BatchNorm of its own (an
			// eval-form export keeps those after no convolution of their
			// own: DenseNet's).
			continue
		}
		eps := 1e-5
		if e, err := n.Float("epsilon"); err == nil {
			eps = float64(e)
		}
		den := make([]float64, ch)
		for i := range den {
			den[i] = math.Sqrt(vr[i] + eps)
		}
		cs := []int64{int64(ch)}
		if i := byKey(gk); i >= 0 && len(sd.Entries[i].Shape) >= 2 {
			// Not folded: Mul(s) and Add(t).
			j := byKey(bk)
			if j < 0 {
				return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: %s is in the model, %s not", nodeLabel(n), gk, bk)
			}
			s, err := entryFloats(sd.Entries[i])
			if err != nil {
				return 0, err
			}
			t, err := entryFloats(sd.Entries[j])
			if err != nil {
				return 0, err
			}
			if len(s) != ch || len(t) != ch {
				return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: the model's %s and %s are not of %d channels", nodeLabel(n), gk, bk, ch)
			}
			g2, b2 := make([]float64, ch), make([]float64, ch)
			for k := range ch {
				g2[k] = s[k] * den[k]
				b2[k] = t[k] + s[k]*mean[k]
			}
			set(gk, cs, g2)
			set(bk, cs, b2)
			set(mk, cs, mean)
			set(vk, cs, vr)
			given++
			continue
		}
		var conv *graph.Node
		if n.Inputs[0] != nil {
			conv = n.Inputs[0].Producer
		}
		if conv == nil || conv.OpType != "Conv" || conv.Input(1) == nil || conv.Input(1).Const == nil {
			return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: the model has neither its frozen form nor a convolution it was folded into", nodeLabel(n))
		}
		wk := conv.Input(1).Name
		tc := convs[wk]
		if tc == nil || tc.Input(2) == nil || tc.Input(2).Const == nil {
			return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: the model has no convolution of %s with the bias its folding adds", nodeLabel(n), wk)
		}
		if strings.HasSuffix(tc.Input(1).Name, "_bnfold") {
			return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: convolution weight %s is shared with another layer, and the run trained its folded copy %s apart from it: no module holds both", nodeLabel(n), wk, tc.Input(1).Name)
		}
		w, err := floats(tc.Input(1).Const)
		if err != nil {
			return 0, err
		}
		b, err := floats(tc.Input(2).Const)
		if err != nil {
			return 0, err
		}
		if len(b) != ch || len(w)%ch != 0 {
			return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: convolution %s has %d outputs, the BatchNorm %d channels", nodeLabel(n), wk, len(b), ch)
		}
		cb := make([]float64, ch) // the convolution's own bias, as it was
		ck := ""
		if v := conv.Input(2); v != nil && v.Const != nil {
			if cb, err = floats(v.Const); err != nil || len(cb) != ch {
				return 0, fmt.Errorf("rewrite: unfolding BatchNorm %s: convolution bias %s: %d values, %v", nodeLabel(n), v.Name, len(cb), err)
			}
			ck = v.Name
		}
		g2, b2 := append([]float64(nil), gamma...), make([]float64, ch)
		per := len(w) / ch
		for k := range ch {
			s := gamma[k] / den[k]
			if s == 0 || math.IsInf(1/s, 0) {
				g2[k], s = den[k], 1
			}
			for j := range per {
				w[k*per+j] /= s
			}
			b2[k] = b[k] - s*(cb[k]-mean[k])
		}
		unfolded[tc] = true
		given++
		drop(tc.Input(1).Name)
		drop(tc.Input(2).Name)
		set(wk, append([]int64(nil), tc.Input(1).Const.Shape...), w)
		if ck != "" {
			set(ck, cs, cb)
		}
		set(gk, cs, g2)
		set(bk, cs, b2)
		set(mk, cs, mean)
		set(vk, cs, vr)
	}
	for _, m := range tuned.Nodes {
		w := m.Input(1)
		if m.OpType != "Conv" || w == nil || !w.Initializer || w.Const == nil || unfolded[m] {
			continue
		}
		if strings.HasSuffix(w.Name, "_bnfold") || foldedWeight(tuned, w) {
			return 0, fmt.Errorf("rewrite: unfolding BatchNorm: convolution %s reads %s, a weight a BatchNorm was folded into, and the original model has no BatchNorm after its convolution", nodeLabel(m), w.Name)
		}
	}
	return given, nil
}

// entryFloats returns e's values in float64, as PyTorch lays them out.
func entryFloats(e StateEntry) ([]float64, error) {
	v, err := e.Values()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out, nil
}
