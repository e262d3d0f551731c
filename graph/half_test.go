package graph

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

func TestHalfToFloat32(t *testing.T) {
	cases := []struct {
		h    uint16
		want float32
	}{
		{0x0000, 0},
		{0x3c00, 1},
		{0xc000, -2},
		{0x3555, 0.333251953125},
		{0x7bff, 65504},
		{0x0400, 1.0 / (1 << 14)},    // smallest normal
		{0x0001, 1.0 / (1 << 24)},    // smallest subnormal
		{0x03ff, 1023.0 / (1 << 24)}, // largest subnormal
		{0x8001, -1.0 / (1 << 24)},   // negative subnormal
		{0x7c00, float32(math.Inf(1))},
		{0xfc00, float32(math.Inf(-1))},
	}
	for _, c := range cases {
		if got := HalfToFloat32(c.h); got != c.want {
			t.Errorf("%#04x: %g, want %g", c.h, got, c.want)
		}
	}
	if got := HalfToFloat32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("0x8000: %g, want -0", got)
	}
	if got := HalfToFloat32(0x7e01); !math.IsNaN(float64(got)) || math.Float32bits(got) != 0x7f800000|0x201<<13 {
		t.Errorf("0x7e01: %g (%#08x), want a NaN keeping its payload", got, math.Float32bits(got))
	}
}

// TestWidenHalf: float16 and bfloat16 tensors widen element by element
// (bfloat16 is float32's upper half).
func TestWidenHalf(t *testing.T) {
	raw := func(hs ...uint16) []byte {
		b := make([]byte, 2*len(hs))
		for i, h := range hs {
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		return b
	}
	f16 := widenHalf(&Tensor{DType: Float16, Shape: []int64{3}, Raw: raw(0x3c00, 0xc000, 0x0001)})
	bf16 := widenHalf(&Tensor{DType: BFloat16, Shape: []int64{3}, Raw: raw(0x3f80, 0xc000, 0x4049)})
	for _, c := range []struct {
		got, want []float32
	}{
		{f16.F32, []float32{1, -2, 1.0 / (1 << 24)}},
		{bf16.F32, []float32{1, -2, math.Float32frombits(0x40490000)}},
	} {
		if len(c.got) != len(c.want) {
			t.Fatalf("%v, want %v", c.got, c.want)
		}
		for i := range c.want {
			if c.got[i] != c.want[i] {
				t.Errorf("%v, want %v", c.got, c.want)
			}
		}
	}
	if f16.DType != Float32 || len(f16.Shape) != 1 || f16.Shape[0] != 3 {
		t.Errorf("widened tensor %v %v", f16.DType, f16.Shape)
	}
}

// TestUpcastHalfMemory: widening that would take more than the memory
// available is refused, and the graph left as it was.
func TestUpcastHalfMemory(t *testing.T) {
	w := &Value{Name: "w", DType: Float16, Shape: StaticShape(1000), Initializer: true,
		Const: &Tensor{DType: Float16, Shape: []int64{1000}, Raw: make([]byte, 2000)}}
	g := &Graph{Values: map[string]*Value{"w": w}, Initializers: []*Value{w}}
	_, err := g.upcastHalf(func() (int64, string, bool) { return 3999, "test", true })
	if err == nil || !strings.Contains(err.Error(), "more than the 3.9 KiB of memory available (test)") || w.DType != Float16 || w.Const.DType != Float16 {
		t.Fatalf("error %v; the weight %v %v", err, w.DType, w.Const.DType)
	}
	types, err := g.upcastHalf(func() (int64, string, bool) { return 4000, "test", true })
	if err != nil || len(types) != 1 || types[0] != Float16 || w.DType != Float32 || len(w.Const.F32) != 1000 {
		t.Fatalf("%v %v; the weight %v %v", types, err, w.DType, w.Const.DType)
	}
}

// TestNarrowToHalf: every float16 and bfloat16 value comes back from
// float32 as itself, and values between them round to the nearest, ties
// to even, past the range to infinity, below half the smallest subnormal
// to zero.
func TestNarrowToHalf(t *testing.T) {
	for h := range 1 << 16 {
		f := HalfToFloat32(uint16(h))
		if f != f {
			if g := Float32ToHalf(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x → %#04x", h, g)
			}
			continue
		}
		if g := Float32ToHalf(f); g != uint16(h) {
			t.Fatalf("half %#04x (%v) → %#04x", h, f, g)
		}
		bf := math.Float32frombits(uint32(h) << 16)
		if bf != bf {
			if g := Float32ToBFloat16(bf); g&0x7f80 != 0x7f80 || g&0x7f == 0 {
				t.Fatalf("bfloat16 NaN %#04x → %#04x", h, g)
			}
			continue
		}
		if g := Float32ToBFloat16(bf); g != uint16(h) {
			t.Fatalf("bfloat16 %#04x → %#04x", h, g)
		}
	}
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{1 + 1.0/2048, 0x3c00},        // tie, to even (down)
		{1 + 3.0/2048, 0x3c02},        // tie, to even (up)
		{1 + 1.0/2048 + 1e-7, 0x3c01}, // past the tie
		{65504, 0x7bff},
		{65519, 0x7bff},
		{65520, 0x7c00}, // the tie with the next binade: infinity
		{-1e10, 0xfc00},
		{1.0 / (1 << 24), 0x0001},  // smallest subnormal
		{1.0 / (1 << 25), 0x0000},  // half of it: a tie, to even (zero)
		{1.5 / (1 << 24), 0x0002},  // 1.5 steps: a tie, to even (2)
		{0x3ff.8p-24, 0x0400},      // the largest subnormal's carry: the smallest normal
		{-1.0 / (1 << 26), 0x8000}, // signed zero
		{float32(math.Inf(1)), 0x7c00},
	} {
		if g := Float32ToHalf(c.f); g != c.want {
			t.Errorf("Float32ToHalf(%g) = %#04x, want %#04x", c.f, g, c.want)
		}
	}
	if g := Float32ToBFloat16(math.Float32frombits(0x3f808000)); g != 0x3f80 { // tie, even
		t.Errorf("bfloat16 tie down: %#04x", g)
	}
	if g := Float32ToBFloat16(math.Float32frombits(0x3f818000)); g != 0x3f82 { // tie, even
		t.Errorf("bfloat16 tie up: %#04x", g)
	}
}
