package runtime

import (
	"fmt"
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

// TestOpenDeviceOrdinals: a backend registered with ordinals opens "name"
// as its device 0 and "name:N" as device N; a malformed ordinal, an
// ordinal on a device that takes none and an unknown name with one are
// errors that say so; the backend's own refusal names the device asked
// for.
func TestOpenDeviceOrdinals(t *testing.T) {
	var asked []int
	defer RegisterDeviceOrdinals("testgpu", func(n int) (Device, error) {
		asked = append(asked, n)
		if n > 1 {
			return nil, fmt.Errorf("only 2 visible")
		}
		return CPU{}, nil
	})()
	for _, name := range []string{"testgpu", "testgpu:0", "testgpu:1"} {
		if _, err := OpenDevice(name); err != nil {
			t.Errorf("OpenDevice(%q): %v", name, err)
		}
	}
	if fmt.Sprint(asked) != "[0 0 1]" {
		t.Errorf("ordinals asked %v, want [0 0 1]", asked)
	}
	for name, want := range map[string]string{
		"testgpu:2":   `device "testgpu:2" is not available: only 2 visible`,
		"testgpu:":    `device "testgpu:": want testgpu:N, N a device's ordinal from 0`,
		"testgpu:x":   `want testgpu:N`,
		"testgpu:-1":  `want testgpu:N`,
		"testgpu:+1":  `want testgpu:N`,
		"testgpu: 1":  `want testgpu:N`,
		"testgpu:1:2": `want testgpu:N`,
		"cpu:0":       `device "cpu:0": cpu has no ordinals (use --device cpu)`,
		"tpu:0":       `unknown device "tpu:0"`,
		"cuda:1":      `device "cuda" is not available: this build has no CUDA backend`,
	} {
		if _, err := OpenDevice(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenDevice(%q): %v, want an error containing %q", name, err, want)
		}
	}
	if fmt.Sprint(asked) != "[0 0 1 2]" {
		t.Errorf("ordinals asked %v, want [0 0 1 2]: a malformed name reached the backend", asked)
	}
}

// TestRegisterDeviceUndo: undoing a registration restores the registry,
// the reason a missing backend gives included.
func TestRegisterDeviceUndo(t *testing.T) {
	undo := RegisterDeviceOrdinals("cuda", func(int) (Device, error) { return CPU{}, nil })
	if _, err := OpenDevice("cuda:1"); err != nil {
		t.Fatal(err)
	}
	undo()
	if _, err := OpenDevice("cuda:1"); err == nil || !strings.Contains(err.Error(), "this build has no CUDA backend") {
		t.Errorf("after undo: %v", err)
	}
	if got := DeviceNames(); len(got) != 1 || got[0] != "cpu" {
		t.Errorf("after undo: DeviceNames() = %v", got)
	}
}
