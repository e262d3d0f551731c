#!/usr/bin/python3
"""Regenerates the PALETTE COLOR fixtures of palette_test.go and their
expected RGB.

    cd internal/dicom/testdata/palette && /usr/bin/python3 gen_palette.py

Needs pydicom (Debian's python3-pydicom, 2.3.1 when these were written) and
numpy.

Each case is a small PALETTE COLOR image written by pydicom (its RLE
encoder for the RLE case, its deflate for the deflated one). The expected
pixels are pydicom's: the file read back, its pixel_array mapped by
apply_color_lut, then made 8-bit by package dicom's rule (palette.go):
8-bit entries as they are, 16-bit words under a descriptor of 8 bits their
low byte, 16-bit entries round(v*255/65535). One fix goes first: pydicom
2.3.1 reads a big-endian file's 16-bit Palette Color LUT Data in the
machine's byte order, so those are swapped to it before apply_color_lut
(as docs/serve_preprocess.py's palette_rgb does). NAME.rgb holds the
expected samples, R G B a pixel, row by row.

The refused cases record what pydicom makes of them ("pydicom": its error,
or "decodes" where this reader is stricter than pydicom) next to the words
this reader's error must hold. cases.json lists every case. Two runs write
byte-identical files (fixed UIDs, no dates, seeded pixels).
"""
import json
import os
import struct
import sys

import numpy as np
import pydicom
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.pixel_data_handlers.util import (_expand_segmented_lut,
                                              apply_color_lut)
from pydicom.uid import (DeflatedExplicitVRLittleEndian, ExplicitVRBigEndian,
                         ExplicitVRLittleEndian, ImplicitVRLittleEndian,
                         RLELossless)

W, H = 23, 17
rng = np.random.default_rng(20261201)
cases = []


def palette_rgb(ds, arr):
    """pydicom's apply_color_lut, then 8 bits by palette.go's rule (the
    same code as docs/serve_preprocess.py's palette_rgb)."""
    desc = ds.RedPaletteColorLookupTableDescriptor
    n = desc[0] or 65536
    if not ds.is_little_endian:
        # pydicom 2.3.1 reads 16-bit LUT Data in the machine's byte order.
        for kw in ("Red", "Green", "Blue", "Alpha"):
            el = ds.get(f"{kw}PaletteColorLookupTableData")
            if el is not None and len(el) == 2 * n:
                ds[f"{kw}PaletteColorLookupTableData"].value = np.frombuffer(el, ">u2").astype("=u2").tobytes()
    out = apply_color_lut(arr, ds)[..., :3]
    if out.dtype == np.uint8:
        return out
    if desc[2] == 8:
        return (out & 0xFF).astype(np.uint8)  # 8-bit entries in 16-bit words
    return np.floor(out * (255 / 65535) + 0.5).astype(np.uint8)


