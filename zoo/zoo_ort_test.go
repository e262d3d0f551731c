package zoo

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/orttest"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestOnnxruntime runs zoo models in onnxruntime (skipped when Node and the
// onnxruntime-node package cannot be had, and in -short mode). Each gets a
// batch of 3 whose third sample repeats the first: the logits must have
// shape (3, K), be finite, and the repeated sample's logits must equal the
// first's (the batch axis is symbolic and samples do not mix). Where
// BatchNorm is involved, the folded and the BatchNormalization graphs of the
// same seed must agree.
func TestOnnxruntime(t *testing.T) {
	if testing.Short() {
		t.Skip("onnxruntime runs skipped in -short")
	}
	c32 := []int64{3, 32, 32}
	type variant struct {
		spec *spec
		opts Options
	}
	reg := func(name string) *spec {
		s, err := lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name     string
		variants []variant // all must give the same logits
	}{
		{"resnet18-cifar", []variant{{reg("resnet18-cifar"), Options{}}, {reg("resnet18-cifar"), Options{BatchNorm: true}}}},
		{"densenet121", []variant{{reg("densenet121"), Options{InputShape: c32, NumClasses: 10}}}},
		{"mobilenet_v2", []variant{{reg("mobilenet_v2"), Options{InputShape: c32, NumClasses: 10}}}},
		{"squeezenet1_1", []variant{{reg("squeezenet1_1"), Options{InputShape: c32, NumClasses: 10}}}},
		{"vit-tiny-cifar", []variant{{reg("vit-tiny-cifar"), Options{}}}},
		{"deit_tiny_patch16_224", []variant{{reg("deit_tiny_patch16_224"), Options{InputShape: c32, NumClasses: 10}}}},
		{"tiny_beit", []variant{{tinySpec("tiny_beit", []int64{3, 64, 64}, func(b *builder, x tensor, k int64) tensor {
			return beit(b, x, k, vitCfg{16, 2, 3, 48, 96}, 0.1)
		}), Options{}}}},
		{"tiny_crossvit", []variant{{tinySpec("tiny_crossvit", []int64{3, 48, 48}, func(b *builder, x tensor, k int64) tensor {
			return crossViT(b, x, k, crossCfg{"tiny", [2]int64{24, 48}, [2]int64{2, 2}, 2, 2})
		}), Options{}}}},
		{"tiny_adaptive_matmul", []variant{{tinySpec("tiny_adaptive_matmul", []int64{3, 10, 10}, tinyAdaptive), Options{}}}},
		{"tiny_adaptive_expand", []variant{{tinySpec("tiny_adaptive_expand", []int64{3, 3, 3}, tinyAdaptive), Options{}}}},
	}
	dir := t.TempDir()
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var first []float32
			for vi, v := range c.variants {
				p, cnt, err := buildSpec(v.spec, v.opts, dataRandom)
				if err != nil {
					t.Fatal(err)
				}
				randomizeZeros(p) // ViT's zero head would make every logit 0
				path := filepath.Join(dir, c.name+string(rune('a'+vi))+".onnx")
				if err := onnx.NewModel(p).Save(path, nil); err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, uint64(ci)))
				per := int(cnt.Input[0] * cnt.Input[1] * cnt.Input[2])
				x := make([]float32, 3*per)
				for j := range x[:2*per] {
					x[j] = float32(rng.NormFloat64())
				}
				copy(x[2*per:], x[:per])
				y := orttest.Run(t, path, map[string]orttest.Tensor{InputName: {Shape: append([]int64{3}, cnt.Input...), Data: x}})[OutputName]
				k := cnt.Classes
				if !slices.Equal(y.Shape, []int64{3, int64(k)}) {
					t.Fatalf("%+v: output shape %v", v.opts, y.Shape)
				}
				var scale, diff float64
				for j := 0; j < k; j++ {
					if math.IsNaN(float64(y.Data[j])) || math.IsInf(float64(y.Data[j]), 0) {
						t.Fatalf("%+v: logits %v", v.opts, y.Data[:k])
					}
					scale = math.Max(scale, math.Abs(float64(y.Data[j])))
					diff = math.Max(diff, math.Abs(float64(y.Data[j]-y.Data[2*k+j])))
				}
				if scale == 0 || diff > 1e-5*scale+1e-6 {
					t.Errorf("%+v: the same sample at batch positions 0 and 2 gives logits differing by %g (up to %g)", v.opts, diff, scale)
				}
				if first == nil {
					first = y.Data
					continue
				}
				var d float64
				for j := range first {
					d = math.Max(d, math.Abs(float64(first[j]-y.Data[j])))
				}
				if d > 1e-5*scale+1e-6 {
					t.Errorf("%+v: logits differ from those of %+v by %g (up to %g)", v.opts, c.variants[0].opts, d, scale)
				}
			}
		})
	}
}

// randomizeZeros fills the all-zero float initializers of a classifier
// head ("head" in the name) with small seeded values.
func randomizeZeros(p *onnxpb.ModelProto) {
	rng := rand.New(rand.NewPCG(2, 3))
	for _, tp := range p.GetGraph().GetInitializer() {
		if tp.GetDataType() != int32(onnxpb.TensorProto_FLOAT) || !strings.Contains(tp.GetName(), "head") ||
			slices.ContainsFunc(tp.RawData, func(b byte) bool { return b != 0 }) {
			continue
		}
		for i := 0; i+4 <= len(tp.RawData); i += 4 {
			binary.LittleEndian.PutUint32(tp.RawData[i:], math.Float32bits(float32(0.02*rng.NormFloat64())))
		}
	}
}
