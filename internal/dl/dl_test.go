package dl

import (
	"strings"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
)

// TestOpenNamesTheLibrary: a library that does not load is named in the
// error, from many goroutines at once (which purego's two calls alone
// answered with another thread's empty message now and then); one that
// loads gives a handle.
func TestOpenNamesTheLibrary(t *testing.T) {
	if _, err := Open("libc.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		t.Skipf("no libc.so.6 to load: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 64)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Open("libdpfinetune-absent.so.13", purego.RTLD_NOW|purego.RTLD_LOCAL)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "libdpfinetune-absent.so.13") {
			t.Fatalf("goroutine %d: %v, want an error naming the library", i, err)
		}
	}
}