def dataset(ts, pixels, bits_alloc, bits_stored, signed=False):
    """A PALETTE COLOR image of stored values pixels under syntax ts."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"  # secondary capture
    meta.MediaStorageSOPInstanceUID = "1.2.826.0.1.3680043.10.1432.20261201.1"
    meta.TransferSyntaxUID = ts
    ds = FileDataset(None, {}, file_meta=meta, preamble=b"\0" * 128)
    ds.is_little_endian = ts != ExplicitVRBigEndian
    ds.is_implicit_VR = ts == ImplicitVRLittleEndian
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.PatientID = "P-0001"
    ds.Modality = "OT"
    ds.Rows, ds.Columns = pixels.shape
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "PALETTE COLOR"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit = bits_alloc, bits_stored, bits_stored - 1
    ds.PixelRepresentation = 1 if signed else 0
    if bits_alloc == 1:
        ds.PixelData = np.packbits(pixels.astype(np.uint8).ravel(), bitorder="little").tobytes()
    else:
        dt = {8: "i1" if signed else "u1", 16: "i2" if signed else "u2"}[bits_alloc]
        ds.PixelData = pixels.astype(("<" if ds.is_little_endian else ">") + dt).tobytes()
    return ds


def descriptor(ds, n, first, bits, vr=None):
    """The three descriptors (pydicom writes US or SS in implicit VR by the
    Pixel Representation)."""
    vr = vr or ("US or SS" if ds.is_implicit_VR else "US")
    for t in (0x00281101, 0x00281102, 0x00281103):
        ds.add_new(t, vr, [n, first, bits])


def words(values, bits, little):
    """Table entries (or segments' words) as the OW value's bytes."""
    if bits == 8:
        return bytes(values)
    return struct.pack(("<" if little else ">") + f"{len(values)}H", *values)


def tables(ds, r, g, b, bits, alpha=None, segmented=False):
    base = 0x00281221 if segmented else 0x00281201
    for k, t in enumerate((r, g, b, alpha)):
        if t is not None:
            ds.add_new(base + k, "OW", t if isinstance(t, bytes) else words(t, bits, ds.is_little_endian))


def write(name, ds, ts, refuse=None):
    path = name + ".dcm"
    if ts == RLELossless:
        ds.compress(RLELossless)
    ds.save_as(path, write_like_original=False)
    rd = pydicom.dcmread(path)
    case = {"name": name, "file": path, "width": int(rd.Columns), "height": int(rd.Rows), "syntax": str(rd.file_meta.TransferSyntaxUID)}
    try:
        rgb = palette_rgb(rd, rd.pixel_array)
        if rgb.shape != (rd.Rows, rd.Columns, 3):
            raise ValueError(f"shape {rgb.shape}")
        pydicom_says = "decodes"
    except Exception as e:  # noqa: BLE001 - pydicom's refusal recorded as it is
        rgb, pydicom_says = None, f"{type(e).__name__}: {e}"[:120]
    if refuse:
        case["refuse"], case["pydicom"] = refuse, pydicom_says
    else:
        if rgb is None:
            sys.exit(f"{name}: pydicom fails: {pydicom_says}")
        with open(name + ".rgb", "wb") as f:
            f.write(rgb.tobytes())
    cases.append(case)


def pixels(lo, hi, extra=()):
    """Seeded stored values over [lo, hi], both ends and extra present."""
    a = rng.integers(lo, hi + 1, size=(H, W))
    pts = [lo, hi] + list(extra)
    a.flat[: len(pts)] = pts
    return a


def ramp(n, seed, top):
    """A table of n seeded entries over [0, top]: neighbours differ, so an
    index off by one shows."""
    return [int(v) for v in np.random.default_rng(seed).integers(0, top + 1, n)]


def periodic(n, period, mult):
    """A table of n 16-bit entries repeating every period: deflate keeps
    it small, neighbours differ."""
    return [(i % period) * mult % 65536 for i in range(n)]


# 8-bit indices, 8-bit table of 256 entries, an alpha table (ignored).
ds = dataset(ExplicitVRLittleEndian, pixels(0, 255), 8, 8)
descriptor(ds, 256, 0, 8)
tables(ds, ramp(256, 1, 255), ramp(256, 2, 255), ramp(256, 3, 255), 8, alpha=ramp(256, 4, 255))
write("lut8_idx8", ds, ExplicitVRLittleEndian)

# 8-bit indices, 16-bit table of 200 entries from 20: indices under 20
# take the first entry, over 219 the last.
ds = dataset(ExplicitVRLittleEndian, pixels(0, 255, (19, 20, 21, 219, 220)), 8, 8)
descriptor(ds, 200, 20, 16)
tables(ds, ramp(200, 5, 65535), ramp(200, 6, 65535), ramp(200, 7, 65535), 16)
write("lut16_idx8_first20", ds, ExplicitVRLittleEndian)

# 16-bit indices, 16-bit tables of 65536 entries (descriptor 0), deflated.
ds = dataset(DeflatedExplicitVRLittleEndian, pixels(0, 65535, (1, 65534, 32767, 32768)), 16, 16)
descriptor(ds, 0, 0, 16)
tables(ds, periodic(65536, 251, 261), periodic(65536, 241, 271), periodic(65536, 239, 274), 16)
write("lut16_idx16_full_deflated", ds, DeflatedExplicitVRLittleEndian)

# 12 of 16 bits stored, a table of 700 16-bit entries from 1000.
ds = dataset(ExplicitVRLittleEndian, pixels(0, 4095, (999, 1000, 1001, 1699, 1700)), 16, 12)
descriptor(ds, 700, 1000, 16)
tables(ds, ramp(700, 8, 65535), ramp(700, 9, 65535), ramp(700, 10, 65535), 16)
write("lut16_idx12_first1000", ds, ExplicitVRLittleEndian)

# Big endian: 12-bit indices in 16, a 16-bit table of 1000 entries.
ds = dataset(ExplicitVRBigEndian, pixels(0, 1200), 16, 12)
descriptor(ds, 1000, 0, 16)
tables(ds, ramp(1000, 11, 65535), ramp(1000, 12, 65535), ramp(1000, 13, 65535), 16)
write("lut16_idx12_bigendian", ds, ExplicitVRBigEndian)

# Implicit VR, signed 12-bit indices: the descriptor's first mapped value
# -500, signed by the Pixel Representation; 1000 entries.
ds = dataset(ImplicitVRLittleEndian, pixels(-700, 700, (-2048, 2047, -501, -500, -1, 0, 1, 499, 500)), 16, 12, signed=True)
descriptor(ds, 1000, -500, 16)
tables(ds, ramp(1000, 14, 65535), ramp(1000, 15, 65535), ramp(1000, 16, 65535), 16)
write("lut16_idx12_signed_implicit", ds, ImplicitVRLittleEndian)

# Explicit VR, an SS descriptor: signed 8-bit indices from -100, 200 entries.
ds = dataset(ExplicitVRLittleEndian, pixels(-128, 127, (-101, -100, -99, 99, 100)), 8, 8, signed=True)
descriptor(ds, 200, -100, 8, vr="SS")
tables(ds, ramp(200, 17, 255), ramp(200, 18, 255), ramp(200, 19, 255), 8)
write("lut8_idx8_signed_ss", ds, ExplicitVRLittleEndian)

# RLE Lossless, 8-bit indices, 8-bit table.
ds = dataset(ExplicitVRLittleEndian, pixels(0, 255), 8, 8)
descriptor(ds, 256, 0, 8)
tables(ds, ramp(256, 20, 255), ramp(256, 21, 255), ramp(256, 22, 255), 8)
write("lut8_idx8_rle", ds, RLELossless)

# The descriptor says 16 bits, the data hold one byte an entry: pydicom
# reads 8-bit entries.
ds = dataset(ExplicitVRLittleEndian, pixels(0, 255), 8, 8)
descriptor(ds, 256, 0, 16)
tables(ds, ramp(256, 23, 255), ramp(256, 24, 255), ramp(256, 25, 255), 8)
write("quirk_desc16_data8", ds, ExplicitVRLittleEndian)

# The descriptor says 8 bits, the data hold 16-bit words (some with a
# stray high byte): their low bytes.
ds = dataset(ExplicitVRLittleEndian, pixels(0, 255), 8, 8)
descriptor(ds, 256, 0, 8)
junk = [0x100 * (i % 7 == 0) for i in range(256)]
tables(ds, *[[v + j for v, j in zip(ramp(256, s, 255), junk)] for s in (26, 27, 28)], 16)
write("quirk_desc8_data16", ds, ExplicitVRLittleEndian)


def seg8(little):
    """A segmented table of 8-bit words: discrete, linear, discrete, an
    indirect copy of the linear, a linear down to 0 — 256 entries."""
    w = [0, 10, 5, 250, 17, 0, 128, 64, 32, 255, 1, 90]  # discrete: words 0..11
    w += [1, 100, 200]  # linear from 90: word 12
    w += [0, 3, 10, 20, 30]
    off = 12  # the indirect's offset, two 16-bit words in the file's order
    ob = struct.pack("<HH" if little else ">HH", off & 0xFFFF, off >> 16)
    w += [2, 1] + list(ob)  # one segment from word 12: linear from 30 to 200
    w += [1, 43, 0]
    return bytes(w)


def seg16():
    """A segmented table of 16-bit words expanding to 65536 entries:
    discrete, linear (rising, a tie rounded to even, one entry, none), an
    indirect copy of two segments, and an indirect copy of a discrete and an
    indirect segment (its offset relative to the copied block's start)."""
    w = [0, 4, 0, 65535, 1000, 30000]
    lin = len(w)
    w += [1, 20000, 60000, 1, 2, 60001, 1, 1, 5, 1, 0, 5]
    w += [0, 3, 7, 8, 9]
    w += [2, 2, lin, 0]
    block = len(w) + 4 + 3  # after this indirect and the linear that skips the block
    w += [2, 2, block, 0]
    # (the block, copied above: a discrete then an indirect back to the
    # block's own start, +0, copying the discrete once more)
    w += [1, 3, 12345]
    w += [0, 2, 100, 200, 2, 1, 0, 0]
    assert w[block] == 0 and w[block + 1] == 2
    total = len(_expand_segmented_lut(tuple(w), "<H"))
    w += [1, 65536 - total - 2, 40000, 0, 2, 11, 22]
    return w


s = seg8(True)
ds = dataset(ExplicitVRLittleEndian, pixels(0, 255), 8, 8)
descriptor(ds, 256, 0, 8)
tables(ds, s, s, s, 8, segmented=True)
write("seg8", ds, ExplicitVRLittleEndian)

s = seg8(False)
ds = dataset(ExplicitVRBigEndian, pixels(0, 255), 8, 8)
descriptor(ds, 256, 0, 8)
tables(ds, s, s, s, 8, segmented=True)
write("seg8_bigendian", ds, ExplicitVRBigEndian)

s = seg16()
lut = _expand_segmented_lut(tuple(s), "<H")
assert len(lut) == 65536, len(lut)
ds = dataset(ExplicitVRLittleEndian, pixels(0, 65535, (3, 4, 5, 20003, 20004, 20005, 20006, 20007, 40015, 40016, 40017, 65533)), 16, 16)
descriptor(ds, 0, 0, 16)
green = list(s)
green[2] = 12345  # the first entry: the tables differ
tables(ds, s, green, s, 16, segmented=True)
write("seg16_full", ds, ExplicitVRLittleEndian)


# Refused: 4×4 images of 8-bit indices.
def small(**kw):
    return dataset(ExplicitVRLittleEndian, np.arange(16).reshape(4, 4), 8, 8, **kw)


t8 = list(range(256))

ds = small()
write("refuse_no_tables", ds, ExplicitVRLittleEndian, refuse="lacks the Red Palette Color LUT Descriptor (0028,1101)")

ds = small()
descriptor(ds, 256, 0, 8)
write("refuse_no_data", ds, ExplicitVRLittleEndian, refuse="lacks the Red Palette Color LUT Data (0028,1201) and the Segmented Red Palette Color LUT Data (0028,1221)")

ds = small()
descriptor(ds, 256, 0, 8)
tables(ds, t8, None, t8, 8)
write("refuse_no_green", ds, ExplicitVRLittleEndian, refuse="lacks the Green Palette Color LUT Data (0028,1202)")

ds = small()
descriptor(ds, 256, 0, 8)
tables(ds, t8, t8[:254], t8, 8)
write("refuse_lengths", ds, ExplicitVRLittleEndian, refuse="the tables must be the same length")

ds = small()
descriptor(ds, 256, 0, 8)
tables(ds, t8, t8, t8, 8, alpha=t8[:128])
write("refuse_alpha_length", ds, ExplicitVRLittleEndian, refuse="Alpha Palette Color LUT Data (0028,1204) of 128")

ds = small()
descriptor(ds, 256, 0, 8)
tables(ds, t8[:250], t8[:250], t8[:250], 8)
write("refuse_short_data", ds, ExplicitVRLittleEndian, refuse="neither one nor two bytes an entry")

ds = small()
descriptor(ds, 256, 0, 12)
tables(ds, t8 * 2, t8 * 2, t8 * 2, 8)
write("refuse_bits12", ds, ExplicitVRLittleEndian, refuse="entries of 12 bits")

ds = dataset(ExplicitVRLittleEndian, np.arange(16).reshape(4, 4) % 2, 1, 1)
descriptor(ds, 2, 0, 8)
tables(ds, [0, 255], [0, 255], [0, 255], 8)
write("refuse_bits1", ds, ExplicitVRLittleEndian, refuse="Bits Allocated 1")

ds = small()
descriptor(ds, 256, 0, 8)
s = bytes([1, 10, 200, 0, 0, 246, *range(246)])
tables(ds, s, s, s, 8, segmented=True)
write("refuse_seg_linear_first", ds, ExplicitVRLittleEndian, refuse="has no entry before it to start from")

ds = small()
descriptor(ds, 256, 0, 8)
s = bytes([0, 1, 7, 2, 2, 0, 0, 0, 0])  # an indirect copying itself: a loop
tables(ds, s, s, s, 8, segmented=True)
write("refuse_seg_loop", ds, ExplicitVRLittleEndian, refuse="nested over 64 deep (a loop?)")

ds = small()
descriptor(ds, 0, 0, 16)
s = words([0, 1, 7, 1, 65535, 9, 1, 65535, 7], 16, True)  # 131071 entries
tables(ds, s, s, s, 16, segmented=True)
write("refuse_seg_overflow", ds, ExplicitVRLittleEndian, refuse="expands past 65536 entries")

ds = small()
descriptor(ds, 256, 0, 8)
s = bytes([0, 1, 0, 2, 1, 9, 0, 0, 0, 1, 255, 200])  # the copy's linear after an entry 0
tables(ds, s, s, s, 8, segmented=True)
write("refuse_seg_indirect_after_zero", ds, ExplicitVRLittleEndian, refuse="continues from an entry of 0, which pydicom 2.3.1 refuses")

ds = small()
descriptor(ds, 256, 0, 8)
s = bytes([0, 1, 7, 1, 0, 9, 0, 255, *range(255)])  # a linear of no entries from 7 to 9
tables(ds, s, s, s, 8, segmented=True)
write("refuse_seg_linear_empty", ds, ExplicitVRLittleEndian, refuse="of no entries from 7 to 9")

ds = small()
descriptor(ds, 256, 0, 8)
s = bytes([0, 200, *range(200)])  # 200 entries of 256: pydicom fails only past 199
tables(ds, s, s, s, 8, segmented=True)
write("refuse_seg_short", ds, ExplicitVRLittleEndian, refuse="tables of 200 entries where the Red Palette Color LUT Descriptor (0028,1101) says 256")

with open("cases.json", "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")

# docs/serve_preprocess.py's palette_rgb must give what this file's does.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../docs"))
try:
    import serve_preprocess
except ImportError as e:
    print("serve_preprocess not checked:", e)
else:
    for c in cases:
        if "refuse" not in c:
            rd = pydicom.dcmread(c["file"])
            got = np.asarray(serve_preprocess.dicom_image(c["file"], ""))
            want = np.fromfile(c["name"] + ".rgb", np.uint8).reshape(got.shape)
            assert (got == want).all(), c["name"]
    print("serve_preprocess.dicom_image agrees on", sum("refuse" not in c for c in cases), "cases")
