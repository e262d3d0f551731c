#!/usr/bin/python3
"""Regenerates the multi-frame DICOM fixtures of frames_test.go and their
expected pixels.

    cd internal/dicom/testdata && /usr/bin/python3 gen_frames.py

Needs pydicom (Debian's python3-pydicom, 2.3.1 when these were written) and
DCMTK (Debian's dcmtk 3.6.7: dcmconv, dcmcrle, dcmcjpeg, dcmcjpls).

Each object is written uncompressed by pydicom, then rewritten by DCMTK in
the case's transfer syntax, with or without a Basic Offset Table, one
fragment a frame or several. The expected 8-bit values of every frame
choice (first, middle, last, a number, and the max, mean and min
projections) are computed from the uncompressed object as package dicom's
doc says, by pydicom's pixel_array and numpy:

  - a frame's rescale and window are its Per-frame Functional Groups
    item's (Pixel Value Transformation, Frame VOI LUT), else the Shared
    Functional Groups item's, else the data set's own;
  - a projection is taken of the frames' rescaled values, pixel by pixel,
    then windowed by frame 1's window, else scaled from its own range.

They are written unrounded (float32); frames/cases.json lists each case
(file, frame choice, size, channels) and, for the refused ones, the error's
expected words. Two runs write byte-identical files.
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
from pydicom.encaps import encapsulate_extended, generate_pixel_data_frame
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian, RLELossless, generate_uid

OUT = "frames"
W, H = 41, 27
rng = np.random.default_rng(20261201)
CHOICES = ["first", "middle", "last", "2", "max", "mean", "min"]


def volume(frames, lo, hi, channels=1):
    """frames noisy gradients with a disc that moves, over [lo, hi]."""
    y, x = np.mgrid[0:H, 0:W]
    out = []
    for k in range(frames):
        base = (x / (W - 1)) * 0.5 + (y / (H - 1)) * 0.2
        base += 0.35 * (((x - 8 - 6 * k) ** 2 + (y - 12) ** 2) < 30)
        chans = []
        for c in range(channels):
            v = base + 0.1 * rng.standard_normal((H, W)) + 0.05 * c
            v = np.clip(v, 0, 1.2) / 1.2
            chans.append(np.round(lo + v * (hi - lo)))
        out.append(np.stack(chans, -1) if channels > 1 else chans[0])
    a = np.stack(out)
    a.flat[0], a.flat[-1] = lo, hi
    return a


def base(arr, photometric, bits_alloc, bits_stored, signed, sop="1.2.840.10008.5.1.4.1.1.7.2", **attrs):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop
    meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[photometric, arr.tobytes().hex()])
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(None, {}, file_meta=meta, preamble=b"\0" * 128)
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.PatientID = "P-0002"
    ds.Modality = "OT"
    ds.NumberOfFrames = arr.shape[0]
    ds.Rows, ds.Columns = arr.shape[1], arr.shape[2]
    ds.SamplesPerPixel = 3 if arr.ndim == 4 else 1
    ds.PhotometricInterpretation = photometric
    if arr.ndim == 4:
        ds.PlanarConfiguration = 0
    ds.BitsAllocated, ds.BitsStored = bits_alloc, bits_stored
    ds.HighBit = bits_stored - 1
    ds.PixelRepresentation = 1 if signed else 0
    for k, v in attrs.items():
        setattr(ds, k, v)
    if bits_alloc == 1:
        bits = arr.astype(np.uint8).ravel()
        ds.PixelData = np.packbits(bits, bitorder="little").tobytes()
        return ds
    dt = {8: np.uint8, 16: np.uint16}[bits_alloc]
    if signed:
        dt = {8: np.int8, 16: np.int16}[bits_alloc]
    ds.PixelData = arr.astype(dt).tobytes()
    return ds


def group(slope=None, intercept=None, center=None, width=None, function=None):
    """A functional group item: a Pixel Value Transformation and a Frame
    VOI LUT, each where given."""
    g = Dataset()
    if slope is not None:
        t = Dataset()
        t.RescaleSlope, t.RescaleIntercept, t.RescaleType = slope, intercept, "HU"
        g.PixelValueTransformationSequence = Sequence([t])
    if center is not None:
        v = Dataset()
        v.WindowCenter, v.WindowWidth = center, width
        if function:
            v.VOILUTFunction = function
        g.FrameVOILUTSequence = Sequence([v])
    return g


def frame_attrs(ds, k):
    """Frame k's (slope, intercept) and (centre, width, function), by the
    functional groups' precedence."""
    groups = []
    if "PerFrameFunctionalGroupsSequence" in ds and k < len(ds.PerFrameFunctionalGroupsSequence):
        groups.append(ds.PerFrameFunctionalGroupsSequence[k])
    if "SharedFunctionalGroupsSequence" in ds:
        groups.append(ds.SharedFunctionalGroupsSequence[0])
    rescale = (float(ds.RescaleSlope), float(ds.RescaleIntercept)) if "RescaleSlope" in ds and "RescaleIntercept" in ds else (1.0, 0.0)
    for g in groups:
        if "PixelValueTransformationSequence" in g:
            t = g.PixelValueTransformationSequence[0]
            rescale = (float(t.RescaleSlope), float(t.RescaleIntercept))
            break
    first = lambda v: float(v[0] if isinstance(v, pydicom.multival.MultiValue) else v)
    window = None
    if "WindowCenter" in ds and "WindowWidth" in ds:
        window = (first(ds.WindowCenter), first(ds.WindowWidth), str(ds.get("VOILUTFunction", "")))
    for g in groups:
        if "FrameVOILUTSequence" in g:
            v = g.FrameVOILUTSequence[0]
            window = (first(v.WindowCenter), first(v.WindowWidth), str(v.get("VOILUTFunction", "")))
            break
    return rescale, window


