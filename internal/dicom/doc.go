// Package dicom decodes the image of a DICOM Part 10 file (PS3.10: the
// ".dcm" files of radiology archives, CR, DX, CT, MR and the like) to the
// 8-bit pixels an image classifier is trained on, and registers the format
// with package image, as image/png registers PNG: a file is DICOM by its
// contents (the "DICM" prefix after the 128-byte preamble), not its name.
//
// # What is read
//
// The transfer syntaxes Implicit VR Little Endian, Explicit VR Little and
// Big Endian, Deflated Explicit VR Little Endian, RLE Lossless, JPEG
// Baseline and Extended (8-bit samples, Go's image/jpeg), JPEG Lossless
// (T.81 process 14, any predictor: jpegll.go), JPEG-LS, lossless and
// near-lossless (T.87: jpegls.go) and JPEG 2000 Part 1, lossless and lossy
// (T.800: jpeg2000*.go; a raw codestream or a JP2 file; every progression
// order, tiles, precincts, layers and code-block style, 5/3 and 9/7
// wavelets, RCT and ICT — YBR_RCT and YBR_ICT read as the RGB the decoder
// gives back). JPEG 2000 Part 2 and HTJ2K, 12-bit lossy JPEG and the video
// syntaxes are refused by name, with the command that rewrites such a file
// uncompressed. Samples of 1 (a bitmap), 8, 16 or 32 bits; 32 (an RT
// dose's) uncompressed or RLE Lossless, as pydicom reads them (the JPEG
// family and JPEG 2000 code at most 16 bits: a 32-bit file under one is
// refused by the codec's name).
//
// A multi-frame object (a cine loop, an enhanced CT or MR volume, a
// tomosynthesis stack; frames.go) is one image all the same, as the caller
// chooses (Options.Frame): a frame — first, middle, last, or by number —
// or a projection of all of them (max, mean, min) of the Modality LUT's
// output, then through frame 1's VOI. Without a choice it is an error
// (ErrMultiFrame). A caller that makes every frame a sample of its own
// (FrameAll) counts them (FrameCount) and decodes them in one pass
// (DecodeEach). Its frames are found by the Basic or the Extended
// Offset Table, or, without one, a fragment a frame (RLE) or the
// fragments up to one that ends a codestream (the JPEG family's EOI); a
// bitmap's frames, which run on bit by bit, by their bit offsets. An
// enhanced object's Per-frame and Shared Functional Groups give each
// frame its rescale (Pixel Value Transformation) and window (Frame VOI
// LUT), before the data set's own. A series' slices, single-frame
// objects a file each, are projected alike (Projection: each slice
// through its own rescale, the result through the first's VOI).
//
// Files as writers leave them: a preamble that is a TIFF header (GE's
// "dual personality" files; image.Decode would take them for TIFFs, so
// callers sniff DICOM first), a data set in the other little-endian VR
// than its transfer syntax says (its first element decides, as pydicom
// reads it), sequences of unknown VR (UN) in implicit VR whatever they
// hold. TestPydicomTestFiles (dpengine/data) holds the decoder to pydicom
// on the files pydicom ships for its own tests.
//
// Of the data set, only what the image needs is kept: the Image Pixel
// module (rows, columns, samples, bits allocated, stored and high bit,
// pixel representation, photometric interpretation, planar configuration,
// number of frames), the Modality LUT (rescale slope and intercept, or a
// Modality LUT Sequence), the VOI LUT (window centre and width with their
// VOI LUT Function, or a VOI LUT Sequence), the palette's tables, the
// functional groups' rescales and windows, the Extended Offset Table;
// and two identifiers, for PatientID and StudyUID alone: the Patient ID
// (0010,0020), the user a user-level guarantee protects, and the Study
// Instance UID (0020,000D), a study's images scored as one; and, for
// SliceOf, where a slice lies in its series (Series Instance UID and
// Number, Instance Number, Image Position and Orientation). Everything
// else — the patient's name, birth date and the study's other attributes
// included — is skipped unread; no error message carries a value of the
// file's header but those of the image module.
//
// # From stored values to 8 bits
//
// A grayscale image (MONOCHROME1, MONOCHROME2) goes through the standard's
// display pipeline (PS3.4 N.2.1, PS3.3 C.11.2.1.2) as pydicom's
// apply_modality_lut and apply_voi_lut compute it, then to 8 bits:
//
//  1. the stored values, masked to Bits Stored at High Bit and sign-extended
//     where Pixel Representation is 1;
//  2. the Modality LUT: the LUT Sequence's table, or value·slope + intercept;
//  3. the VOI LUT: the first VOI LUT Sequence item's table, scaled from its
//     bit depth to [0, 1]; else the first window (LINEAR, LINEAR_EXACT or
//     SIGMOID, C.11.2.1.2.1), to [0, 1]; a file with neither is scaled from
//     its own least and greatest value to [0, 1] (all 0 where they are equal);
//  4. MONOCHROME1 (higher values darker) inverted: 1 − v;
//  5. v·255, rounded to the nearest integer.
//
// Options.Windows replaces the file's VOI with a window of the user's (a
// CT's lung or bone window), or three, read as an RGB image's channels (a
// head CT's brain, subdural and bone windows). Colour images (RGB,
// YBR_FULL, uncompressed YBR_FULL_422; YBR_FULL_422 and YBR_ICT/RCT as JPEG
// stores them) are not windowed: 8-bit samples are kept, wider ones scaled
// to 8 bits, YBR_FULL converted to RGB by PS3.3 C.7.6.3.1.2 (4:2:2's chroma
// repeated, as pydicom expands it); a JPEG frame's YCbCr is returned as the
// JPEG decoder gives it, for the caller to convert as it converts a JPEG
// file's, and a frame of Photometric Interpretation RGB without an Adobe
// colour flag, whose components are R, G and B as stored (PS3.5 8.2.1), as
// a RawJPEG. PALETTE COLOR images are mapped through their red, green and
// blue tables (plain or segmented) to 8-bit RGB as pydicom's
// apply_color_lut maps them (palette.go says how, and where it differs).
//
// # Hostile files
//
// No input makes the decoder panic, loop, or allocate more than the file
// holds: every length is read in chunks against the data actually present,
// sequences nest at most maxDepth deep, the header before the pixel data is
// bounded (maxHeader), a deflated data set is read only as far as the
// pixel data, and an image of more than MaxPixels pixels is refused from
// its header. Every error names what in the file is wrong, and the tag.
package dicom
