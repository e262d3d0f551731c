package dptrain

import (
	"fmt"
	"math"
	"slices"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
)

// How a group's probabilities are combined (Grouping.Combine).
const (
	// CombineMean takes the mean of the group's examples' probabilities:
	// MURA's study score (the mean of its views' abnormality
	// probabilities).
	CombineMean = "mean"
	// CombineMax takes each class's or label's largest probability over
	// the group's examples — a finding seen in any of a study's views —,
	// a single-label model's then normalized to sum to 1.
	CombineMax = "max"
)

// Grouping makes an evaluation's figures those of groups of examples — a
// study's views, a patient's scans — rather than of the examples
// (Evaluator.RunGrouped): each group one example whose probabilities
// combine its examples'.
type Grouping struct {
	// Of is each example's group, in [0, len(Names)).
	Of []int32
	// Names names the groups (in messages).
	Names []string
	// Combine is CombineMean or CombineMax.
	Combine string
	// Example names example i in messages (nil: "example i").
	Example func(i int) string
}

// GroupSummary describes the groups of a grouped evaluation
// (EvalResult.Groups).
type GroupSummary struct {
	// Combine is how each group's probabilities combine its examples'
	// (Grouping.Combine).
	Combine string `json:"combine"`
	// Examples counts the examples the groups hold; Largest the most
	// examples of one group, Single the groups of one example (scored
	// as that example is ungrouped).
	Examples int `json:"examples"`
	Largest  int `json:"largest"`
	Single   int `json:"single"`
}

// maxGroupedFloats bounds the logits an evaluation keeps (Evaluator.keep:
// examples times classes, 1 GiB of float32).
const maxGroupedFloats = 1 << 28

// RunGrouped evaluates v's examples as groups (gr): every figure — the
// accuracy, AUCs and their intervals, the loss, EvalResult.Samples —
// counts groups, each scored by its examples' probabilities combined as
// gr.Combine says, a group of one example as that example. The examples
// of a group must have one label (one class, or one label set ignoring
// the same labels): the group's; a group whose examples differ is an
// error naming two of them. The thresholds (SetThresholds) decide on the
// combined probabilities.
func (ev *Evaluator) RunGrouped(v data.Dataset, gr Grouping) (*EvalResult, error) {
	res, _, err := ev.Keep(v, &gr)
	return res, err
}

// keep runs the model over v and keeps every example's logits, loss and
// labels (examples): what a grouped evaluation, a bootstrap and a
// calibration work on. what names the caller's use in its errors.
func (ev *Evaluator) keep(v data.Dataset, what string) (*examples, error) {
	n := v.Len()
	switch {
	case n == 0:
		return nil, fmt.Errorf("no examples for %s", what)
	case v.NumClasses() > ev.k:
		return nil, fmt.Errorf("the data has %d classes but the model outputs %d logits (use --num-classes when training)", v.NumClasses(), ev.k)
	case int64(n)*int64(ev.k) > maxGroupedFloats:
		return nil, fmt.Errorf("%s keeps every example's logits: %d examples of %d logits is more than %d; take a part of the data at a time (:limit=N, where=)", what, n, ev.k, maxGroupedFloats)
	}
	e := newExamples(n, ev.k, ev.multiLabel)
	if err := ev.Losses(v, func(i int, label int64, logits []float32, loss float64) {
		e.set(i, label, ev.truth, ev.ignored, logits, loss)
	}); err != nil {
		return nil, err
	}
	return e, nil
}

// examples are an evaluation's examples as Losses gives them, kept for a
// grouped evaluation: n·k logits, the losses, the labels — multi-label,
// the label sets' words and their ignored labels', w words an example.
type examples struct {
	n, k, w        int
	multi          bool
	logits         []float32
	loss           []float64
	labels         []int64
	truth, ignored []uint64
}

func newExamples(n, k int, multi bool) *examples {
	e := &examples{n: n, k: k, multi: multi, logits: make([]float32, n*k), loss: make([]float64, n), labels: make([]int64, n)}
	if multi {
		e.w = labelset.Words(k)
		e.truth, e.ignored = make([]uint64, n*e.w), make([]uint64, n*e.w)
	}
	return e
}

// set keeps example i.
func (e *examples) set(i int, label int64, truth, ignored []uint64, logits []float32, loss float64) {
	copy(e.logits[i*e.k:(i+1)*e.k], logits)
	e.loss[i], e.labels[i] = loss, label
	if e.multi {
		copy(e.truth[i*e.w:(i+1)*e.w], truth)
		copy(e.ignored[i*e.w:(i+1)*e.w], ignored)
	}
}

