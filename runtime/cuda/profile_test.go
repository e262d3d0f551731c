package cuda

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestProfile holds the operation profile (EnvProfile) to what ran: each
// operation and kernel once per call, in Close's table, and the shapes the
// convolution library refused.
func TestProfile(t *testing.T) {
	t.Setenv(EnvProfile, "1")
	t.Run("emulation", func(t *testing.T) { checkProfile(t, emuDevice(t)) })
	t.Run("cuDNN stand-in", func(t *testing.T) {
		d, err := New(fakeDriver(t))
		if err != nil {
			t.Fatal(err)
		}
		if d.noDNN {
			t.Fatal("the stand-in driver has no convolution library")
		}
		checkProfile(t, d)
	})
}

func checkProfile(t *testing.T, d *Device) {
	if d.prof == nil {
		t.Fatalf("%s=1 and no profile", EnvProfile)
	}
	var out bytes.Buffer
	d.prof.out = &out
	p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
	x := place(p, make([]float32, 300))
	d.Scale(1, x)
	d.ResetProfile() // that Scale is forgotten: the table's has one call
	d.Fill(2, x)
	d.Fill(3, x)
	d.Scale(0.5, x)
	if got := fetch(p, x); got[299] != 1.5 {
		t.Fatalf("x[299] = %v, want 1.5", got[299])
	}
	// Convolutions are also tabled by shape, the operation's calls each.
	s := &runtime.ConvShape{N: 2, C: 3, M: 4, In: []int{9, 8}, Kernel: []int{3, 3}, Strides: []int{2, 1}, Pads: []int{1, 1, 0, 1}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	cx, cw, cy := place(p, make([]float32, 2*3*9*8)), place(p, make([]float32, 4*3*9)), place(p, make([]float32, 2*4*s.T))
	d.Conv(s, cx, cw, nil, cy, nil)
	d.Conv(s, cx, cw, nil, cy, nil)
	d.ConvWeightGrad(s, cx, cy, cw, nil)
	d.Fill(0, x) // after a convolution: not one
	// cuDNN, where it is loaded, refuses the shape (its pads differ at
	// the two ends of an axis): the library line counts it and names it.
	refused := `0 shapes refused`
	if !d.noDNN {
		refused = `1 shapes refused; .*\n  refused n=2 c=3 in=9x8 m=4 k=3x3 s=2x1 p=1,1,0,1 d=1x1 g=1: .*not the same at both ends`
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^cuda profile: operations, [0-9.]+ ms of [0-9.]+ ms since open$`,
		`(?m)^  Fill +3 calls +[0-9.]+ ms +[0-9.]+% +longest +[0-9.]+ ms +host +[0-9.]+ ms$`,
		`(?m)^  Scale +1 calls `,
		`(?m)^cuda profile: kernels, `,
		`(?m)^cuda profile: convolutions by shape, `,
		`(?m)^  Conv n=2 c=3 in=9x8 m=4 k=3x3 s=2x1 p=1,1,0,1 d=1x1 g=1 +2 calls `,
		`(?m)^  ConvWeightGrad n=2 c=3 in=9x8 m=4 k=3x3 s=2x1 p=1,1,0,1 d=1x1 g=1 +1 calls `,
		`(?m)^  fill_f +3 calls `,
		`(?m)^  scale +1 calls `,
		`(?m)^cuda profile: convolution library "[^"]*": 0 products, ` + refused,
		`(?m)^cuda profile: convolution library .*; 0 shapes' products measured against the GEMM path, 0 of 0 on it; 0 per-sample gradients measured against the unfolding, 0 of 0 on it$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("profile lacks %s:\n%s", want, out.String())
		}
	}
	if n := regexp.MustCompile(`(?m)^  (Fill|Scale) n=`).FindAllString(out.String(), -1); len(n) != 0 {
		t.Errorf("other operations tabled by a convolution's shape: %q", n)
	}
}
