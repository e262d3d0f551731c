package data

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
)

// ClipView is a video or volume model's dataset of DICOM files: each file
// a clip (C,T,H,W) of T of its frames (Fit.Clip, clipFrames), each frame
// preprocessed as an image View preprocesses it — resized, normalised,
// and augmented, one draw a clip, so that a clip's frames are cropped and
// flipped alike. Build it with NewClipView over the View of the frames
// (LoadFitted with Fit.Clip T gives them T a file, in order); it is
// read-only and safe for concurrent use.
type ClipView struct {
	frames *View
	t      int
	shape  []int   // (C, T, H, W)
	labels []int64 // a clip's: its first frame's
	// scratch holds a frame's (C,H,W) values while a clip of several
	// channels is laid out channel-major (Fill does not allocate).
	scratch sync.Pool
}

// NewClipView makes clips of t consecutive samples of frames.
func NewClipView(frames *View, t int) (*ClipView, error) {
	if t < 1 || frames.Len()%t != 0 {
		return nil, fmt.Errorf("data: clips of %d frames from %d", t, frames.Len())
	}
	s := frames.SampleShape()
	v := &ClipView{frames: frames, t: t, shape: []int{s[0], t, s[1], s[2]}}
	v.labels = make([]int64, frames.Len()/t)
	for i := range v.labels {
		v.labels[i] = int64(frames.Label(i * t))
	}
	plane := s[0] * s[1] * s[2]
	v.scratch.New = func() any { b := make([]float32, plane); return &b }
	return v, nil
}

// Frames returns the view of the clips' frames, T a clip in order.
func (v *ClipView) Frames() *View { return v.frames }

// Len returns the number of clips.
func (v *ClipView) Len() int { return len(v.labels) }

// NumClasses returns the number of classes.
func (v *ClipView) NumClasses() int { return v.frames.NumClasses() }

// Label returns the label of clip i.
func (v *ClipView) Label(i int) int { return int(v.labels[i]) }

// Labels returns a copy of all labels, indexed by clip.
func (v *ClipView) Labels() []int64 { return append([]int64(nil), v.labels...) }

// MultiLabel reports whether the labels are label sets.
func (v *ClipView) MultiLabel() bool { return v.frames.MultiLabel() }

// UncertainTargets is the frames' UncertainTargets.
func (v *ClipView) UncertainTargets() []float64 { return v.frames.UncertainTargets() }

// SampleShape returns the shape of one clip, (C,T,H,W). The caller must
// not modify it.
func (v *ClipView) SampleShape() []int { return v.shape }

// Classes returns the class names.
func (v *ClipView) Classes() []string { return v.frames.Classes() }

// CheckSources is the frames' CheckSources.
func (v *ClipView) CheckSources() error { return v.frames.CheckSources() }

// Fingerprint is the SHA-256 (hex) of the frames as loaded and the clips'
// length: the same files made clips of another length are other data.
func (v *ClipView) Fingerprint() string {
	h := sha256.Sum256(fmt.Appendf(nil, "clips of %d\x00%s", v.t, v.frames.Fingerprint()))
	return hex.EncodeToString(h[:])
}

// SamplePath returns the file clip i was read from.
func (v *ClipView) SamplePath(i int) string { return v.frames.SamplePath(i * v.t) }

// SampleSeries returns the series clip i is of (Images.SampleSeries).
func (v *ClipView) SampleSeries(i int) string { return v.frames.SampleSeries(i * v.t) }

// NumUsers is the frames' NumUsers.
func (v *ClipView) NumUsers() int { return v.frames.NumUsers() }

// UserOf returns the user of clip i.
func (v *ClipView) UserOf(i int) int { return v.frames.UserOf(i * v.t) }

// UserName is the frames' UserName.
func (v *ClipView) UserName(u int) string { return v.frames.UserName(u) }

// PixelsOnDisk is the frames' PixelsOnDisk.
func (v *ClipView) PixelsOnDisk() (int64, string) { return v.frames.PixelsOnDisk() }

// PixelsKept is the frames' PixelsKept.
func (v *ClipView) PixelsKept() (string, bool) { return v.frames.PixelsKept() }

// LeftOut is the frames' LeftOut.
func (v *ClipView) LeftOut() []string { return v.frames.LeftOut() }

// Preprocess is the frames' preprocessing.
func (v *ClipView) Preprocess() Preprocess { return v.frames.Preprocess() }

// Fill implements Dataset: the clips at indices as an (N,C,T,H,W) batch.
func (v *ClipView) Fill(x []float32, y []int64, indices []int, rng *rand.Rand) error {
	return fillBatch(x, y, indices, v.labels, v.shape, v.frames.p.Augment, rng, v)
}

// sampleSize implements sampleFiller: a clip's first frame's stored size,
// from which one random resized crop is drawn for all its frames.
func (v *ClipView) sampleSize(i int) (int, int) { return v.frames.sampleSize(i * v.t) }

// fillOne implements sampleFiller: each of clip i's frames filled as the
// frames' View fills it, with the clip's one augmentation, into channel c
// of time t at dst's (c·T + t)·H·W.
func (v *ClipView) fillOne(dst []float32, i int, aug augDraw) {
	c, t, plane := v.shape[0], v.t, v.shape[2]*v.shape[3]
	if c == 1 { // (T,1,H,W) is (1,T,H,W)
		for k := range t {
			v.frames.fillOne(dst[k*plane:(k+1)*plane], i*t+k, aug)
		}
		return
	}
	p := v.scratch.Get().(*[]float32)
	defer v.scratch.Put(p)
	frame := *p
	for k := range t {
		v.frames.fillOne(frame, i*t+k, aug)
		for ch := range c {
			copy(dst[(ch*t+k)*plane:(ch*t+k+1)*plane], frame[ch*plane:(ch+1)*plane])
		}
	}
}