def windowed(m, c, w, fn):
    fn = (fn or "LINEAR").upper()
    if fn == "SIGMOID":
        return 1 / (1 + np.exp(-4 * (m - c) / w))
    if fn == "LINEAR":
        c, w = c - 0.5, w - 1
    y = (m - c) / w + 0.5
    return np.where(m <= c - w / 2, 0.0, np.where(m > c + w / 2, 1.0, y))


def expected(ds, choice):
    arr = ds.pixel_array
    n = int(ds.NumberOfFrames)
    if arr.ndim == (3 if ds.SamplesPerPixel == 3 else 2):
        arr = arr[None]
    if ds.SamplesPerPixel == 3:
        k = {"first": 0, "middle": n // 2, "last": n - 1}.get(choice)
        k = int(choice) - 1 if k is None else k
        top = 2 ** ds.BitsStored - 1
        return arr[k].astype(np.float64) * 255 / top
    ms = []
    for k in range(n):
        (slope, intercept), _ = frame_attrs(ds, k)
        ms.append(arr[k].astype(np.float64) * slope + intercept)
    ms = np.stack(ms)
    if choice in ("max", "mean", "min"):
        m = {"max": ms.max(0), "mean": ms.mean(0), "min": ms.min(0)}[choice]
        _, window = frame_attrs(ds, 0)
    else:
        k = {"first": 0, "middle": n // 2, "last": n - 1}.get(choice)
        k = int(choice) - 1 if k is None else k
        m = ms[k]
        _, window = frame_attrs(ds, k)
    if window:
        v = windowed(m, *window)
    else:
        lo, hi = m.min(), m.max()
        v = (m - lo) / (hi - lo) if hi > lo else np.zeros_like(m)
    if ds.PhotometricInterpretation == "MONOCHROME1":
        v = 1 - v
    return np.clip(v, 0, 1) * 255


def dcmtk(tool, args, src, dst):
    subprocess.run([tool, *args, src, dst], check=True)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    tmp = os.path.join(OUT, "_src.dcm")
    cases = []

    def obj(name, ds, tool=None, args=(), choices=CHOICES, refuse=None, encode=None):
        path = os.path.join(OUT, name + ".dcm")
        ds.save_as(tmp, write_like_original=False)
        if encode:
            encode(pydicom.dcmread(tmp)).save_as(path, write_like_original=False)
        elif tool:
            dcmtk(tool, list(args), tmp, path)
        else:
            shutil.copy(tmp, path)
        if refuse:
            for choice, words in refuse.items():
                cases.append({"name": f"{name}@{choice or 'none'}", "file": name + ".dcm", "frame": choice, "refuse": words})
        for choice in choices:
            want = expected(ds, choice).astype(np.float32)
            cname = f"{name}@{choice}"
            want.tofile(os.path.join(OUT, cname + ".f32"))
            cases.append({"name": cname, "file": name + ".dcm", "frame": choice, "width": int(ds.Columns),
                          "height": int(ds.Rows), "channels": int(ds.SamplesPerPixel)})
        os.remove(tmp)

    none = {"": "multi-frame image (4 frames)"}
    # A cine loop of 8-bit gray frames, uncompressed, its own range.
    obj("cine8", base(volume(4, 10, 240), "MONOCHROME2", 8, 8, False), "dcmconv", ["+te"],
        refuse={**none, "5": "frame 5 of an image of 4 frame(s)"})
    # An enhanced CT: signed 16-bit stored values, the rescale shared, each
    # frame its own window (no window at the top level).
    ct = volume(4, -1024, 1500)
    enh = base(ct + 24, "MONOCHROME2", 16, 16, True, sop="1.2.840.10008.5.1.4.1.1.2.1",
               SharedFunctionalGroupsSequence=Sequence([group(1, -24)]),
               PerFrameFunctionalGroupsSequence=Sequence([group(center=c, width=w) for c, w in
                                                          [(40, 400), (-600, 1500), (300, 1800), (50, 350)]]))
    obj("enhanced_ct", enh, "dcmconv", ["+te"], refuse=none)
    obj("enhanced_ct_implicit", enh, "dcmconv", ["+ti"], choices=["middle", "max"])
    # Each frame its own rescale, a window shared, SIGMOID; MONOCHROME1.
    per = base(volume(4, 0, 4095), "MONOCHROME1", 16, 12, False, sop="1.2.840.10008.5.1.4.1.1.4.1",
               SharedFunctionalGroupsSequence=Sequence([group(center=2500, width=3000, function="SIGMOID")]),
               PerFrameFunctionalGroupsSequence=Sequence([group(s, i) for s, i in [(1, 0), (0.5, 100), (2, -500), (1, 10)]]))
    obj("perframe_rescale", per, "dcmconv", ["+te"])
    # Compressed: RLE (a fragment a frame, the offset table), JPEG-LS
    # (fragments of 1 KB, no offset table: frames told by their EOI),
    # JPEG Lossless (fragments of 1 KB and the offset table).
    obj("enhanced_ct_rle", enh, "dcmcrle", [], choices=["last", "mean"])
    obj("enhanced_ct_jpegls_frag", enh, "dcmcjpls", ["+fs", "1", "-ot"], choices=CHOICES)
    obj("enhanced_ct_jpegll_frag", enh, "dcmcjpeg", ["+e1", "+fs", "1", "+ot"], choices=CHOICES)
    # RLE without an offset table: a fragment a frame.
    obj("cine8_rle_nobot", base(volume(4, 10, 240), "MONOCHROME2", 8, 8, False), "dcmcrle", ["-ot"],
        choices=["middle", "last", "min"])

    # The Extended Offset Table (PS3.5 A.4, pydicom's encapsulate_extended):
    # RLE frames, the Basic Offset Table empty.
    def extended(ds):
        ds.compress(RLELossless, encoding_plugin="pydicom")
        frames = list(generate_pixel_data_frame(ds.PixelData, int(ds.NumberOfFrames)))
        pix, offsets, lengths = encapsulate_extended(frames)
        ds.PixelData = pix
        ds["PixelData"].is_undefined_length = True
        ds["PixelData"].VR = "OB"
        ds.ExtendedOffsetTable = offsets
        ds.ExtendedOffsetTableLengths = lengths
        return ds
    obj("cine16_extended", base(volume(3, 0, 65535), "MONOCHROME2", 16, 16, False), encode=extended,
        choices=["first", "middle", "last", "max"])
    # A bitmap of three frames whose bits run on across bytes (41×27 is odd).
    obj("mask3", base(volume(3, 0, 1) > 0.5, "MONOCHROME2", 1, 1, False), "dcmconv", ["+te"],
        choices=["first", "middle", "last", "max"])
    # RGB frames: a frame only; a projection refused.
    obj("rgb_cine", base(volume(3, 0, 255, 3), "RGB", 8, 8, False), "dcmcrle", [],
        choices=["first", "last"], refuse={"max": "projections are of grayscale images"})

    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
