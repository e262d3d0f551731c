package graph

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Einsum: torchvision's maxvit_t writes its relative-position attention
// with torch.einsum, which exports as Einsum (opset 12+).

func init() {
	rules["Einsum"] = rule{infer: inferEinsum, eval: evalEinsum}
}

// EinsumSpec is a parsed Einsum equation: a label per axis of every
// operand and of the output. Axes under an ellipsis get labels of their own
// (above 'z'), right-aligned across operands as numpy broadcasting aligns
// them.
type EinsumSpec struct {
	Inputs [][]rune
	Output []rune
}

// ellipsisLabel is the label of the i-th of e ellipsis axes (outside the
// letters, so it never collides with one).
func ellipsisLabel(i int) rune { return rune(0x100 + i) }

// ParseEinsum parses an Einsum equation for operands of the given ranks.
// Without "->" the output is the ellipsis axes followed by the letters that
// occur once, in alphabetical order (the implicit mode of the spec).
func ParseEinsum(eq string, ranks []int) (*EinsumSpec, error) {
	eq = strings.ReplaceAll(eq, " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(ranks) {
		return nil, fmt.Errorf("equation %q has %d operands, the node %d inputs", eq, len(terms), len(ranks))
	}
	// The ellipsis covers rank − letters axes of each operand; e is the
	// widest.
	e := 0
	covers := make([]int, len(terms))
	for i, t := range terms {
		letters := strings.ReplaceAll(t, "...", "")
		for _, c := range letters {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return nil, fmt.Errorf("equation %q: operand %d has %q, not a letter", eq, i, c)
			}
		}
		if strings.Count(t, "...") > 1 {
			return nil, fmt.Errorf("equation %q: operand %d has two ellipses", eq, i)
		}
		n := len(letters)
		if strings.Contains(t, "...") {
			covers[i] = ranks[i] - n
			if covers[i] < 0 {
				return nil, fmt.Errorf("equation %q: operand %d has rank %d, fewer than its %d letters", eq, i, ranks[i], n)
			}
		} else if n != ranks[i] {
			return nil, fmt.Errorf("equation %q: operand %d has rank %d but %d letters", eq, i, ranks[i], n)
		}
		e = max(e, covers[i])
	}
	expand := func(t string, cover int) []rune {
		var out []rune
		pre, post, has := strings.Cut(t, "...")
		out = append(out, []rune(pre)...)
		if has {
			for j := e - cover; j < e; j++ {
				out = append(out, ellipsisLabel(j))
			}
			out = append(out, []rune(post)...)
		}
		return out
	}
	s := &EinsumSpec{}
	count := map[rune]int{}
	for i, t := range terms {
		labels := expand(t, covers[i])
		s.Inputs = append(s.Inputs, labels)
		for _, c := range labels {
			count[c]++
		}
	}
	if explicit {
		if strings.Count(rhs, "...") > 1 {
			return nil, fmt.Errorf("equation %q: the output has two ellipses", eq)
		}
		if !strings.Contains(rhs, "...") && e > 0 {
			// numpy sums the ellipsis axes away; ONNX requires them kept.
			return nil, fmt.Errorf("equation %q: the output drops the ellipsis axes", eq)
		}
		s.Output = expand(rhs, e)
		seen := map[rune]bool{}
		for _, c := range s.Output {
			if c < 0x100 && !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return nil, fmt.Errorf("equation %q: the output has %q, not a letter", eq, c)
			}
			if seen[c] {
				return nil, fmt.Errorf("equation %q: the output repeats %q", eq, c)
			}
			if count[c] == 0 {
				return nil, fmt.Errorf("equation %q: output label %q is in no operand", eq, c)
			}
			seen[c] = true
		}
		return s, nil
	}
	for j := 0; j < e; j++ {
		s.Output = append(s.Output, ellipsisLabel(j))
	}
	var once []rune
	for c, k := range count {
		if k == 1 && c < 0x100 {
			once = append(once, c)
		}
	}
	sort.Slice(once, func(i, j int) bool { return once[i] < once[j] })
	s.Output = append(s.Output, once...)
	return s, nil
}

// Sizes returns the size of every label over operands of the given shapes:
// equal where given, except that a size of 1 broadcasts (ellipsis axes and
// letters alike, as onnxruntime and PyTorch do). Unknown sizes (−1) take
// the size of any operand that knows it.
func (s *EinsumSpec) Sizes(shapes [][]int64) (map[rune]int64, error) {
	size := map[rune]int64{}
	for i, labels := range s.Inputs {
		for a, c := range labels {
			d := shapes[i][a]
			old, ok := size[c]
			switch {
			case !ok || old == 1 || old < 0 && d > 1:
				size[c] = d
			case d == 1 || d < 0 || d == old:
			default:
				return nil, fmt.Errorf("label %s has size %d in operand %d and %d elsewhere", labelName(c), d, i, old)
			}
		}
		// A label repeated in one operand (a diagonal) needs equal sizes.
		for a, c := range labels {
			for b := a + 1; b < len(labels); b++ {
				if labels[b] == c && shapes[i][a] >= 0 && shapes[i][b] >= 0 && shapes[i][a] != shapes[i][b] {
					return nil, fmt.Errorf("operand %d repeats label %s over axes of sizes %d and %d", i, labelName(c), shapes[i][a], shapes[i][b])
				}
			}
		}
	}
	return size, nil
}