// groups returns the groups of gr as examples of their own, each its
// examples' logits combined (the first example's label, the others
// checked to have it), and what the groups are.
func (e *examples) groups(gr Grouping) (*examples, *GroupSummary, error) {
	if gr.Combine != CombineMean && gr.Combine != CombineMax {
		return nil, nil, fmt.Errorf("combining a group's probabilities by %q: want %s or %s", gr.Combine, CombineMean, CombineMax)
	}
	groups := len(gr.Names)
	if groups == 0 && e.n > 0 {
		return nil, nil, fmt.Errorf("%d examples in no groups", e.n)
	}
	// The examples in order of their groups (a counting sort: each
	// group's in the data's order).
	start := make([]int, groups+1)
	for i, g := range gr.Of {
		if g < 0 || int(g) >= groups {
			return nil, nil, fmt.Errorf("%s: group %d of %d", e.name(gr, i), g, groups)
		}
		start[g+1]++
	}
	for g := range groups {
		if start[g+1] == 0 {
			return nil, nil, fmt.Errorf("group %q has no examples", gr.Names[g])
		}
		start[g+1] += start[g]
	}
	order, next := make([]int, e.n), slices.Clone(start[:groups])
	for i, g := range gr.Of {
		order[next[g]] = i
		next[g]++
	}
	sum := &GroupSummary{Combine: gr.Combine, Examples: e.n}
	ge := newExamples(groups, e.k, e.multi)
	c := newCombiner(e.k)
	for g := range groups {
		members := order[start[g]:start[g+1]]
		sum.Largest = max(sum.Largest, len(members))
		first := members[0]
		for _, i := range members[1:] {
			if err := e.sameLabel(gr, g, first, i); err != nil {
				return nil, nil, err
			}
		}
		logits, loss := e.logits[first*e.k:(first+1)*e.k], e.loss[first]
		if len(members) == 1 {
			sum.Single++
		} else {
			c.combine(e.logits, members, e.multi, gr.Combine == CombineMax)
			logits, loss = c.logits32, c.loss(e, first)
		}
		var truth, ignored []uint64
		if e.multi {
			truth, ignored = e.truth[first*e.w:(first+1)*e.w], e.ignored[first*e.w:(first+1)*e.w]
		}
		ge.set(g, e.labels[first], truth, ignored, logits, loss)
	}
	return ge, sum, nil
}

// evaluate scores the kept examples idx (nil: every one, in order; an
// example drawn twice counts twice) as an evaluation does; cut are the
// decision thresholds as logits (nil: none).
func (e *examples) evaluate(idx []int, cut []float64) *EvalResult {
	n := e.n
	if idx != nil {
		n = len(idx)
	}
	at := func(k int) int {
		if idx == nil {
			return k
		}
		return idx[k]
	}
	if e.multi {
		m := newLabelMetrics(n, e.k)
		m.cut = cut
		for k := range n {
			i := at(k)
			m.add(k, e.truth[i*e.w:(i+1)*e.w], e.ignored[i*e.w:(i+1)*e.w], e.logits[i*e.k:(i+1)*e.k], e.loss[i])
		}
		return m.result()
	}
	m := newMetrics(n, e.k)
	m.cut = cut
	for k := range n {
		i := at(k)
		m.add(k, e.labels[i], e.logits[i*e.k:(i+1)*e.k], e.loss[i])
	}
	return m.result()
}

// name names example i in messages.
func (e *examples) name(gr Grouping, i int) string {
	if gr.Example != nil {
		if s := gr.Example(i); s != "" {
			return s
		}
	}
	return fmt.Sprintf("example %d", i)
}

// sameLabel checks that example i has the label of example first, both
// of group g.
func (e *examples) sameLabel(gr Grouping, g, first, i int) error {
	if !e.multi {
		if e.labels[i] == e.labels[first] {
			return nil
		}
		return fmt.Errorf("group %q: %s is of class %d, %s of class %d; a grouped evaluation scores a group of one label", gr.Names[g], e.name(gr, first), e.labels[first], e.name(gr, i), e.labels[i])
	}
	a, b := first*e.w, i*e.w
	if slices.Equal(e.truth[a:a+e.w], e.truth[b:b+e.w]) && slices.Equal(e.ignored[a:a+e.w], e.ignored[b:b+e.w]) {
		return nil
	}
	state := func(at, j int) string {
		switch {
		case labelset.Has(e.ignored[at:at+e.w], j):
			return "ignores it"
		case labelset.Has(e.truth[at:at+e.w], j):
			return "has it"
		}
		return "has it not"
	}
	for j := range e.k {
		if sa, sb := state(a, j), state(b, j); sa != sb {
			return fmt.Errorf("group %q: label %d: %s %s, %s %s; a grouped evaluation scores a group of one label set", gr.Names[g], j, e.name(gr, first), sa, e.name(gr, i), sb)
		}
	}
	return nil // unreachable: the words differ in some label
}

// combiner combines a group's logits: running log-sum-exps of its
// examples' log-probabilities, a class's or label's at a time.
type combiner struct {
	k        int
	hi, s    []float64 // the running maximum and the sum of exp(x − hi)
	hi2, s2  []float64 // multi-label: log σ(−z)'s
	out      []float64
	logits32 []float32
}

