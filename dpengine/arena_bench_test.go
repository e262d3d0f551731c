package dpengine

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/zoo"
)

// BenchmarkArenaPlacement compiles each mode's runtime plan as the engine
// does (measureOptions: PlanOnly, nothing allocated) for the GPU
// benchmark models at 224², batch 32, 10 classes, attention's
// probabilities recomputed as on a GPU, and reports the arena the
// placement found (arena-MiB) beside the live bound no placement can go
// under (bound-MiB): docs/BENCHMARKS.md, "The arena placed in a few
// orders".
//
//	go test ./dpengine -run XXX -bench ArenaPlacement -benchtime 1x
func BenchmarkArenaPlacement(b *testing.B) {
	for _, name := range []string{"resnet50", "vit_b_16", "vgg16"} {
		m, err := zoo.Build(name, zoo.Options{NumClasses: 10, BatchNorm: true})
		if err != nil {
			b.Fatal(err)
		}
		g, err := graph.FromONNX(m)
		if err != nil {
			b.Fatal(err)
		}
		rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: []int64{3, 224, 224}, Batch: 32}})
		if err != nil {
			b.Fatal(err)
		}
		cg, err := rp.Compile(g, 32)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []Mode{NonDP, BK, Mixed} {
			b.Run(name+"/"+string(mode), func(b *testing.B) {
				opts := measureOptions(Config{Mode: mode}, rp, nil)
				opts.Probabilities = runtime.ProbabilitiesRecompute
				var p *runtime.Plan
				for range b.N {
					if p, err = runtime.Compile(cg, opts); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(p.ArenaBytes())/(1<<20), "arena-MiB")
				b.ReportMetric(float64(p.LiveBytes())/(1<<20), "bound-MiB")
			})
		}
	}
}