// labelName prints a label for messages.
func labelName(c rune) string {
	if c >= 0x100 {
		return fmt.Sprintf("…%d", c-0x100)
	}
	return fmt.Sprintf("%q", c)
}

func einsumOperands(n *Node) ([][]int64, []int, error) {
	if _, err := n.Str("equation"); err != nil {
		return nil, nil, err
	}
	var shapes [][]int64
	var ranks []int
	for i, v := range n.Inputs {
		if v == nil {
			return nil, nil, fmt.Errorf("input %d is missing", i)
		}
		if v.Shape == nil {
			return nil, nil, fmt.Errorf("input %d (%q) has unknown rank", i, v.Name)
		}
		shapes = append(shapes, v.Shape.Ints())
		ranks = append(ranks, len(v.Shape))
	}
	if len(shapes) == 0 {
		return nil, nil, errors.New("Einsum needs at least one input")
	}
	return shapes, ranks, nil
}

func inferEinsum(g *Graph, n *Node) error {
	shapes, ranks, err := einsumOperands(n)
	if err != nil {
		return err
	}
	eq, _ := n.Str("equation")
	s, err := ParseEinsum(eq, ranks)
	if err != nil {
		return err
	}
	size, err := s.Sizes(shapes)
	if err != nil {
		return fmt.Errorf("equation %q: %w", eq, err)
	}
	out := make(Shape, len(s.Output))
	for i, c := range s.Output {
		out[i] = Dim{Size: size[c]}
	}
	setOut(n, 0, n.Inputs[0].DType, out)
	return nil
}

// maxEinsumReference bounds the work of EinsumReference.
const maxEinsumReference = 1 << 24

// EinsumReference evaluates an Einsum by its definition in float64: for
// every assignment of the labels, the product of the operands' elements is
// added to the output element. It serves constant folding and tests.
func EinsumReference(s *EinsumSpec, shapes [][]int64, at func(operand, i int) float64) ([]int64, []float64, error) {
	size, err := s.Sizes(shapes)
	if err != nil {
		return nil, nil, err
	}
	var labels []rune
	pos := map[rune]int{}
	for _, ls := range append(append([][]rune{}, s.Inputs...), s.Output) {
		for _, c := range ls {
			if _, ok := pos[c]; !ok {
				pos[c] = len(labels)
				labels = append(labels, c)
			}
		}
	}
	dims := make([]int64, len(labels))
	for i, c := range labels {
		dims[i] = size[c]
	}
	outShape := make([]int64, len(s.Output))
	for i, c := range s.Output {
		outShape[i] = size[c]
	}
	total := numel(dims)
	if total > maxEinsumReference {
		return nil, nil, fmt.Errorf("%d label assignments (limit %d)", total, maxEinsumReference)
	}
	out := make([]float64, numel(outShape))
	// offset of an operand's element at a label assignment; an axis of
	// size 1 against a larger label size broadcasts.
	offset := func(ls []rune, sh []int64, coord []int64) int {
		st := stridesOf(sh)
		j := 0
		for a, c := range ls {
			if sh[a] != 1 {
				j += int(coord[pos[c]]) * st[a]
			}
		}
		return j
	}
	coord := make([]int64, len(dims))
	for it := 0; it < total; it++ {
		prod := 1.0
		for k, ls := range s.Inputs {
			prod *= at(k, offset(ls, shapes[k], coord))
		}
		out[offset(s.Output, outShape, coord)] += prod
		increment(coord, dims)
	}
	return outShape, out, nil
}

func evalEinsum(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	eq, _ := n.Str("equation")
	shapes := make([][]int64, len(in))
	ranks := make([]int, len(in))
	for i, t := range in {
		if !t.DType.IsFloat() && t.I64 == nil {
			return nil, fmt.Errorf("cannot fold Einsum on %v", t.DType)
		}
		shapes[i], ranks[i] = t.Shape, len(t.Shape)
	}
	s, err := ParseEinsum(eq, ranks)
	if err != nil {
		return nil, err
	}
	outShape, vals, err := EinsumReference(s, shapes, func(k, i int) float64 { return in[k].At(i) })
	if err != nil {
		return []*Tensor{nil}, nil // too large to fold: the runtime computes it
	}
	out := newTensor(in[0].DType, outShape)
	return []*Tensor{out}, out.setFloat64s(vals)
}
