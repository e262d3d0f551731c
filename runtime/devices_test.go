package runtime

import (
	"strings"
	"testing"
)

func TestOpenDevice(t *testing.T) {
	d, err := OpenDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.(CPU); !ok {
		t.Errorf("cpu opened %T", d)
	}
	for name, want := range map[string]string{
		"cuda": `device "cuda" is not available: this build has no CUDA backend`,
		"tpu":  `unknown device "tpu" (this build has: cpu)`,
		"":     `unknown device ""`,
		"CPU":  `unknown device "CPU"`,
	} {
		if _, err := OpenDevice(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenDevice(%q): %v, want an error containing %q", name, err, want)
		}
	}
	if got := DeviceNames(); len(got) != 1 || got[0] != "cpu" {
		t.Errorf("DeviceNames() = %v", got)
	}
}
