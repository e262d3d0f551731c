package main

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// The search's runs: their files, seeds, scores and the chosen one's
// metadata (tune.go drives them).

// runSeed is the seed of run i of a search seeded with seed.
func runSeed(seed uint64, i int) uint64 { return tuneRNG(&seed, 1<<32+uint64(i)).Uint64() }

// tuneRNG is the search's randomness: stream 0 draws the number of runs
// and their settings, stream i+1 the noise of run i's score, stream 2³²+i
// run i's seed. Seeded (and labelled so) only for reproducibility; else
// from the operating system's secure source.
func tuneRNG(seed *uint64, stream uint64) *rand.Rand {
	if seed != nil {
		return rand.New(rand.NewPCG(*seed, 0x74756e65^stream))
	}
	var key [32]byte
	if _, err := crand.Read(key[:]); err != nil {
		// crypto/rand does not fail on the systems Go supports.
		panic(err)
	}
	binary.LittleEndian.PutUint64(key[:8], binary.LittleEndian.Uint64(key[:8])^stream)
	return rand.New(rand.NewChaCha8(key))
}

// saveTuneState writes the search's state, atomically: an interrupted
// write leaves the previous one.
func saveTuneState(path string, st tuneState) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return atomicfile.WriteBytes(path, append(b, '\n'))
}

// runBase is the path of run i's files in the search's folder, less their
// extension.
func runBase(work string, i int) string {
	return filepath.Join(work, fmt.Sprintf("dpfinetune-run%d", i+1))
}

// cleanWork removes the search's files from its folder, and the folder
// where nothing else is left in it (a --work folder of the user's keeps
// what else it holds).
func cleanWork(work string) {
	os.Remove(filepath.Join(work, "search.json"))
	os.Remove(filepath.Join(work, "dry-run.json"))
	if runs, err := filepath.Glob(filepath.Join(work, "dpfinetune-run*")); err == nil {
		for _, f := range runs {
			os.Remove(f)
		}
	}
	os.Remove(work)
}

// removeRun removes a run's files: its model (and external data), report,
// checkpoint and log.
func removeRun(base string) {
	for _, ext := range []string{".onnx", ".onnx.data", ".json", ".ckpt", ".log"} {
		os.Remove(base + ext)
	}
}

// checkRunPhases holds a run's report to the mechanism the search
// accounted: a run that spent otherwise would void its bound.
func checkRunPhases(report string, want accountant.Phase) error {
	b, err := os.ReadFile(report)
	if err != nil {
		return err
	}
	var rep dptrain.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", report, err)
	}
	var steps int
	for _, p := range rep.Phases {
		if p.Sigma != want.Sigma || p.SampleRate != want.SampleRate {
			return fmt.Errorf("the run spent σ = %v at sample rate %v, not the search's σ = %v at %v", p.Sigma, p.SampleRate, want.Sigma, want.SampleRate)
		}
		steps += p.Steps
	}
	if steps != want.Steps {
		return fmt.Errorf("the run took %d steps, not the search's %d", steps, want.Steps)
	}
	return nil
}

// classifyRun says how much of each of v's examples a run's model gets
// right (dptrain.Evaluator.Right; multi-label where v is), or with ranking
// how well it ranks their labels (RankingPrecision).
func classifyRun(dev runtime.Device, model string, v dataView, batch int, ranking bool) ([]float64, error) {
	lm, err := loadGraph(model)
	if err != nil {
		return nil, err
	}
	if err := lm.dynamicBatch(); err != nil {
		return nil, err
	}
	shape := v.SampleShape()
	sample := make([]int64, len(shape))
	for i, d := range shape {
		sample[i] = int64(d)
	}
	ev, err := dptrain.NewEvaluatorOn(dev, lm.g, sample, min(batch, max(v.Len(), 1)))
	if err != nil {
		return nil, err
	}
	if err := ev.SetMultiLabel(data.IsMultiLabel(v)); err != nil {
		return nil, err
	}
	if ranking {
		return ev.RankingPrecision(v)
	}
	return ev.Right(v)
}

// unitScore is a run's score on v from how much of each example it gets
// right (each in [0, 1]): their sum, or at user level the sum over users
// of each one's mean (each unit's score in [0, 1], so that a unit moves
// the score by at most 1).
// weighByClass returns each of v's examples' right answer weighed by its
// class's weight w (each at most 1: an example's part stays in [0, 1]).
func weighByClass(correct []float64, v dataView, w []float64) []float64 {
	out := make([]float64, len(correct))
	for i, c := range correct {
		if l := v.Label(i); l >= 0 && l < len(w) {
			out[i] = c * w[l]
		}
	}
	return out
}

func unitScore(correct []float64, v dataView, unit string) (float64, error) {
	if len(correct) != v.Len() {
		return 0, fmt.Errorf("%d examples classified of %d to score", len(correct), v.Len())
	}
	var score float64
	if users, n := data.UsersOf(v); unit == dptrain.PrivacyUnitUser && n > 0 {
		right, all := make([]float64, n), make([]float64, n)
		for i, u := range users {
			all[u]++
			right[u] += correct[i]
		}
		for u := range all {
			if all[u] > 0 {
				score += right[u] / all[u]
			}
		}
		return score, nil
	}
	for _, c := range correct {
		score += c
	}
	return score, nil
}

// setSearchMetadata records the search's guarantee in the chosen model:
// its ε and δ are the search's, the run's own ε kept beside them.
func setSearchMetadata(p *onnxpb.ModelProto, st tuneState, chosen string, ranking bool) {
	score := "the share of each unit's examples got right; of a multi-label example, of its labels"
	if ranking {
		score = "each unit's examples' label ranking average precision"
	}
	kv := map[string]string{
		"epsilon":     fmt.Sprint(st.Plan.Epsilon),
		"delta":       fmt.Sprint(st.Plan.Delta),
		"run_epsilon": fmt.Sprint(st.Plan.RunEpsilon),
		"search":      fmt.Sprintf("the best of K runs (K secret, drawn with mean %.3g, η = %g) by noisy held-out score (%s) on %s: %s", st.Plan.MeanTrials, st.Plan.Trials.Eta, score, st.Spec, chosen),
	}
	for _, e := range p.MetadataProps {
		k := strings.TrimPrefix(e.GetKey(), dptrain.MetaPrefix)
		if v, ok := kv[k]; ok && k != e.GetKey() {
			e.Value = proto.String(v)
			delete(kv, k)
		}
	}
	for _, k := range []string{"epsilon", "delta", "run_epsilon", "search"} {
		if v, ok := kv[k]; ok {
			p.MetadataProps = append(p.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(dptrain.MetaPrefix + k), Value: proto.String(v)})
		}
	}
}
