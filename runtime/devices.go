package runtime

import (
	"fmt"
	"sort"
	"strconv"
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
	// deviceOrdinals holds the openers of the names that take an
	// ordinal (RegisterDeviceOrdinals).
	deviceOrdinals = map[string]func(int) (Device, error){}
)

// RegisterDeviceOrdinals is RegisterDevice for a backend of several
// devices, numbered from 0: OpenDevice(name) calls open(0), and
// OpenDevice(name+":N") open(N) (a GPU's ordinal, as "cuda:1").
func RegisterDeviceOrdinals(name string, open func(ordinal int) (Device, error)) (undo func()) {
	undoOpener := RegisterDevice(name, func() (Device, error) { return open(0) })
	prev, had := deviceOrdinals[name]
	deviceOrdinals[name] = open
	return func() {
		undoOpener()
		delete(deviceOrdinals, name)
		if had {
			deviceOrdinals[name] = prev
		}
	}
}

// RegisterDevice makes OpenDevice(name) call open: a backend in a package
// of its own (runtime/cuda, which imports runtime and so cannot be
// imported by it) registers itself from its init, and a binary that
// imports the backend's package offers the device. open's error is
// reported as the device being unavailable. It is not safe to call
// concurrently with OpenDevice (init time only). undo restores the
// registry as it was (tests that register a device of their own).
func RegisterDevice(name string, open func() (Device, error)) (undo func()) {
	prev, had := deviceOpeners[name]
	why, missing := deviceMissing[name]
	deviceOpeners[name] = open
	delete(deviceMissing, name)
	return func() {
		delete(deviceOpeners, name)
		if had {
			deviceOpeners[name] = prev
		}
		if missing {
			deviceMissing[name] = why
		}
	}
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

// OpenDevice returns the device called name ("cpu", "cuda", or "cuda:1"
// for a backend's device of that ordinal), or an error that says why it
// cannot be had: an unknown name, an ordinal where the backend takes none
// or one that is no number, or a backend this build or this machine does
// not have. Callers check it before any other work.
func OpenDevice(name string) (Device, error) {
	if base, ord, ok := strings.Cut(name, ":"); ok {
		open, ordinals := deviceOrdinals[base]
		_, known := deviceOpeners[base]
		_, missing := deviceMissing[base]
		switch {
		case ordinals:
			n, err := strconv.Atoi(ord)
			if err != nil || n < 0 || strings.TrimSpace(ord) != ord || ord[0] == '+' {
				return nil, fmt.Errorf("device %q: want %s:N, N a device's ordinal from 0", name, base)
			}
			d, err := open(n)
			if err != nil {
				return nil, fmt.Errorf("device %q is not available: %w", name, err)
			}
			return d, nil
		case known:
			return nil, fmt.Errorf("device %q: %s has no ordinals (use --device %s)", name, base, base)
		case missing:
			return OpenDevice(base) // why the backend is missing
		}
		return nil, fmt.Errorf("unknown device %q (this build has: %s)", name, strings.Join(DeviceNames(), ", "))
	}
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
