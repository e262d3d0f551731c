package dptrain

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestUserRows: a user's k rows are its own examples, each ⌊k/m⌋ or
// ⌈k/m⌉ times (all of them as evenly as k allows), the remainder a
// uniform draw without replacement (each example in it with probability
// (k mod m)/m over 20000 draws, within 5 standard deviations), and the
// draw allocates nothing.
func TestUserRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, m := range []int{1, 2, 3, 5, 8} {
		members := make([]int32, m)
		for j := range members {
			members[j] = int32(100 + 7*j)
		}
		for _, k := range []int{1, 2, 4, 7, 16} {
			const draws = 20000
			extra := make(map[int]int)
			rows := make([]int, 0, k)
			for range draws {
				rows = userRows(rows[:0], members, k, rng)
				if len(rows) != k {
					t.Fatalf("m=%d k=%d: %d rows", m, k, len(rows))
				}
				count := map[int]int{}
				for _, r := range rows {
					count[r]++
				}
				for _, e := range members {
					c := count[int(e)]
					if c != k/m && c != k/m+1 {
						t.Fatalf("m=%d k=%d: example %d read %d times in %v", m, k, e, c, rows)
					}
					if c > k/m {
						extra[int(e)]++
					}
					delete(count, int(e))
				}
				if len(count) != 0 {
					t.Fatalf("m=%d k=%d: rows %v read examples not the user's", m, k, rows)
				}
			}
			p := float64(k%m) / float64(m)
			sd := math.Sqrt(p * (1 - p) / draws)
			for _, e := range members {
				if f := float64(extra[int(e)]) / draws; math.Abs(f-p) > 5*sd+1e-12 {
					t.Errorf("m=%d k=%d: example %d in the remainder %.4f of draws, want %.4f", m, k, e, f, p)
				}
			}
		}
	}
	members := []int32{1, 2, 3, 4, 5, 6, 7}
	rows := make([]int, 0, 16)
	if a := testing.AllocsPerRun(100, func() { rows = userRows(rows[:0], members, 10, rng) }); a != 0 {
		t.Errorf("userRows allocates %v times a call", a)
	}
}

// TestGroupPrivacy: one example is the guarantee itself; k examples
// multiply ε by k and δ by k·e^((k−1)ε); the note says so, or that a δ of
// 1 or more protects nothing.
func TestGroupPrivacy(t *testing.T) {
	for _, c := range []struct {
		eps, delta float64
		k          int
		ge, gd     float64
	}{
		{3, 1e-5, 1, 3, 1e-5},
		{3, 1e-5, 4, 12, 4 * math.Exp(9) * 1e-5},
		{0.5, 1e-6, 3, 1.5, 3 * math.Exp(1) * 1e-6},
	} {
		ge, gd := groupPrivacy(c.eps, c.delta, c.k)
		if math.Abs(ge-c.ge) > 1e-12 || math.Abs(gd-c.gd) > 1e-12*c.gd {
			t.Errorf("(%g, %g), k = %d: (%g, %g), want (%g, %g)", c.eps, c.delta, c.k, ge, gd, c.ge, c.gd)
		}
	}
	if n := groupNote(3, 1e-5, 4); !strings.Contains(n, "ε = 12, δ = 0.324") {
		t.Errorf("note %q", n)
	}
	if n := groupNote(3, 1e-5, 9); !strings.Contains(n, "not protected at all") {
		t.Errorf("note %q", n)
	}
}