func newCombiner(k int) *combiner {
	return &combiner{k: k, hi: make([]float64, k), s: make([]float64, k), hi2: make([]float64, k), s2: make([]float64, k),
		out: make([]float64, k), logits32: make([]float32, k)}
}

// lseAdd adds x to the running log-sum-exp (hi, s): Σ exp(x) = exp(hi)·s
// without overflow.
func lseAdd(hi, s *float64, x float64) {
	switch {
	case *s == 0:
		*hi, *s = x, 1
	case x > *hi:
		*s = *s*math.Exp(*hi-x) + 1
		*hi = x
	default:
		*s += math.Exp(x - *hi)
	}
}

// logSigmoid is log σ(z) = −softplus(−z).
func logSigmoid(z float64) float64 { return -softplus(-z) }

// softplus is log(1 + eᶻ), without overflow: the binary cross-entropy's
// term, softplus(z) − t·z.
func softplus(z float64) float64 { return max(z, 0) + math.Log1p(math.Exp(-math.Abs(z))) }

// combine sets c.out and c.logits32 to the logits of a group of members
// (two or more) of logits (rows of k): logits whose softmax (a
// single-label model's; its largest 0) or sigmoids (multi) are the
// members' probabilities combined — their mean, or with max their
// largest.
func (c *combiner) combine(logits []float32, members []int, multi, useMax bool) {
	k := c.k
	clear(c.s)
	clear(c.s2)
	for _, i := range members {
		row := logits[i*k : (i+1)*k]
		if multi {
			// A label's probability σ(z) and its complement σ(−z) summed
			// apart: the combined logit log(Σσ(z) / Σσ(−z)) keeps both
			// ends' precision (the count cancels); its maximum is the
			// largest logit, σ being increasing.
			for j, z := range row {
				zf := float64(z)
				if useMax {
					if c.s[j] == 0 || zf > c.out[j] {
						c.out[j], c.s[j] = zf, 1
					}
					continue
				}
				lseAdd(&c.hi[j], &c.s[j], logSigmoid(zf))
				lseAdd(&c.hi2[j], &c.s2[j], logSigmoid(-zf))
			}
			continue
		}
		// The member's log-softmax, z − log Σ exp(z).
		mx := math.Inf(-1)
		for _, z := range row {
			mx = math.Max(mx, float64(z))
		}
		var se float64
		for _, z := range row {
			se += math.Exp(float64(z) - mx)
		}
		lse := mx + math.Log(se)
		for j, z := range row {
			ls := float64(z) - lse
			if useMax {
				if c.s[j] == 0 || ls > c.out[j] {
					c.out[j], c.s[j] = ls, 1
				}
				continue
			}
			lseAdd(&c.hi[j], &c.s[j], ls)
		}
	}
	switch {
	case multi && !useMax:
		for j := range c.out {
			c.out[j] = (c.hi[j] + math.Log(c.s[j])) - (c.hi2[j] + math.Log(c.s2[j]))
		}
	case !multi:
		if !useMax {
			// log Σ p — the mean's log but for log |members|, which the
			// softmax takes away.
			for j := range c.out {
				c.out[j] = c.hi[j] + math.Log(c.s[j])
			}
		}
		// Shifted so that the largest is 0: the float32 logits keep the
		// differences the softmax and the decisions depend on.
		top := slices.Max(c.out)
		for j := range c.out {
			c.out[j] -= top
		}
	}
	for j, z := range c.out {
		c.logits32[j] = clampFloat32(z)
	}
}

// loss is the loss of the combined logits (c.out) against the label of
// example i of e: the multi-label head's, or the softmax cross-entropy.
func (c *combiner) loss(e *examples, i int) float64 {
	if e.multi {
		return sigmoidLoss(c.out, e.truth[i*e.w:(i+1)*e.w], e.ignored[i*e.w:(i+1)*e.w])
	}
	var se float64
	for _, x := range c.out {
		se += math.Exp(x)
	}
	return math.Log(se) - c.out[e.labels[i]]
}

// CombineLogits returns the logits of a group of examples — rows, the
// examples' logits back to back, k each — whose softmax (a single-label
// model's) or sigmoids (multiLabel) are the examples' probabilities
// combined as Grouping.Combine says (useMax: CombineMax): what
// RunGrouped scores the group by, and what predict writes for it.
func CombineLogits(rows []float32, k int, multiLabel, useMax bool) []float32 {
	n := len(rows) / k
	if n == 1 {
		return slices.Clone(rows)
	}
	members := make([]int, n)
	for i := range members {
		members[i] = i
	}
	c := newCombiner(k)
	c.combine(rows, members, multiLabel, useMax)
	return c.logits32
}

// clampFloat32 is x as a float32, within the finite float32s.
func clampFloat32(x float64) float32 {
	return float32(math.Max(-math.MaxFloat32, math.Min(math.MaxFloat32, x)))
}
