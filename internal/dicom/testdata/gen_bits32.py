#!/usr/bin/python3
"""Regenerates the 32-bit DICOM fixtures of bits32_test.go and their
expected pixels.

    cd internal/dicom/testdata && /usr/bin/python3 gen_bits32.py

Needs pydicom (Debian's python3-pydicom, 2.3.1 when these were written) and
DCMTK (Debian's dcmtk 3.6.7: dcmconv, dcmcrle).

Each object has Bits Allocated 32. It is written by pydicom — explicit VR
little endian, or big endian (pydicom's own writer: DCMTK swaps an OW
element's 16-bit words, which pydicom does not read as 32-bit samples),
then rewritten by DCMTK where the case says (implicit VR, deflated, RLE
Lossless, four byte-segments a sample). The expected 8-bit values are
computed from pydicom's pixel_array of the file as written, as
docs/serve_preprocess.py's dicom_images computes them (package dicom's
doc): apply_modality_lut (a rescale, or a Modality LUT Sequence), then the
VOI LUT Sequence through apply_voi_lut scaled by its bit depth, else the
window (LINEAR, PS3.3 C.11.2.1.2.1), else the image's own range;
MONOCHROME1 inverted; a colour image's samples scaled from Bits Stored to
8 bits. Two exceptions, where pydicom 2.3.1 stops short of the standard:

  - pixel_array keeps the bits outside Bits Stored (PS3.5 8.1.1: they may
    hold anything), so the masking case's values are pydicom's shifted
    down from High Bit and masked to Bits Stored here, as package dicom
    reads them;
  - convert_color_space converts 8-bit YBR_FULL only (it offsets the
    chroma by 128 and clips to 255), so the YBR_FULL case is converted
    here by PS3.3 C.7.6.3.1.2's equations, the chroma offset 2^(Bits
    Stored-1), in float64 as the decoder does.

A multi-frame case has an expected image for each frame choice
(NAME@CHOICE.f32, as gen_frames.py writes them: a projection of the
frames' rescaled values, windowed by frame 1's window).

They are written unrounded (float32; the test allows half a level);
bits32/cases.json lists each case (file, frame choice, size, channels).
Two runs write byte-identical files (the UIDs seeded by the pixels, DCMTK
told to keep them).
"""
import copy
import json
import os
import shutil
import subprocess
import warnings

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
from pydicom.pixel_data_handlers.util import apply_modality_lut, apply_voi_lut
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRBigEndian, ExplicitVRLittleEndian, generate_uid

OUT = "bits32"
W, H = 23, 17
rng = np.random.default_rng(20261205)


def field(lo, hi, channels=1, frames=None):
    """A gradient with a disc and noise over [lo, hi] (integers, float64:
    exact below 2^53), both ends present; frames of them where asked, the
    disc moving."""
    y, x = np.mgrid[0:H, 0:W]
    out = []
    for k in range(frames or 1):
        base = (x / (W - 1)) * 0.6 + (y / (H - 1)) * 0.3
        base += 0.3 * (((x - 7 - 4 * k) ** 2 + (y - 8) ** 2) < 20)
        chans = []
        for c in range(channels):
            v = base + 0.08 * rng.standard_normal((H, W)) + 0.05 * c
            v = (v - v.min()) / (v.max() - v.min())
            chans.append(np.round(lo + v * (hi - lo)))
        out.append(np.stack(chans, -1) if channels > 1 else chans[0])
    a = np.stack(out) if frames else out[0]
    a.flat[0], a.flat[-1] = lo, hi
    return a


def dataset(arr, photometric, signed=False, bits_stored=32, high_bit=None, frames=None, planar=0, **attrs):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"
    meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[photometric, arr.tobytes().hex()])
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(None, {}, file_meta=meta, preamble=b"\0" * 128)
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.PatientID = "P-0032"
    ds.Modality = "OT"
    if frames:
        ds.NumberOfFrames = frames
    channels = 3 if photometric in ("RGB", "YBR_FULL") else 1
    ds.Rows, ds.Columns = H, W
    ds.SamplesPerPixel = channels
    ds.PhotometricInterpretation = photometric
    if channels == 3:
        ds.PlanarConfiguration = planar
    ds.BitsAllocated, ds.BitsStored = 32, bits_stored
    ds.HighBit = bits_stored - 1 if high_bit is None else high_bit
    ds.PixelRepresentation = 1 if signed else 0
    for k, v in attrs.items():
        setattr(ds, k, v)
    a = arr
    if channels == 3 and planar == 1:
        a = np.moveaxis(a, -1, -3)  # each frame's planes R, G, B
    ds.PixelData = a.astype(np.int32 if signed else np.uint32).tobytes()
    return ds


