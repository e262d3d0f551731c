package dicom

import (
	"errors"
	"image"
)

// paletteLUTs are a PALETTE COLOR image's red, green and blue tables.
type paletteLUTs struct{}

// isPaletteTag reports whether t is one of the Palette Color Lookup Table
// module's attributes (PS3.3 C.7.9).
func isPaletteTag(t uint32) bool { return false }

// paletteElement reads a Palette Color Lookup Table module attribute.
func (h *header) paletteElement(r *reader, el element) error { return r.skip(int64(el.length)) }

// checkPalette validates a PALETTE COLOR image's tables.
func (h *header) checkPalette() error {
	return errors.New("PALETTE COLOR images are not read: convert the file to RGB first (e.g. gdcmconv --raw --photometric-interpretation RGB… or pydicom's apply_color_lut)")
}

// toPalette maps a PALETTE COLOR image's stored values through its tables
// to 8-bit RGB.
func (h *header) toPalette(vals []uint16) (image.Image, error) {
	return nil, errors.New("PALETTE COLOR images are not read")
}
