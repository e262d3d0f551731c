// Package pnm decodes the Netpbm image formats — PBM (P1, P4), PGM (P2,
// P5) and PPM (P3, P6), the ".pbm", ".pgm", ".ppm" and ".pnm" files that
// torchvision's ImageFolder reads through PIL — and registers them with
// package image, as image/png registers PNG.
//
// Bitmaps and gray maps decode to *image.Gray, pixel maps to *image.NRGBA
// (opaque). Samples whose maximum value is not 255 are scaled to 8 bits,
// rounded: v·255/maxval. A bitmap's 1 is black. Every error names what in
// the file is wrong; no input makes the decoder panic or read past the
// size its header declares.
package pnm