def lut_item(first, bits, data, signed):
    item = Dataset()
    item.LUTDescriptor = [len(data), first, bits]
    item["LUTDescriptor"].VR = "SS" if signed else "US"
    item.LUTData = [int(v) for v in data]
    item["LUTData"].VR = "US"
    return item


def windowed(m, c, w):
    c, w = c - 0.5, w - 1  # LINEAR
    y = (m - c) / w + 0.5
    return np.where(m <= c - w / 2, 0.0, np.where(m > c + w / 2, 1.0, y))


def gray(ds, arr, m):
    """The VOI and MONOCHROME1 of serve_preprocess.py, unrounded."""
    if "VOILUTSequence" in ds:
        y = apply_voi_lut(m, ds) / (2 ** ds.VOILUTSequence[0].LUTDescriptor[2] - 1)
    elif "WindowCenter" in ds:
        y = windowed(m, float(ds.WindowCenter), float(ds.WindowWidth))
    else:
        lo, hi = m.min(), m.max()
        y = (m - lo) / (hi - lo) if hi > lo else np.zeros_like(m)
    if ds.PhotometricInterpretation == "MONOCHROME1":
        y = 1 - y
    return np.clip(y, 0, 1) * 255


def ybr_to_rgb(a, bits):
    mid = 2.0 ** (bits - 1)
    y, cb, cr = a[..., 0], a[..., 1] - mid, a[..., 2] - mid
    return np.stack([y + 1.402 * cr, y - 0.114 * 1.772 / 0.587 * cb - 0.299 * 1.402 / 0.587 * cr, y + 1.772 * cb], -1)


