// Package dl opens shared libraries at run time (purego.Dlopen) so that a
// failure is reported with the loader's own message.
//
// The loader keeps its last error per thread (dlerror), and purego reads
// it in a second call: a goroutine moved to another thread between the two
// read another thread's, usually empty, message — "no CUDA driver: " with
// nothing after it, which CI saw once in TestLibraryDiscovery. Open holds
// the goroutine on its thread for both calls, and names the library where
// the message does not.
package dl

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// Open loads the shared library path (a file name the loader searches
// for, or a path) with the dlopen mode flags (purego.RTLD_NOW, …) and
// returns its handle.
func Open(path string, mode int) (uintptr, error) {
	runtime.LockOSThread()
	h, err := purego.Dlopen(path, mode)
	runtime.UnlockOSThread()
	if err != nil && !strings.Contains(err.Error(), path) {
		err = fmt.Errorf("%s: %w", path, err)
	}
	return h, err
}
