package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// EnvCache overrides the directory under which compiled modules are
// cached (default: os.UserCacheDir()/dpfinetune, or the temporary
// directory's dpfinetune-cache when there is no user cache directory).
const EnvCache = "DPFINETUNE_CUDA_CACHE"

// cacheDir returns the cache directory sub (created if needed): compiled
// modules are kept there under the hash of everything that decides their
// bytes, so that a source is compiled once per machine, not once per run.
func cacheDir(sub string) (string, error) {
	base := os.Getenv(EnvCache)
	if base == "" {
		if d, err := os.UserCacheDir(); err == nil {
			base = filepath.Join(d, "dpfinetune")
		} else {
			// No home (a bare CI job): the temporary directory still
			// caches within the machine's life.
			base = filepath.Join(os.TempDir(), "dpfinetune-cache")
		}
	}
	dir := filepath.Join(base, sub)
	err := os.MkdirAll(dir, 0o755)
	if err != nil && os.Getenv(EnvCache) == "" {
		// A home that cannot be written (a read-only container): the
		// temporary directory, per user, rather than no device at all.
		tmp := filepath.Join(os.TempDir(), fmt.Sprintf("dpfinetune-cache-%d", os.Getuid()), sub)
		if os.MkdirAll(tmp, 0o755) == nil {
			return tmp, nil
		}
	}
	if err != nil {
		return "", fmt.Errorf("cuda: module cache (set %s to a writable directory): %w", EnvCache, err)
	}
	return dir, nil
}

// cacheKey hashes the parts that decide a compiled module: the source,
// the compiler and its options, the device.
func cacheKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// writeAtomic writes data to path through a temporary file and a rename,
// so that a concurrent reader (another test binary, another run) sees the
// whole file or none.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
