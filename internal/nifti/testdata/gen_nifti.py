#!/usr/bin/python3
"""Writes the NIfTI fixtures of internal/nifti's tests with nibabel (the
writer Python pipelines use) and nibabel's own reading of each:

    NAME.nii[.gz]   the image
    NAME.f32        nibabel's get_fdata() as float32, reoriented by
                    as_closest_canonical (RAS+; an image of one slice as
                    stored), slice after slice (z),
                    row after row (y), column (x): the order Volume.Slice
                    gives (RGB images: the bytes, .rgb)
    cases.json      each file's canonical dimensions, datatype, scaling and
                    display range as nibabel reads them, or the words it is
                    refused with

The affines: most files diag(0.8, 0.8, 2.5), stored as RAS+ already; the
orientation cases store their axes permuted (a sagittal acquisition),
flipped (LPS, DICOM's order), rotated (an oblique qform, its sform unset),
with a negative qfac, or with neither qform nor sform (Analyze's x flip).

Run from this directory: /usr/bin/python3 gen_nifti.py. A rerun writes the
same bytes (fixed seeds, no times in the headers).
"""
import gzip
import io
import json
import os

import nibabel as nib
import numpy as np

rng = np.random.default_rng(7)
cases = []


def write(name, arr, dtype, v2=False, big=False, gz=False, slope=None, inter=None, cal=None, ext=False, refuse=None,
          affine=None, codes=None):
    cls = nib.Nifti2Image if v2 else nib.Nifti1Image
    hcls = nib.Nifti2Header if v2 else nib.Nifti1Header
    hdr = hcls(endianness=">" if big else "<")
    hdr.set_data_dtype(dtype)
    if not (isinstance(dtype, np.dtype) and dtype.names):
        arr = np.asarray(arr).astype(dtype)
    img = cls(arr, np.diag([0.8, 0.8, 2.5, 1]) if affine is None else affine, header=hdr)
    if cal is not None:
        img.header["cal_min"], img.header["cal_max"] = cal
    if ext:
        img.header.extensions.append(nib.nifti1.Nifti1Extension("comment", b"acquired for a fixture\x00\x00"))
    path = name + (".nii.gz" if gz else ".nii")
    raw = img.to_bytes()
    if slope is not None:
        # The scaling a converter writes (dcm2niix: the DICOM rescale),
        # set in the header nibabel wrote, which resets it on writing.
        h = hcls.from_fileobj(io.BytesIO(raw))
        h["scl_slope"], h["scl_inter"] = slope, inter
        raw = h.binaryblock + raw[len(h.binaryblock):]
    if codes is not None:
        # qform_code and sform_code as given (nibabel sets both on writing).
        h = hcls.from_fileobj(io.BytesIO(raw))
        h["qform_code"], h["sform_code"] = codes
        raw = h.binaryblock + raw[len(h.binaryblock):]
    if gz:
        # mtime 0: the same bytes on every run.
        with open(path, "wb") as f:
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
                z.write(raw)
    else:
        with open(path, "wb") as f:
            f.write(raw)
    c = {"name": name, "file": path}
    if refuse:
        c["refuse"] = refuse
        cases.append(c)
        return
    back = nib.load(path)
    shape = back.shape + (1,) * (3 - len(back.shape))
    if back.get_data_dtype().names:  # RGB
        a = np.asanyarray(back.dataobj)
        a = np.stack([a[f] for f in a.dtype.names[:3]], -1).reshape(shape[:3] + (3,))
    else:
        a = back.get_fdata().reshape(shape[:3])
    if shape[2] > 1:  # an image of one slice is read as stored
        a = np.asanyarray(nib.as_closest_canonical(nib.Nifti1Image(a, back.affine)).dataobj)
    shape = a.shape[:3]
    if back.get_data_dtype().names:
        a.transpose(2, 1, 0, 3).astype(np.uint8).tofile(name + ".rgb")
        c["rgb"] = True
    else:
        a.transpose(2, 1, 0).astype("<f4").tofile(name + ".f32")
    # nibabel moves a file's scaling from the header to the array proxy.
    s, i = getattr(back.dataobj, "slope", None), getattr(back.dataobj, "inter", None)
    c.update(width=shape[0], height=shape[1], slices=shape[2], datatype=int(back.header["datatype"]),
             slope=1.0 if s is None else float(s), intercept=0.0 if i is None else float(i),
             cal_min=float(back.header["cal_min"]), cal_max=float(back.header["cal_max"]))
    cases.append(c)


