package data

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// Pixels on disk. A folder or listing whose fitted images would take more
// than half the memory available (ImageNet's 1.28 million images at
// 224×224 are 193 GB) keeps them in a file instead: each image's fitted
// pixels are written as it is decoded, and the file is mapped read-only
// once all are, so that a batch reads its images through the page cache
// and the kernel keeps in memory what fits. The file is removed as soon as
// it is open, so that no copy of the data outlives the process, crash
// included.
const (
	// pixelsEnv overrides the choice: "disk" always, "memory" never.
	pixelsEnv = "DPFINETUNE_PIXELS"
	// pixelDirEnv names the directory of the file; the temporary
	// directory by default.
	pixelDirEnv = "DPFINETUNE_PIXEL_DIR"
)

// pixelFile is the file of a load's pixels on disk: put appends an
// image's, from any goroutine, and mapAll maps them all.
type pixelFile struct {
	f    *os.File
	dir  string
	size atomic.Int64
	mu   sync.Mutex // serialises the first error
	err  error
	// keep is the kept pixel file this one becomes (keptpixels.go), nil
	// for an unlinked one; kept its path once sealed.
	keep *keptFile
	kept string
}

// pixelsOnDisk decides whether a load of n images, fitted by fit, keeps
// their pixels on disk (diskChoice), and opens the file where it does
// (nil where it does not).
func pixelsOnDisk(n int, fit Fit, budget int64) (*pixelFile, error) {
	mode := os.Getenv(pixelsEnv)
	switch mode {
	case "", "disk", "memory":
	default:
		return nil, fmt.Errorf("%s=%s: want disk or memory", pixelsEnv, mode)
	}
	disk, est := diskChoice(n, fit, budget, mode)
	if !disk {
		return nil, nil
	}
	return openPixelFile(est)
}

// diskChoice says whether n images fitted by fit go to disk, and their
// estimated bytes: as mode (pixelsEnv) says, else where the estimate — the
// input's window a fitted image, its shorter side's square and a third
// more a whole one — exceeds half of budget. Unfitted loads, whose sizes
// are unknown until decoded, stay in memory unless told.
func diskChoice(n int, fit Fit, budget int64, mode string) (bool, int64) {
	var est int64
	if fit.Height > 0 {
		c := int64(3)
		if fit.Gray {
			c = 1
		}
		per := c * int64(fit.Height) * int64(fit.Width)
		if fit.Whole {
			s := int64(fit.wholeShort())
			per = c * s * s * 4 / 3
		}
		est = int64(n) * per
	}
	return mode == "disk" || mode == "" && est > budget/2 && est > 0, est
}

// openPixelFile opens the pixel file of a load of about est bytes in
// DPFINETUNE_PIXEL_DIR, refusing a directory without room.
func openPixelFile(est int64) (*pixelFile, error) {
	dir := os.Getenv(pixelDirEnv)
	if dir == "" {
		dir = os.TempDir()
	}
	if free, err := sysmem.DiskFree(dir); err == nil && free < est {
		return nil, fmt.Errorf("the fitted images (about %d MiB) take more than half the memory available and do not fit in %s either (%d MiB free): set %s to a directory with room", est>>20, dir, free>>20, pixelDirEnv)
	}
	f, err := os.CreateTemp(dir, ".dpfinetune-pixels-*")
	if err != nil {
		return nil, fmt.Errorf("pixels on disk (%s): %w", pixelDirEnv, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("pixels on disk: %w", err)
	}
	return &pixelFile{f: f, dir: dir}, nil
}

// put writes pix at the end of the file and returns its offset; a write
// that fails (a full disk) is kept for mapAll to return.
func (p *pixelFile) put(pix []uint8) int64 {
	off := p.size.Add(int64(len(pix))) - int64(len(pix))
	if _, err := p.f.WriteAt(pix, off); err != nil {
		p.mu.Lock()
		if p.err == nil {
			p.err = fmt.Errorf("writing the fitted pixels to %s: %w", p.dir, err)
		}
		p.mu.Unlock()
	}
	return off
}

// read returns n bytes from off (a gray image's pixels, made RGB again).
func (p *pixelFile) read(off int64, n int) ([]uint8, error) {
	b := make([]uint8, n)
	if _, err := p.f.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("reading the fitted pixels back from %s: %w", p.dir, err)
	}
	return b, nil
}

// mapAll maps every byte put, read-only, and closes the file (the mapping
// keeps it).
func (p *pixelFile) mapAll() ([]byte, error) {
	defer p.f.Close()
	if p.err != nil {
		return nil, p.err
	}
	b, err := sysmem.MapReadOnly(p.f, p.size.Load())
	if err != nil {
		return nil, fmt.Errorf("pixels on disk in %s: %w", p.dir, err)
	}
	return b, nil
}

// pixelMapping is a load's pixels mapped from its file, shared by every
// Images made from the load (derive): unmapped once none holds it, so that
// a caller loading part after part (predict over a million photos) gives
// each part's disk back as it drops the part.
type pixelMapping struct {
	b   []byte
	dir string
	// kept is the kept pixel file mapped (keptpixels.go), "" for an
	// unlinked one; reused says an earlier load kept it.
	kept   string
	reused bool
}

// unmapped records the directories of the mappings released (tests: a
// test's own directory tells its mapping from another test's).
var unmapped sync.Map

func newPixelMapping(b []byte, dir string) *pixelMapping {
	pm := &pixelMapping{b: b, dir: dir}
	runtime.AddCleanup(pm, func(m pixelMapping) {
		sysmem.Unmap(m.b)
		unmapped.Store(m.dir, true)
	}, pixelMapping{b: b, dir: dir})
	return pm
}

// close drops the file (a load that failed), and a kept one's temporary
// file with it.
func (p *pixelFile) close() {
	if p != nil {
		p.f.Close()
		if p.keep != nil && p.kept == "" {
			os.Remove(p.f.Name())
		}
	}
}
