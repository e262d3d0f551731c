// Package nifti reads NIfTI-1 and NIfTI-2 images (.nii, and .nii.gz
// compressed), the format research pipelines keep MR and CT volumes in
// (dcm2niix's output, BraTS', the Medical Segmentation Decathlon's): the
// header — either version, either byte order — and the voxels of a 2-D
// image or a 3-D volume, scaled by scl_slope and scl_inter as nibabel's
// get_fdata scales them, or an RGB image's bytes.
//
// A volume is read whole (Decode) and in its closest canonical
// orientation (orient.go: RAS+, as nibabel's as_closest_canonical): its
// slices are planes of constant z (S), each Height rows (y, A) of Width
// values (x, R). What makes an 8-bit image of a slice — the window, the
// display — is the caller's (dpengine/data). A file is trusted for nothing: its dimensions, offsets
// and types are checked before anything is allocated, and the voxels are
// read as they arrive, so that a header claiming more than the file holds
// costs no more memory than the file and a segment (4–32 MiB).
//
// Not read: the .hdr/.img pair (magic "ni1"), Analyze 7.5 headers, 4-D and
// higher images of more than one volume, and complex, 128-bit and bit
// voxels; each is refused by name.
package nifti