vol = rng.integers(0, 200, (5, 4, 3))
write("u8", vol, np.uint8)
write("i16_scaled_gz", rng.integers(-300, 3000, (6, 5, 4)), np.int16, gz=True, slope=2.0, inter=-1024.0, cal=(-160.0, 240.0))
f = rng.normal(0, 100, (4, 3, 3)).astype(np.float32)
f[1, 2, 0], f[3, 0, 2] = np.nan, np.nan
write("f32_nan_be", f, np.float32, big=True)
write("f64_v2", rng.normal(50, 20, (3, 4, 5)), np.float64, v2=True)
write("f32_v2_be_gz", rng.normal(0, 1, (4, 4, 2)).astype(np.float32), np.float32, v2=True, big=True, gz=True)
write("u16_2d", rng.integers(0, 60000, (7, 5)), np.uint16)
write("i8", rng.integers(-128, 128, (3, 3, 2)), np.int8)
write("u32_scaled", rng.integers(0, 1 << 31, (3, 2, 2)), np.uint32, slope=0.001, inter=5.0)
write("i32_ext", rng.integers(-(1 << 20), 1 << 20, (4, 3, 2)), np.int32, ext=True)
write("i64", rng.integers(-(1 << 40), 1 << 40, (2, 3, 2)), np.int64)
write("slope0", rng.integers(0, 100, (3, 3, 2)), np.int16, slope=0.0, inter=7.0)
write("t1_4d", rng.integers(0, 100, (3, 4, 2, 1)), np.int16)
rgb = np.zeros((4, 3, 2), dtype=[("R", "u1"), ("G", "u1"), ("B", "u1")])
for ch in "RGB":
    rgb[ch] = rng.integers(0, 256, (4, 3, 2))
write("rgb24", rgb, rgb.dtype)
# Orientations: a sagittal acquisition (i along A, j along S, k along R),
# LPS (DICOM's axes), an oblique qform alone (25° about S), a negative
# qfac, neither qform nor sform.
c25, s25 = np.cos(np.radians(25)), np.sin(np.radians(25))
write("sagittal", rng.integers(0, 1000, (5, 4, 3)), np.int16,
      affine=np.array([[0, 0, 1.2, 0], [0.9, 0, 0, 0], [0, 1.1, 0, 0], [0, 0, 0, 1]]))
write("lps_v2", rng.normal(0, 1, (4, 3, 2)).astype(np.float32), np.float32, v2=True,
      affine=np.diag([-0.7, -0.7, 3.0, 1]))
write("oblique_qform", rng.integers(0, 255, (6, 5, 2)), np.uint8,
      affine=np.array([[c25, -s25, 0, 0], [s25, c25, 0, 0], [0, 0, 2.0, 0], [0, 0, 0, 1]]) @ np.diag([0.5, 0.5, 1, 1]), codes=(1, 0))
write("qfac_neg", rng.integers(0, 255, (3, 4, 3)), np.uint8,
      affine=np.diag([1.0, 1.0, -2.0, 1]), codes=(1, 0))
write("no_codes", rng.integers(0, 255, (4, 3, 2)), np.uint8, codes=(0, 0))
rgb2 = np.zeros((3, 2, 2), dtype=[("R", "u1"), ("G", "u1"), ("B", "u1")])
for ch in "RGB":
    rgb2[ch] = rng.integers(0, 256, (3, 2, 2))
write("rgb_sagittal", rgb2, rgb2.dtype, affine=np.array([[0, 0, -1.0, 0], [1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 0, 1]]))
write("t3_4d", rng.integers(0, 100, (3, 4, 2, 3)), np.int16, refuse="dimension 4 holds 3")
write("complex", (rng.normal(size=(2, 2, 2)) + 1j).astype(np.complex64), np.complex64, refuse="complex64")

# A .hdr/.img pair's header alone.
pair = nib.Nifti1Pair(np.zeros((2, 2, 2), np.uint8), np.eye(4))
with open("pair.hdr", "wb") as f:
    f.write(pair.header.binaryblock)
cases.append({"name": "pair", "file": "pair.hdr", "refuse": "a .hdr/.img pair"})

with open("cases.json", "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
