package sysmem

import "testing"

func TestAvailable(t *testing.T) {
	b, src, ok := Available()
	if !ok {
		t.Skip("no /proc/meminfo")
	}
	if b <= 0 || src == "" {
		t.Errorf("Available = %d, %q", b, src)
	}
}
