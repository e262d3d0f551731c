package runtime

import (
	"strings"
	"testing"
)

// hostOnly is a device without the DP operations.
type hostOnly struct{ Device }

func (hostOnly) Name() string { return "host-only" }

// TestDPOpsOf: nil and the CPU give the CPU's operations; a device without
// them is an error that names it.
func TestDPOpsOf(t *testing.T) {
	for _, c := range []struct {
		name string
		dev  Device
		err  string
	}{
		{"nil", nil, ""},
		{"cpu", CPU{}, ""},
		{"without", hostOnly{CPU{}}, `device host-only does not implement the DP operations`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops, err := DPOpsOf(c.dev)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := ops.(CPU); !ok {
				t.Fatalf("got %T, want CPU", ops)
			}
			if ops.Workers() < 1 {
				t.Errorf("Workers() = %d", ops.Workers())
			}
		})
	}
}
