package cuda

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestProfile holds the operation profile (EnvProfile) to what ran: each
// operation and kernel once per call, in Close's table.
func TestProfile(t *testing.T) {
	t.Setenv(EnvProfile, "1")
	d := emuDevice(t)
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
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^cuda profile: operations, [0-9.]+ ms of [0-9.]+ ms since open$`,
		`(?m)^  Fill +2 calls +[0-9.]+ ms +[0-9.]+% +longest +[0-9.]+ ms +host +[0-9.]+ ms$`,
		`(?m)^  Scale +1 calls `,
		`(?m)^cuda profile: kernels, `,
		`(?m)^  fill_f +2 calls `,
		`(?m)^  scale +1 calls `,
		`(?m)^cuda profile: convolution library "[^"]*": 0 products, 0 shapes refused; 0 shapes' products measured against the GEMM path, 0 of 0 on it; 0 per-sample gradients measured against the unfolding, 0 of 0 on it$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("profile lacks %s:\n%s", want, out.String())
		}
	}
}