def expected(ds, choice, stored=None):
    """A choice's expected values; stored, where given, replaces
    pixel_array's values (the masking case)."""
    arr = ds.pixel_array if stored is None else stored
    n = int(ds.get("NumberOfFrames") or 1)
    k = {"": 0, "first": 0, "middle": n // 2, "last": n - 1}.get(choice)
    if k is None and choice not in ("max", "mean", "min"):
        k = int(choice) - 1
    if n > 1 and k is not None:
        arr = arr[k]
    if ds.SamplesPerPixel == 3:
        a = arr.astype(np.float64)
        if ds.PhotometricInterpretation == "YBR_FULL":
            a = ybr_to_rgb(a, ds.BitsStored)
        top = 2.0 ** ds.BitsStored - 1
        return np.clip(a, 0, top) * 255 / top
    if k is None:
        ms = apply_modality_lut(arr, ds).astype(np.float64)
        m = {"max": ms.max(0), "mean": ms.mean(0), "min": ms.min(0)}[choice]
    else:
        m = apply_modality_lut(arr, ds).astype(np.float64)
    return gray(ds, arr, m)


def main():
    warnings.simplefilter("ignore", UserWarning)  # apply_voi_lut of a float array: as serve_preprocess.py applies it
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    tmp = os.path.join(OUT, "_src.dcm")
    cases = []

    def case(name, ds, tool=None, args=(), choices=("",), big=False, stored=None):
        path = os.path.join(OUT, name + ".dcm")
        src = ds
        if big:
            # pydicom writes the samples as 32-bit big-endian words, which
            # is how it reads them back (>i4, >u4).
            ds = copy.deepcopy(ds)
            ds.file_meta.TransferSyntaxUID = ExplicitVRBigEndian
            ds.is_little_endian = False
            dt = ">i4" if ds.PixelRepresentation else ">u4"
            ds.PixelData = src.pixel_array.astype(dt).tobytes()
            ds.save_as(path, write_like_original=False)
        elif tool:
            tmp_write(ds, tmp)
            subprocess.run([tool, *args, tmp, path], check=True)
            os.remove(tmp)
        else:
            ds.save_as(path, write_like_original=False)
        written = pydicom.dcmread(path)
        # pydicom reads the written file's samples as they were meant,
        # the bits outside Bits Stored included.
        assert np.array_equal(written.pixel_array, src.pixel_array), name
        for choice in choices:
            want = expected(written, choice, stored).astype(np.float32)
            cname = f"{name}@{choice}" if choice else name
            want.tofile(os.path.join(OUT, cname + ".f32"))
            cases.append({"name": cname, "file": name + ".dcm", "frame": choice, "width": W,
                          "height": H, "channels": int(written.SamplesPerPixel)})

    # Signed 32-bit, beyond 16 bits each way, a rescale and a window: every
    # little-endian syntax, big endian, RLE.
    s32 = dataset(field(-2_000_000_000, 2_100_000_000), "MONOCHROME2", signed=True,
                  RescaleSlope="0.001", RescaleIntercept="-1000", WindowCenter="500000", WindowWidth="3000000")
    case("s32_window", s32)
    case("s32_window_implicit", s32, "dcmconv", ["+ti"])
    case("s32_window_deflated", s32, "dcmconv", ["+td"])
    case("s32_window_big", s32, big=True)
    case("s32_window_rle", s32, "dcmcrle")

    # Unsigned, Bits Stored 24 at High Bit 27: the bits outside (0–3,
    # 28–31) random, which the decoder masks away. pydicom keeps them, so
    # the expected values are of pydicom's samples masked here.
    v = field(0, 2**24 - 1).astype(np.uint64)
    junk = rng.integers(0, 2**32, size=v.shape, dtype=np.uint64) & 0xF000000F
    u24 = dataset((v << 4 | junk).astype(np.uint32), "MONOCHROME2", bits_stored=24, high_bit=27)
    for name, tool, args in [("u24_hb27", None, ()), ("u24_hb27_implicit", "dcmconv", ["+ti"]), ("u24_hb27_rle", "dcmcrle", [])]:
        raw = v << 4 | junk  # as written; each reader sees these bits
        case(name, u24, tool, args, stored=((raw >> 4) & 0xFFFFFF).astype(np.int64))

    # MONOCHROME1, the whole unsigned range, no window: the image's own
    # range, inverted.
    case("u32_mono1", dataset(field(0, 2**32 - 1), "MONOCHROME1"), "dcmconv", ["+td"])

    # A Modality LUT Sequence (first mapped value −100, SS) read by 32-bit
    # signed values that run past its end; a VOI LUT Sequence on unsigned
    # 32-bit values past 16 bits, rescaled into its first 2^16 inputs
    # (pydicom's apply_voi indexes the table through a uint16, which wraps
    # an input 2^16 past the first mapped value where the standard clips it
    # to the last entry).
    mlut = np.round(np.linspace(0, 40000, 3000) ** 1.1 / 40000 ** 0.1).astype(int)
    case("s32_modality_lut", dataset(field(-300, 150_000), "MONOCHROME2", signed=True,
                                     ModalityLUTSequence=Sequence([lut_item(-100, 16, mlut, True)])))
    vlut = np.round(65535 * np.sqrt(np.linspace(0, 1, 4000))).astype(int)
    case("u32_voi_lut", dataset(field(70_000, 130_000), "MONOCHROME2",
                                RescaleSlope="1", RescaleIntercept="-72000",
                                VOILUTSequence=Sequence([lut_item(0, 16, vlut, False)])))

    # Colour: RGB interleaved, RGB planar by RLE, YBR_FULL.
    case("rgb32", dataset(field(0, 2**32 - 1, 3), "RGB"))
    case("rgb32_planar", dataset(field(0, 2**32 - 1, 3), "RGB", planar=1))
    case("rgb32_rle", dataset(field(0, 2**32 - 1, 3), "RGB"), "dcmcrle")
    case("ybr32", dataset(field(2**28, 3 * 2**30, 3), "YBR_FULL"))

    # Three frames, signed, a rescale and a window: every choice,
    # uncompressed and RLE.
    f3 = dataset(field(-1_500_000_000, 1_800_000_000, frames=3), "MONOCHROME2", signed=True, frames=3,
                 RescaleSlope="2", RescaleIntercept="7", WindowCenter="-100000000", WindowWidth="4000000000")
    choices = ("first", "middle", "last", "2", "max", "mean", "min")
    case("s32_frames3", f3, choices=choices)
    case("s32_frames3_rle", f3, "dcmcrle", choices=("last", "max", "min"))

    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


def tmp_write(ds, path):
    ds.save_as(path, write_like_original=False)
    return path


if __name__ == "__main__":
    main()
