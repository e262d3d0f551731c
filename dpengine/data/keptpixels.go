package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
	par "github.com/dpfinetune/dpfinetune/internal/workers"
)

// Kept pixels. Decoding a large folder or listing again for every run
// (CheXpert's 224 000 JPEGs, ImageNet's 1.28 million: minutes to an hour)
// is the same work each time: with DPFINETUNE_PIXEL_CACHE=DIR a folder's
// or listing's decoded, fitted pixels are kept in a file in DIR, and a
// later load of the same image files, fitted alike, maps them from it
// instead of decoding any. The samples are the decoded ones byte for byte
// (the same fingerprint, batches and model).
//
// A file is named by what was loaded — the scheme, every image's absolute
// path, in order, and the fit — and holds a digest of every image file's
// size, modification and status change times, device and inode, taken
// before it was decoded: a load whose files all stat alike reads it; any
// other decodes again and replaces it (a file changed while it was decoded
// stats other than its digest says, so it is never kept as current). A
// file that does not read back whole and consistent — its pixels' SHA-256
// included, checked at every load, all cores hashing — is decoded again
// too, never trusted. The files hold the private images' pixels: each is
// readable by its owner alone (mode 0600; the directory, where made here,
// 0700), and removing them is the owner's job — but for those no load has
// read for 30 days and the temporary files of loads that crashed, which a
// load that keeps a file removes (pruneKept).
const pixelCacheEnv = "DPFINETUNE_PIXEL_CACHE"

const (
	// keptMagic opens a kept pixel file; a new layout takes a new one.
	keptMagic = "dpfinetune kept pixels v1\n"
	// keptHeader is the bytes before the pixels: the magic and the
	// header's JSON, padded; the pixels start at a page.
	keptHeader = 4096
	// keptIndexEntry is an image's entry in the index at the file's end:
	// its pixels' offset (int64), height and width (int32), little-endian.
	keptIndexEntry = 16
)

// keptHead is a kept pixel file's header.
type keptHead struct {
	Fresh    string `json:"fresh"`    // the digest of the image files' stamps
	Pixels   string `json:"pixels"`   // keptDigest of the images' pixels
	Images   int    `json:"images"`   // how many
	Channels int    `json:"channels"` // 1 (all gray) or 3
	Index    int64  `json:"index"`    // where the index starts
	Size     int64  `json:"size"`     // the file's length
}

// keptFile is the kept pixel file of one load: where it is and the digest
// that makes it current.
type keptFile struct {
	dir, path string
	fresh     string
	images    int
}

// keptFileFor returns the kept pixel file of a load of the image files at
// paths — or of the series' projections members names — fitted by fit
// (nil where DPFINETUNE_PIXEL_CACHE is unset). It stats every file: a
// file it cannot stat is the decoder's to report.
func keptFileFor(scheme string, paths []string, fit Fit, members map[string][]string) (*keptFile, error) {
	dir := os.Getenv(pixelCacheEnv)
	if dir == "" {
		return nil, nil
	}
	// Made where missing, its owner's alone, as --keep-features's folder.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s=%s: %w", pixelCacheEnv, dir, err)
	}
	id, fresh := sha256.New(), sha256.New()
	fmt.Fprintf(id, "%s\x00%s\x00%+v\x00%d\x00", keptMagic, scheme, fit, len(paths))
	var b [8]byte
	put := func(v int64) {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		fresh.Write(b[:])
	}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		io.WriteString(id, abs+"\x00")
		files := []string{p}
		if ss, ok := members[p]; ok {
			files = ss // a series' projection: its slices
		}
		for _, f := range files {
			fi, err := os.Stat(f)
			if err != nil {
				return nil, nil // the decoder names the file
			}
			dev, ino, ctime := sysmem.FileIdentity(fi)
			put(fi.Size())
			put(fi.ModTime().UnixNano())
			put(ctime)
			put(dev)
			put(ino)
		}
	}
	return &keptFile{dir: dir, path: filepath.Join(dir, "pixels-"+hex.EncodeToString(id.Sum(nil))[:32]+".dpf"),
		fresh: hex.EncodeToString(fresh.Sum(nil)), images: len(paths)}, nil
}

