//go:build linux && (amd64 || arm64)

package cuda

import (
	"strings"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestRegisteredDevice checks runtime.OpenDevice("cuda") with this
// package imported: the emulation under DPFINETUNE_CUDA=emulate, and
// without a driver the "not available" error that says why.
func TestRegisteredDevice(t *testing.T) {
	found := false
	for _, n := range runtime.DeviceNames() {
		found = found || n == DeviceName
	}
	if !found {
		t.Fatalf("DeviceNames() = %v, without %q", runtime.DeviceNames(), DeviceName)
	}
	t.Setenv(EnvLibCUDA, "")
	t.Setenv(EnvDriver, "")
	if _, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		_, err := runtime.OpenDevice(DeviceName)
		if err == nil || !strings.Contains(err.Error(), `device "cuda" is not available`) || !strings.Contains(err.Error(), "libcuda.so.1") {
			t.Errorf("OpenDevice(cuda) without a driver: %v", err)
		}
	}
	emuDriver(t) // skips without g++
	t.Setenv(EnvDriver, "emulate")
	d, err := runtime.OpenDevice(DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	cd, ok := d.(*Device)
	if !ok {
		t.Fatalf("OpenDevice(cuda) = %T", d)
	}
	cd.Close()
	// The emulation is device 0; it has no other.
	d, err = runtime.OpenDevice(DeviceName + ":0")
	if err != nil {
		t.Fatal(err)
	}
	d.(*Device).Close()
	_, err = runtime.OpenDevice(DeviceName + ":1")
	if want := `device "cuda:1" is not available: cuda: no GPU 1: the emulation (DPFINETUNE_CUDA=emulate) has one device, 0`; err == nil || err.Error() != want {
		t.Errorf("OpenDevice(cuda:1) on the emulation: %v, want %q", err, want)
	}
}
