package audit

import (
	"slices"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
)

// view loads spec, Fashion-MNIST images, as the fixture CNN's 1×28×28
// inputs with the data set's normalization.
func view(t *testing.T, spec string) *data.View {
	t.Helper()
	imgs, err := data.LoadString(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestWithCanaries: the training data followed by the included input
// canaries fills every sample, in any order and mix, exactly as its source
// does, with the canary's replaced label.
func TestWithCanaries(t *testing.T) {
	base := view(t, "idx:../../testdata/fmnist-small:limit=8")
	pool := view(t, "idx:../../testdata/fmnist-small:test:limit=6")
	c := &canarySet{pool: pool, idx: []int{4, 1, 5}, labels: []int64{7, 0, 2}, classes: 10}
	d := &withCanaries{base: base, canaries: c}
	if d.Len() != 11 || d.Label(9) != 0 || d.Label(3) != base.Label(3) || len(d.Labels()) != 11 {
		t.Fatalf("Len %d, labels %v", d.Len(), d.Labels())
	}
	const per = 28 * 28
	idx := []int{0, 9, 1, 2, 8, 10, 7}
	x := make([]float32, len(idx)*per)
	y := make([]int64, len(idx))
	if err := d.Fill(x, y, idx, nil); err != nil {
		t.Fatal(err)
	}
	one := make([]float32, per)
	oy := make([]int64, 1)
	for k, i := range idx {
		var src data.Dataset = base
		j, label := i, int64(0)
		if i >= 8 {
			src, j, label = pool, c.idx[i-8], c.labels[i-8]
		} else {
			label = int64(base.Label(i))
		}
		if err := src.Fill(one, oy, []int{j}, nil); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one, x[k*per:(k+1)*per]) || y[k] != label {
			t.Errorf("sample %d (index %d): image or label %d differs from its source's (label %d)", k, i, y[k], label)
		}
	}
	if err := d.Fill(x, nil, []int{11}, nil); err == nil {
		t.Error("index past the canaries: want an error")
	}
}