// load makes m's samples the kept file's, mapped, where it is current and
// reads back whole; false where there is none such (m unchanged).
func (k *keptFile) load(m *Images) bool {
	f, err := os.Open(k.path)
	if err != nil {
		return false
	}
	defer f.Close()
	head, index, ok := k.readHead(f)
	if !ok {
		return false
	}
	b, err := sysmem.MapReadOnly(f, head.Size)
	if err != nil {
		return false
	}
	// The pixels read back as they were written, or not at all: a file
	// changed on disk is decoded again, never trained on.
	if keptDigest(index, head.Images, func(i int) []byte {
		off, h, w := keptEntry(index, i)
		return b[off : off+int64(head.Channels)*h*w]
	}) != head.Pixels {
		sysmem.Unmap(b)
		return false
	}
	m.channels = head.Channels
	m.samples = make([][]uint8, head.Images)
	m.sizes = make([][2]int32, head.Images)
	uniform := true
	var out []int // the places of files left out (empty)
	for i := range m.samples {
		off, h, w := keptEntry(index, i)
		n := int64(head.Channels) * h * w
		m.samples[i] = b[off : off+n : off+n]
		m.sizes[i] = [2]int32{int32(h), int32(w)}
		uniform = uniform && m.sizes[i] == m.sizes[0]
		if h == 0 {
			out = append(out, i)
		}
	}
	if uniform && head.Images > 0 {
		m.h, m.w, m.sizes = int(m.sizes[0][0]), int(m.sizes[0][1]), nil
	}
	m.leaveOut(out)
	m.mapped = newPixelMapping(b, k.dir)
	m.mapped.kept, m.mapped.reused = k.path, true
	// Used now: its modification time says so, so that pruning
	// (pruneKept) removes the files no load has read for a while.
	now := time.Now()
	os.Chtimes(k.path, now, now)
	return true
}

// readHead reads and checks f's header and index: the magic, this load's
// digest and image count, a consistent layout, and every image's pixels
// inside the pixel region — anything else is not trusted.
func (k *keptFile) readHead(f *os.File) (keptHead, []byte, bool) {
	var head keptHead
	fi, err := f.Stat()
	if err != nil || fi.Size() < keptHeader {
		return head, nil, false
	}
	buf := make([]byte, keptHeader)
	if _, err := f.ReadAt(buf, 0); err != nil || !bytes.HasPrefix(buf, []byte(keptMagic)) {
		return head, nil, false
	}
	js, _, _ := bytes.Cut(buf[len(keptMagic):], []byte{0})
	if json.Unmarshal(js, &head) != nil || head.Fresh != k.fresh || head.Images != k.images ||
		head.Channels != 1 && head.Channels != 3 || head.Size != fi.Size() || head.Index < keptHeader ||
		head.Index > head.Size || (head.Size-head.Index) != int64(head.Images)*keptIndexEntry {
		return head, nil, false
	}
	index := make([]byte, head.Size-head.Index)
	if _, err := f.ReadAt(index, head.Index); err != nil {
		return head, nil, false
	}
	for i := range head.Images {
		off, h, w := keptEntry(index, i)
		if h == 0 && w == 0 {
			continue // a file left out (Images.LeftOut)
		}
		if h <= 0 || w <= 0 || h*w > maxImagePixels || off < keptHeader || off > head.Index || int64(head.Channels)*h*w > head.Index-off {
			return head, nil, false
		}
	}
	return head, index, true
}

const (
	// keptMaxAge is how long a kept file no load has read stays: a
	// folder whose images changed, or a fit no longer used, leaves its old
	// file behind, removed once it is this old (pruneKept).
	keptMaxAge = 30 * 24 * time.Hour
	// keptTempMaxAge is how long a temporary file of a load that did not
	// finish (a crash while decoding) stays.
	keptTempMaxAge = 24 * time.Hour
)

// pruneKept removes from dir the kept pixel files that no load has read
// or written for keptMaxAge, and the temporary ones older than
// keptTempMaxAge — what is left of images that changed, of fits no longer
// used, and of loads that crashed — so that a cache left on does not grow
// without end. Files it cannot remove are left.
func pruneKept(dir string, now time.Time) {
	for pattern, age := range map[string]time.Duration{"pixels-*.dpf": keptMaxAge, ".pixels-*.tmp": keptTempMaxAge} {
		names, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, name := range names {
			if fi, err := os.Stat(name); err == nil && fi.Mode().IsRegular() && now.Sub(fi.ModTime()) > age {
				os.Remove(name)
			}
		}
	}
}

