package dptrain_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dptrain"
)

// TestParseWeights: --class-weight, --pos-weight and --threshold read a
// list in label order or NAME=V pairs (by name or label, the others at
// their default), class weights divided by the largest, thresholds also
// as one number for every label; what cannot be read is said.
func TestParseWeights(t *testing.T) {
	names := []string{"normal", "effusion", "mass"}
	for _, c := range []struct {
		name, spec string
		parse      func(string, []string, int) ([]float64, error)
		want       string // fmt.Sprint of the weights, or the error's words
	}{
		{"class list", "1,2,4", dptrain.ParseClassWeights, "[0.25 0.5 1]"},
		{"class pairs", "mass=0.5, effusion = 2", dptrain.ParseClassWeights, "[0.5 1 0.25]"},
		{"class by label", "0=0.1", dptrain.ParseClassWeights, "[0.1 1 1]"},
		{"class none", "", dptrain.ParseClassWeights, "[]"},
		{"class all zero", "0,0,0", dptrain.ParseClassWeights, "every weight is 0"},
		{"class balanced", "balanced", dptrain.ParseClassWeights, "would publish those counts"},
		{"class infinite", "1,inf,1", dptrain.ParseClassWeights, "must be finite and non-negative"},
		{"class not a pair", "mass=1,2", dptrain.ParseClassWeights, `"2" is not NAME=V`},
		{"pos kept as given", "0.5,3,0", dptrain.ParsePosWeight, "[0.5 3 0]"},
		{"pos pairs", "mass=5", dptrain.ParsePosWeight, "[1 1 5]"},
		{"pos unknown", "nodule=5", dptrain.ParsePosWeight, `no label "nodule" (its labels normal, effusion, mass)`},
		{"pos auto", "auto", dptrain.ParsePosWeight, "own label counts"},
		{"threshold one", "0.3", dptrain.ParseThresholds, "[0.3 0.3 0.3]"},
		{"threshold pairs", "mass=0.2", dptrain.ParseThresholds, "[0.5 0.5 0.2]"},
		{"threshold list", "0.1,0.2,0.9", dptrain.ParseThresholds, "[0.1 0.2 0.9]"},
		{"threshold 1", "1", dptrain.ParseThresholds, "outside (0, 1)"},
		{"threshold 0", "mass=0", dptrain.ParseThresholds, "outside (0, 1)"},
		{"threshold too few", "0.1,0.2", dptrain.ParseThresholds, "2 values for data of 3 labels"},
		{"class power ½", "1,4,16", func(s string, n []string, k int) ([]float64, error) {
			w, err := dptrain.ParseClassWeights(s, n, k)
			if err != nil {
				return nil, err
			}
			return dptrain.PowClassWeights(w, 0.5)
		}, "[0.25 0.5 1]"},
		{"class power 0", "1,4,16", func(s string, n []string, k int) ([]float64, error) {
			w, _ := dptrain.ParseClassWeights(s, n, k)
			return dptrain.PowClassWeights(w, 0)
		}, "[1 1 1]"},
		{"class power 5", "1,4,16", func(s string, n []string, k int) ([]float64, error) {
			w, _ := dptrain.ParseClassWeights(s, n, k)
			return dptrain.PowClassWeights(w, 5)
		}, "must be in [0, 4]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := c.parse(c.spec, names, len(names))
			got := fmt.Sprint(w)
			if err != nil {
				got = err.Error()
			}
			if w == nil && err == nil {
				got = "[]"
			}
			if !strings.Contains(got, c.want) {
				t.Errorf("%q: %s, want %s", c.spec, got, c.want)
			}
		})
	}
}
