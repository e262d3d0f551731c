package runtime

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// AvailableMemory returns the bytes this process may still allocate as far
// as the machine tells (see sysmem.Available); ok is false where that is
// unknown, and then no limit applies.
func AvailableMemory() (bytes int64, source string, ok bool) { return sysmem.Available() }

// memoryLimit is the limit a plan is held to: Options.MaxMemory when set,
// otherwise the machine's available memory (none where it is unknown).
func (p *Plan) memoryLimit() (int64, string, bool) {
	if p.opts.MaxMemory > 0 {
		return p.opts.MaxMemory, "", true
	}
	return AvailableMemory()
}

// limitText says what a limit is and where it comes from.
func limitText(limit int64, source string) string {
	if source == "" {
		return "the memory limit of " + graph.FormatBytes(float64(limit))
	}
	return fmt.Sprintf("the %s of memory available (%s)", graph.FormatBytes(float64(limit)), source)
}

// checkTensorSizes refuses, before any kernel is built, a plan one of whose
// run-time values alone exceeds the memory limit: a kernel's set-up (index
// tables of Expand, Gather, …) is as large as its output.
func (p *Plan) checkTensorSizes() error {
	limit, source, ok := p.memoryLimit()
	if !ok {
		return nil
	}
	for _, nd := range p.nodes {
		for _, t := range nd.out {
			if t != nil && !t.isConst && 4*int64(t.n) > limit {
				return fmt.Errorf("runtime: node %s: output %q of shape %v needs %s, over %s",
					nd.g, t.v.Name, t.shape, graph.FormatBytes(4*float64(t.n)), limitText(limit, source))
			}
		}
	}
	return nil
}

// checkPlanSize refuses a buffer plan (arena and workspace) that exceeds
// the memory limit, before it is allocated. A PlanOnly plan allocates
// neither and passes.
func (p *Plan) checkPlanSize(arenaElems int) error {
	if p.opts.PlanOnly {
		return nil
	}
	limit, source, ok := p.memoryLimit()
	if !ok {
		return nil
	}
	need := 4 * (int64(arenaElems) + int64(p.wsNeed))
	if need > limit {
		return fmt.Errorf("runtime: the buffer plan needs %s (arena %s, workspace %s), over %s",
			graph.FormatBytes(float64(need)), graph.FormatBytes(4*float64(arenaElems)), graph.FormatBytes(4*float64(p.wsNeed)),
			limitText(limit, source))
	}
	return nil
}