// keptEntry is image i's entry of a kept file's index: its pixels'
// offset, height and width (signed, as written: a hostile file's negative
// sizes are seen as such).
func keptEntry(index []byte, i int) (off, h, w int64) {
	e := index[i*keptIndexEntry:]
	return int64(binary.LittleEndian.Uint64(e)), int64(int32(binary.LittleEndian.Uint32(e[8:]))), int64(int32(binary.LittleEndian.Uint32(e[12:])))
}

// keptDigest is the digest of the n images whose index is index, image(i)
// giving image i's pixels: the SHA-256 of the index and of each image's
// SHA-256 in order, the images hashed in parallel.
func keptDigest(index []byte, n int, image func(i int) []byte) string {
	sums := make([][sha256.Size]byte, n)
	var next atomic.Int64
	var wg par.Group
	for range min(runtime.GOMAXPROCS(0), max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				sums[i] = sha256.Sum256(image(i))
			}
		}()
	}
	wg.Wait()
	h := sha256.New()
	h.Write(index)
	for _, s := range sums {
		h.Write(s[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// create opens the file a load of about est bytes of pixels is decoded
// into, to be kept (seal): a temporary file in the directory, renamed to
// the kept file's name once whole.
func (k *keptFile) create(est int64) (*pixelFile, error) {
	need := est + keptHeader + int64(k.images)*keptIndexEntry
	if free, err := sysmem.DiskFree(k.dir); err == nil && free < need {
		return nil, fmt.Errorf("%s=%s: the decoded images (about %d MiB) do not fit (%d MiB free)", pixelCacheEnv, k.dir, need>>20, free>>20)
	}
	f, err := os.CreateTemp(k.dir, ".pixels-*.tmp") // 0600: the owner's alone
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pixelCacheEnv, err)
	}
	p := &pixelFile{f: f, dir: k.dir, keep: k}
	p.size.Store(keptHeader)
	return p, nil
}

// seal writes the index of imgs (their final places in p) and the header,
// and puts the file in the kept file's place.
func (k *keptFile) seal(p *pixelFile, imgs []decoded, channels int) error {
	index := make([]byte, len(imgs)*keptIndexEntry)
	for i, d := range imgs {
		e := index[i*keptIndexEntry:]
		binary.LittleEndian.PutUint64(e, uint64(d.off))
		binary.LittleEndian.PutUint32(e[8:], uint32(d.h))
		binary.LittleEndian.PutUint32(e[12:], uint32(d.w))
	}
	at := p.put(index)
	// The pixels' digest, read back from the file in the index's order.
	var readErr error
	var mu sync.Mutex
	digest := keptDigest(index, len(imgs), func(i int) []byte {
		b := make([]byte, imgs[i].n)
		if _, err := p.f.ReadAt(b, imgs[i].off); err != nil {
			mu.Lock()
			readErr = errors.Join(readErr, err)
			mu.Unlock()
		}
		return b
	})
	if readErr != nil {
		return fmt.Errorf("keeping the decoded pixels in %s: %w", k.dir, readErr)
	}
	head, err := json.Marshal(keptHead{Fresh: k.fresh, Pixels: digest, Images: len(imgs), Channels: channels, Index: at, Size: at + int64(len(index))})
	if err != nil {
		return err
	}
	buf := make([]byte, keptHeader)
	if len(keptMagic)+len(head) >= keptHeader {
		return errors.New("kept pixels: header too long")
	}
	copy(buf[copy(buf, keptMagic):], head)
	if _, err := p.f.WriteAt(buf, 0); err != nil {
		p.err = errors.Join(p.err, err)
	}
	if p.err != nil {
		return fmt.Errorf("keeping the decoded pixels in %s: %w", k.dir, p.err)
	}
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("keeping the decoded pixels in %s: %w", k.dir, err)
	}
	if err := os.Rename(p.f.Name(), k.path); err != nil {
		return fmt.Errorf("keeping the decoded pixels: %w", err)
	}
	p.kept = k.path
	pruneKept(k.dir, time.Now())
	return nil
}

// PixelsKept returns the kept pixel file the images are mapped from
// (DPFINETUNE_PIXEL_CACHE), and whether it was read as an earlier load
// kept it (true) or written by this one; "" where they are not kept.
func (m *Images) PixelsKept() (path string, reused bool) {
	if m.mapped == nil {
		return "", false
	}
	return m.mapped.kept, m.mapped.reused
}
