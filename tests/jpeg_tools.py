"""Real JPEG files of the codings no Python encoder writes, made with libjpeg-turbo's own
jpegtran (Debian's libjpeg-turbo-progs, fetched once with apt-get download into the
artifact cache), and a lossless JPEG written here to the letter of the standard."""

from __future__ import annotations

import functools
import glob
import os
import shutil
import struct
import subprocess
import tempfile

import numpy as np
import pytest

from tests import imagegen

PACKAGE = "libjpeg-turbo-progs"


@functools.cache
def jpegtran() -> str:
    """The path of jpegtran, fetched into $IMGPIPE_ARTIFACTS when missing (skips the test,
    naming the fix, where apt-get cannot fetch it)."""
    on_path = shutil.which("jpegtran")
    if on_path:
        return on_path
    artifacts = os.environ.get("IMGPIPE_ARTIFACTS") or tempfile.gettempdir()
    found = glob.glob(os.path.join(artifacts, f"{PACKAGE}-*", "root", "usr", "bin", "jpegtran"))
    if found:
        return sorted(found)[-1]
    partial = tempfile.mkdtemp(prefix=f"{PACKAGE}-", suffix=".partial", dir=artifacts)
    try:
        fetched = subprocess.run(
            ["apt-get", "download", "-qq", PACKAGE], cwd=partial, capture_output=True, text=True
        )
        if fetched.returncode != 0:
            pytest.skip(f"jpegtran: `apt-get download {PACKAGE}` failed: {fetched.stderr.strip()}")
        (deb,) = glob.glob(os.path.join(partial, "*.deb"))
        version = deb.rsplit("_", 2)[1].split("%3a")[-1]
        subprocess.run(["dpkg-deb", "-x", deb, os.path.join(partial, "root")], check=True)
        os.remove(deb)
        folder = os.path.join(artifacts, f"{PACKAGE}-{version}")
        try:
            os.rename(partial, folder)
        except OSError:  # another test process fetched it first
            if not os.path.exists(folder):
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return os.path.join(folder, "root", "usr", "bin", "jpegtran")


def transcode(data: bytes, *args: str) -> bytes:
    """jpegtran ARGS on the JPEG bytes: lossless recoding (arithmetic, progressive, scans)."""
    return subprocess.run([jpegtran(), *args], input=data, capture_output=True, check=True).stdout


def arithmetic_bomb(side: int = 4000) -> bytes:
    """A flat grey side x side JPEG recoded with arithmetic coding: about a hundred bytes
    that decode to side**2 pixels."""
    from PIL import Image

    return transcode(
        imagegen.pillow_bytes(Image.new("L", (side, side), 128), "JPEG"), "-arithmetic"
    )


def arithmetic_photo(side: int = 64) -> bytes:
    """An ordinary photo-like JPEG, arithmetic-coded: a file TensorFlow decodes."""
    return transcode(imagegen.jpeg_bytes(imagegen.photo_like(side, side, seed=11)), "-arithmetic")


def progressive_with_scans(extra_scans: int, side: int = 48) -> bytes:
    """A grey progressive JPEG of 64 scans (one per coefficient, jpegtran's own limit is
    100), with its last scan repeated `extra_scans` times: libjpeg decodes such a bogus
    progression with a warning, paying a pass over the image for each scan."""
    from PIL import Image

    grey = imagegen.pillow_bytes(
        Image.fromarray(imagegen.photo_like(side, side, seed=4)).convert("L"), "JPEG"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as script:
        script.write("0: 0 0 0 0;\n" + "".join(f"0: {k} {k} 0 0;\n" for k in range(1, 64)))
        script.flush()
        data = transcode(grey, "-scans", script.name)
    if not extra_scans:
        return data
    last_scan = data.rindex(b"\xff\xda")
    end = data.rindex(b"\xff\xd9")
    return data[:end] + data[last_scan:end] * extra_scans + data[end:]


def sequential_with_scans(extra_scans: int, side: int = 48, arithmetic: bool = False) -> bytes:
    """A sequential (not progressive) colour JPEG of one scan a component, Huffman or
    arithmetic-coded, with its last scan repeated `extra_scans` times: libjpeg decodes
    every repeat into its coefficient buffer, a pass over the component each."""
    rgb = imagegen.jpeg_bytes(imagegen.photo_like(side, side, seed=4))
    coding = ["-arithmetic"] if arithmetic else []
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as script:
        script.write("0;\n1;\n2;\n")  # full spectrum, full precision: sequential
        script.flush()
        data = transcode(rgb, *coding, "-scans", script.name)
    last_scan = data.rindex(b"\xff\xda")
    end = data.rindex(b"\xff\xd9")
    return data[:end] + data[last_scan:end] * extra_scans + data[end:]


def with_segment(data: bytes, marker: int, payload_bytes: int, count: int = 1) -> bytes:
    """The JPEG with `count` segments of `marker` (0xFE a comment, 0xE0..0xEF APPn) of
    `payload_bytes` zeros each, after its start-of-image marker."""
    segment = bytes([0xFF, marker]) + struct.pack(">H", 2 + payload_bytes) + bytes(payload_bytes)
    return data[:2] + segment * count + data[2:]


def padded_arithmetic_bomb(side: int = 4000, padding: int = 20_000) -> bytes:
    """arithmetic_bomb with a comment of `padding` bytes: past the byte floor, were the
    floor counted over the whole file."""
    return with_segment(arithmetic_bomb(side), 0xFE, padding)


def lossless_grey(side: int = 16) -> bytes:
    """A lossless JPEG (SOF3, predictor 1) of a flat grey-128 image: every difference is
    0, coded with a one-symbol Huffman table. Valid to the letter of ITU T.81; TensorFlow's
    decoder refuses the coding."""
    dht = bytes([0x00]) + bytes([1] + [0] * 15) + bytes([0])  # class 0, id 0: one 1-bit code
    count = side * side  # one zero bit a sample (the code of difference 0), then ones
    bits = np.r_[np.zeros(count, np.uint8), np.ones(-count % 8, np.uint8)]
    entropy = np.packbits(bits).tobytes().replace(b"\xff", b"\xff\x00")
    return b"".join(
        [
            b"\xff\xd8",
            b"\xff\xc3" + struct.pack(">HBHHB", 11, 8, side, side, 1) + bytes([1, 0x11, 0]),
            b"\xff\xc4" + struct.pack(">H", 2 + len(dht)) + dht,
            b"\xff\xda" + struct.pack(">HB", 8, 1) + bytes([1, 0x00, 1, 0, 0]),
            entropy,
            b"\xff\xd9",
        ]
    )
