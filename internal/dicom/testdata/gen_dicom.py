#!/usr/bin/python3
"""Regenerates the DICOM fixtures of dicom_test.go and their expected pixels.

    cd internal/dicom/testdata && /usr/bin/python3 gen_dicom.py

Needs pydicom (Debian's python3-pydicom, 2.3.1 when these were written),
DCMTK (Debian's dcmtk 3.6.7: dcmconv, dcmcrle, dcmcjpeg, dcmdjpeg, dcmcjpls,
dcmdjpls) and Pillow with OpenJPEG (python3-pil 9.4) for JPEG 2000.

Each case is a small image written uncompressed by pydicom, then rewritten by
DCMTK in the case's transfer syntax. The expected 8-bit values are computed
from the uncompressed file (or, for lossy JPEG, from DCMTK's decompression of
the compressed one) by pydicom's own display functions — apply_modality_lut,
apply_voi_lut (which prefers a VOI LUT Sequence to a window) — then scaled
to [0, 255] as package dicom's doc says: a VOI LUT's output by its bit depth,
a window's by its output range (the range apply_windowing maps the infinities
to), an image without either by its own least and greatest value; MONOCHROME1
inverted. They are written unrounded (float32), so that the test holds the
decoder's rounded bytes to within half a level of them.

files/cases.json lists each case: file, size, channels, tolerance (0.5 for
exact cases; lossy JPEG's are DCMTK's libjpeg against Go's image/jpeg), and,
for the refused files, the error's expected words. Two runs write
byte-identical files (the UIDs are seeded by the pixels, DCMTK told to keep
them).
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
from pydicom.pixel_data_handlers.util import (apply_modality_lut,
                                              apply_voi_lut,
                                              apply_windowing,
                                              convert_color_space)
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

OUT = "files"
W, H = 37, 29  # larger than the 28×28 test model: predict fits them as PIL resizes
rng = np.random.default_rng(20261130)


def smooth(lo, hi, channels=1):
    """A gradient with a disc and noise over [lo, hi]."""
    y, x = np.mgrid[0:H, 0:W]
    base = (x / (W - 1)) * 0.6 + (y / (H - 1)) * 0.3
    base += 0.3 * (((x - 11) ** 2 + (y - 8) ** 2) < 25)
    out = []
    for c in range(channels):
        v = base + 0.08 * rng.standard_normal((H, W)) + 0.05 * c
        v = (v - v.min()) / (v.max() - v.min())
        out.append(np.round(lo + v * (hi - lo)))
    a = np.stack(out, -1) if channels > 1 else out[0]
    a.flat[0], a.flat[-1] = lo, hi  # both ends of the range present
    return a


def base(arr, photometric, bits_alloc, bits_stored, signed, **attrs):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.7"  # secondary capture
    # Seeded by the pixels: two runs write the same files.
    meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[photometric, arr.tobytes().hex()])
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(None, {}, file_meta=meta, preamble=b"\0" * 128)
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.PatientName = "Test^Fixture"  # a header value the decoder never reads
    ds.PatientID = "P-0001"
    ds.Modality = "OT"
    ds.Rows, ds.Columns = arr.shape[0], arr.shape[1]
    ds.SamplesPerPixel = 3 if arr.ndim == 3 else 1
    ds.PhotometricInterpretation = photometric
    if arr.ndim == 3:
        ds.PlanarConfiguration = attrs.pop("PlanarConfiguration", 0)
    ds.BitsAllocated, ds.BitsStored = bits_alloc, bits_stored
    ds.HighBit = bits_stored - 1
    ds.PixelRepresentation = 1 if signed else 0
    for k, v in attrs.items():
        setattr(ds, k, v)
    dt = {8: np.uint8, 16: np.uint16}[bits_alloc]
    if signed:
        dt = {8: np.int8, 16: np.int16}[bits_alloc]
    a = arr.astype(dt)
    if arr.ndim == 3 and ds.PlanarConfiguration == 1:
        a = np.ascontiguousarray(a.transpose(2, 0, 1))
    ds.PixelData = a.tobytes()
    return ds


def lut_item(first, bits, data):
    it = Dataset()
    it.LUTDescriptor = [len(data) % 65536, first, bits]
    it.LUTData = np.asarray(data, "<u2").tobytes()  # OW
    return it


def expected(ds):
    arr = ds.pixel_array
    if ds.SamplesPerPixel == 3:
        if ds.PhotometricInterpretation == "YBR_FULL":
            arr = convert_color_space(arr, "YBR_FULL", "RGB")
        top = 2 ** ds.BitsStored - 1
        return arr.astype(np.float64) * 255 / top
    m = apply_modality_lut(arr, ds)
    if "VOILUTSequence" in ds:
        v = apply_voi_lut(m, ds).astype(np.float64)
        v = v / (2 ** ds.VOILUTSequence[0].LUTDescriptor[2] - 1)
    elif "WindowCenter" in ds and "WindowWidth" in ds:
        v = apply_voi_lut(m, ds)
        y0, y1 = apply_windowing(np.array([-1e300, 1e300]), ds)
        v = (v - y0) / (y1 - y0)
    else:
        m = m.astype(np.float64)
        lo, hi = m.min(), m.max()
        v = (m - lo) / (hi - lo) if hi > lo else np.zeros_like(m)
    if ds.PhotometricInterpretation == "MONOCHROME1":
        v = 1 - v
    return v * 255


def j2k(photometric=None):
    """An encoder of a case's dataset as JPEG 2000 Lossless (Pillow's
    OpenJPEG, reversible 5/3; an RGB image with the RCT, Photometric
    Interpretation YBR_RCT)."""
    def encode(ds):
        import copy
        import io
        from PIL import Image
        from pydicom.encaps import encapsulate
        from pydicom.uid import JPEG2000Lossless
        arr = ds.pixel_array
        im = Image.fromarray(arr.astype(np.uint16), "I;16") if ds.BitsAllocated == 16 else Image.fromarray(arr)
        buf = io.BytesIO()
        im.save(buf, "JPEG2000", no_jp2=True, irreversible=False, mct=1 if arr.ndim == 3 else 0)
        out = copy.deepcopy(ds)
        out.file_meta.TransferSyntaxUID = JPEG2000Lossless
        out.PixelData = encapsulate([buf.getvalue()])
        out["PixelData"].is_undefined_length = True
        out["PixelData"].VR = "OB"
        if photometric:
            out.PhotometricInterpretation = photometric
        return out
    return encode


def dcmtk(tool, args, src, dst):
    subprocess.run([tool, *args, src, dst], check=True)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    tmp = os.path.join(OUT, "_src.dcm")
    cases = []

    def case(name, ds, tool=None, args=(), tol=0.5, lossy=False, refuse=None, decompress="dcmdjpeg", encode=None):
        path = os.path.join(OUT, name + ".dcm")
        ds.save_as(tmp, write_like_original=False)
        if encode:
            encode(ds).save_as(path, write_like_original=False)
        elif tool:
            dcmtk(tool, list(args), tmp, path)
        else:
            shutil.copy(tmp, path)
        c = {"name": name, "file": name + ".dcm"}
        if refuse:
            c["refuse"] = refuse
        else:
            ref = ds
            if lossy:
                dec = os.path.join(OUT, "_dec.dcm")
                dcmtk(decompress, [], path, dec)
                ref = pydicom.dcmread(dec)
                os.remove(dec)
            want = expected(ref).astype(np.float32)
            want.tofile(os.path.join(OUT, name + ".f32"))
            c.update(width=int(ds.Columns), height=int(ds.Rows),
                     channels=int(ds.SamplesPerPixel), tol=tol)
        cases.append(c)
        os.remove(tmp)

    ct = smooth(-1024, 1800)  # Hounsfield units
    signed = ct - 500  # stored signed with an intercept of 500
    # A CT slice: 12 bits stored unsigned, intercept -1024, a soft-tissue window.
    case("ct_implicit", base(ct + 1024, "MONOCHROME2", 16, 12, False,
                             RescaleSlope=1, RescaleIntercept=-1024,
                             WindowCenter=40, WindowWidth=400),
         "dcmconv", ["+ti"])
    # Two windows (the first applies), LINEAR_EXACT, a slope of 2.
    case("ct_exact", base(np.round(ct / 2), "MONOCHROME2", 16, 12, True,
                          RescaleSlope=2, RescaleIntercept=0,
                          WindowCenter=[-600, 40], WindowWidth=[1500, 400],
                          VOILUTFunction="LINEAR_EXACT"),
         "dcmconv", ["+te"])
    # 12 bits stored in 16, big endian, SIGMOID.
    case("sigmoid_be", base(smooth(0, 4095), "MONOCHROME2", 16, 12, False,
                            WindowCenter=2000, WindowWidth=1800,
                            VOILUTFunction="SIGMOID"),
         "dcmconv", ["+tb"])
    # A CR: MONOCHROME1, no window (its own range), deflated.
    case("cr_mono1_deflated", base(smooth(200, 3900), "MONOCHROME1", 16, 12, False),
         "dcmconv", ["+td"])
    # A VOI LUT Sequence, preferred to the window beside it.
    curve = np.round(4095 * (np.linspace(0, 1, 1024) ** 0.6))
    case("voi_lut", base(smooth(0, 1023), "MONOCHROME2", 16, 10, False,
                         VOILUTSequence=Sequence([lut_item(0, 12, curve)]),
                         WindowCenter=500, WindowWidth=300),
         "dcmconv", ["+te"])
    # A VOI LUT Sequence starting past the least value, ending before the greatest.
    case("voi_lut_clipped", base(smooth(0, 1023), "MONOCHROME2", 16, 10, False,
                                 VOILUTSequence=Sequence([lut_item(100, 16, np.round(np.linspace(0, 65535, 700)))])),
         "dcmconv", ["+ti"])
    # A Modality LUT Sequence, then a window.
    mlut = np.round(np.sqrt(np.arange(4096)) * 1000)
    case("modality_lut", base(smooth(0, 4095), "MONOCHROME2", 16, 12, False,
                              ModalityLUTSequence=Sequence([lut_item(0, 16, mlut)]),
                              WindowCenter=30000, WindowWidth=40000),
         "dcmconv", ["+te"])
    # 8-bit gray, no window.
    case("gray8", base(smooth(30, 220), "MONOCHROME2", 8, 8, False), "dcmconv", ["+te"])
    # Colour: RGB interleaved and planar, YBR_FULL.
    case("rgb8", base(smooth(0, 255, 3), "RGB", 8, 8, False), "dcmconv", ["+te"])
    case("rgb8_planar_implicit", base(smooth(0, 255, 3), "RGB", 8, 8, False, PlanarConfiguration=1),
         "dcmconv", ["+ti"])
    case("ybr_full", base(smooth(16, 240, 3), "YBR_FULL", 8, 8, False), "dcmconv", ["+te"], tol=1.0)
    # RLE Lossless: signed 16-bit CT, RGB.
    case("ct_rle", base(signed, "MONOCHROME2", 16, 16, True,
                        RescaleSlope=1, RescaleIntercept=500,
                        WindowCenter=-600, WindowWidth=1500),
         "dcmcrle", [])
    case("rgb_rle", base(smooth(0, 255, 3), "RGB", 8, 8, False), "dcmcrle", [])
    # JPEG Lossless: 16 bits, SV1 (.70) and selection value 4 (.57).
    case("cr_jpegll_sv1", base(smooth(0, 65535), "MONOCHROME2", 16, 16, False),
         "dcmcjpeg", ["+e1"])
    case("ct_jpegll_sv4", base(signed, "MONOCHROME2", 16, 16, True,
                               RescaleSlope=1, RescaleIntercept=500,
                               WindowCenter=40, WindowWidth=400),
         "dcmcjpeg", ["+el", "+sv", "4"])
    # JPEG Baseline (lossy): a windowed 8-bit gray, and RGB as YBR_FULL_422.
    case("gray_jpeg", base(smooth(0, 255), "MONOCHROME2", 8, 8, False,
                           WindowCenter=128, WindowWidth=200),
         "dcmcjpeg", ["+eb", "+q", "95", "+un"], tol=4.0, lossy=True)
    case("rgb_jpeg", base(smooth(0, 255, 3), "RGB", 8, 8, False),
         "dcmcjpeg", ["+eb", "+q", "95", "+un"], tol=4.0, lossy=True)
    # JPEG-LS: lossless (a signed CT), and near-lossless (NEAR 2) as
    # DCMTK's own decoder reads it back.
    case("ct_jpegls", base(signed, "MONOCHROME2", 16, 16, True,
                           RescaleSlope=1, RescaleIntercept=500,
                           WindowCenter=40, WindowWidth=400),
         "dcmcjpls", ["+un"])
    case("cr_jpegls_near", base(smooth(0, 4095), "MONOCHROME2", 16, 12, False),
         "dcmcjpls", ["+en", "+md", "2", "+un"], lossy=True, decompress="dcmdjpls")
    # JPEG 2000 Lossless: a 12-bit CR, and RGB through the RCT.
    case("cr_j2k", base(smooth(0, 4095), "MONOCHROME2", 16, 12, False), encode=j2k())
    case("rgb_j2k", base(smooth(0, 255, 3), "RGB", 8, 8, False), encode=j2k("YBR_RCT"))
    # Refused: a multi-frame image with no frame chosen, PALETTE COLOR without
    # its tables, 12-bit lossy JPEG.
    mf = base(np.concatenate([smooth(0, 255), smooth(0, 255)]), "MONOCHROME2", 8, 8, False)
    mf.Rows, mf.NumberOfFrames = H, 2
    case("multiframe", mf, refuse="multi-frame image (2 frames)")
    pal = base(smooth(0, 255), "PALETTE COLOR", 8, 8, False)
    case("palette", pal, refuse="PALETTE COLOR")
    case("jpeg12", base(smooth(0, 4095), "MONOCHROME2", 16, 12, False),
         "dcmcjpeg", ["+ee", "+un"], refuse="12-bit")

    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
