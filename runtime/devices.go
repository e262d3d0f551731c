package runtime

import (
	"fmt"
	"sort"
	"strings"
)

// A device name is what --device takes. Backends register an opener under
// their name; names that a backend will use but that this build cannot
// open are listed with the reason, so that asking for them is a clear
// error rather than "unknown".
var (
	deviceOpeners = map[string]func() (Device, error){"cpu": func() (Device, error) { return CPU{}, nil }}
	deviceMissing = map[string]string{
		"cuda": "this build has no CUDA backend (import runtime/cuda to register it); use --device cpu",
	}
)

// RegisterDevice makes OpenDevice(name) call open: a backend in a package
// of its own (runtime/cuda, which imports runtime and so cannot be
// imported by it) registers itself from its init, and a binary that
// imports the backend's package offers the device. open's error is
// reported as the device being unavailable. It is not safe to call
// concurrently with OpenDevice (init time only).
func RegisterDevice(name string, open func() (Device, error)) {
	deviceOpeners[name] = open
	delete(deviceMissing, name)
}

// DeviceNames returns the names OpenDevice opens in this build, sorted.
func DeviceNames() []string {
	out := make([]string, 0, len(deviceOpeners))
	for n := range deviceOpeners {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// OpenDevice returns the device called name ("cpu"), or an error that
// says why it cannot be had: an unknown name, or a backend this build or
// this machine does not have. Callers check it before any other work.
func OpenDevice(name string) (Device, error) {
	if open, ok := deviceOpeners[name]; ok {
		d, err := open()
		if err != nil {
			return nil, fmt.Errorf("device %q is not available: %w", name, err)
		}
		return d, nil
	}
	if why, ok := deviceMissing[name]; ok {
		return nil, fmt.Errorf("device %q is not available: %s", name, why)
	}
	return nil, fmt.Errorf("unknown device %q (this build has: %s)", name, strings.Join(DeviceNames(), ", "))
}
