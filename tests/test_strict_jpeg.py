"""The statistics' strict JPEG decode: TensorFlow's eval pixels bit for bit, from the one
decode that also names every kind of corrupt JPEG, and the fallback without the library."""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest
import simplejpeg
import tensorflow as tf
from PIL import Image

from imgpipe.components.common.formats import features as fk
from imgpipe.components.image_statistics import strict_jpeg
from imgpipe.components.image_statistics.analyze import (
    AnalysisOptions,
    BatchDecoder,
    analyze_batch,
)
from tests import imagegen

pytestmark = pytest.mark.unit

IMAGE_SIZE = 224
CROP = 0.875
SOS = b"\xff\xda"
EOI = b"\xff\xd9"


def _record(name: str, data: bytes) -> bytes:
    example = tf.train.Example()
    example.features.feature[fk.IMAGE_ENCODED_KEY].bytes_list.value.append(data)
    example.features.feature[fk.FILENAME_KEY].bytes_list.value.append(name.encode())
    return example.SerializeToString()


def _progressive(rgb: np.ndarray) -> bytes:
    return imagegen.pillow_bytes(Image.fromarray(rgb), "JPEG", quality=90, progressive=True)


def _kinds() -> dict[str, bytes]:
    """JPEGs of every layout the decode must reproduce: crops that start on an iMCU
    boundary (where a crop-decode's pixels differ from a full decode's) and off one,
    crops at the output size and resized up and down, each chroma subsampling,
    grayscale, progressive, restart markers, an EXIF rotation."""
    photo = imagegen.photo_like(256, 320, seed=1)
    ok, restart = cv2.imencode(
        ".jpg", photo[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90, cv2.IMWRITE_JPEG_RST_INTERVAL, 3]
    )
    assert ok
    return {
        "aligned-420.jpg": imagegen.jpeg_bytes(photo[:, :256]),  # crop 224 at x=16
        "aligned-wide-420.jpg": imagegen.jpeg_bytes(photo),  # crop 224 at x=48
        "resized-down.jpg": imagegen.jpeg_bytes(imagegen.photo_like(333, 500, seed=2)),
        "resized-up-odd.jpg": imagegen.jpeg_bytes(imagegen.photo_like(97, 131, seed=3)),
        "444.jpg": simplejpeg.encode_jpeg(photo, 90, colorsubsampling="444"),
        "422.jpg": simplejpeg.encode_jpeg(photo, 90, colorsubsampling="422"),
        "gray.jpg": simplejpeg.encode_jpeg(
            np.ascontiguousarray(photo[:, :, :1]), 90, colorspace="GRAY"
        ),
        "progressive.jpg": _progressive(photo),
        "restart.jpg": restart.tobytes(),
        "exif-rotated.jpg": imagegen.exif_jpeg_bytes(photo, 6),
    }


def test_the_library_is_built_where_the_statistics_look():
    assert strict_jpeg.library() is not None, (
        f"build it with: {strict_jpeg.BUILD_COMMAND} (make env does)"
    )


def test_the_strict_decode_gives_tensorflows_eval_pixels_bit_for_bit():
    decoder = BatchDecoder(IMAGE_SIZE, CROP)
    lib = strict_jpeg.library()
    assert lib is not None
    kinds = _kinds()
    for name, data in kinds.items():
        if name == "exif-rotated.jpg":
            # TensorFlow's eval decode turns it upright (upright.py); the analysis leaves
            # it to TensorFlow, and its statistics below must still agree.
            continue
        height, width = tf.image.extract_jpeg_shape(data).numpy()[:2]
        window = decoder.crop_windows([(height, width)])[0]
        pixels = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
        assert strict_jpeg.decode(lib, data, tuple(window), pixels), name
        np.testing.assert_array_equal(pixels, decoder.eval_pixels([data])[0], err_msg=name)
    # A full decode differs from the crop-decode where the window starts on an iMCU
    # boundary, so this case tells a crop-decode apart.
    full = tf.io.decode_jpeg(kinds["aligned-420.jpg"]).numpy()[16:240, 16:240]
    assert not np.array_equal(full, decoder.eval_pixels([kinds["aligned-420.jpg"]])[0])

    # The whole analysis: the same statistics and hashes as TensorFlow's decode alone.
    records = [_record(name, data) for name, data in kinds.items()]
    cmyk = imagegen.cmyk_jpeg_bytes(imagegen.photo_like(40, 40, seed=4))
    png = imagegen.png_bytes(imagegen.photo_like(40, 40, seed=5))
    records += [_record("cmyk.jpg", cmyk), _record("image.png", png)]
    unset = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    assert not strict_jpeg.decode(lib, cmyk, (2, 2, 35, 35), unset)  # left to TensorFlow
    strict, strict_keys = analyze_batch(
        records, "train", decoder, AnalysisOptions(IMAGE_SIZE, CROP)
    )
    plain, plain_keys = analyze_batch(
        records, "train", decoder, AnalysisOptions(IMAGE_SIZE, CROP, verify_images=False)
    )
    assert strict.images == plain.images == len(records) and strict.failed == 0
    np.testing.assert_array_equal(strict.pixel_hist, plain.pixel_hist)
    assert strict_keys == plain_keys


def test_the_strict_resize_gives_tensorflows_pixels_at_any_size_and_output_size():
    """eval_images' bilinear resize, redone in C, at shapes that scale up and down by
    every kind of factor (odd, prime, 1-pixel-wide, extreme aspect ratios) and at three
    output sizes."""
    lib = strict_jpeg.library()
    assert lib is not None
    rng = np.random.default_rng(7)
    shapes = [(1, 9), (9, 1), (2, 700), (700, 3), (223, 225), (224, 224), (97, 131)]
    shapes += [tuple(int(side) for side in rng.integers(1, 640, 2)) for _ in range(12)]
    for image_size in (224, 160, 299):
        decoder = BatchDecoder(image_size, CROP)
        for height, width in shapes:
            noise = rng.integers(0, 256, (height, width, 3), np.uint8)
            data = simplejpeg.encode_jpeg(noise, 85, colorsubsampling="420")
            window = decoder.crop_windows([(height, width)])[0]
            pixels = np.empty((image_size, image_size, 3), np.uint8)
            assert strict_jpeg.decode(lib, data, tuple(window), pixels)
            np.testing.assert_array_equal(
                pixels, decoder.eval_pixels([data])[0], err_msg=f"{height}x{width} to {image_size}"
            )


def test_the_strict_resize_keeps_height_and_width_apart():
    """Off-centre, non-square windows into non-square outputs, against TensorFlow's own
    crop-decode and resize with eval_images' rounding: a swap of the two axes anywhere
    would show."""
    lib = strict_jpeg.library()
    assert lib is not None
    rng = np.random.default_rng(11)
    noise = rng.integers(0, 256, (301, 457, 3), np.uint8)
    data = simplejpeg.encode_jpeg(noise, 85, colorsubsampling="420")
    for window, out_shape in (
        ((13, 40, 200, 377), (96, 160)),
        ((0, 3, 301, 120), (250, 31)),
        ((100, 0, 51, 457), (17, 229)),
    ):
        pixels = np.empty((*out_shape, 3), np.uint8)
        assert strict_jpeg.decode(lib, data, window, pixels)
        crop = tf.image.decode_and_crop_jpeg(data, window, channels=3)
        expected = tf.cast(tf.image.resize(tf.cast(crop, tf.float32), out_shape) + 0.5, tf.uint8)
        np.testing.assert_array_equal(pixels, expected.numpy(), err_msg=f"{window} {out_shape}")


def _scan(data: bytes) -> tuple[int, int]:
    """The first scan's entropy-coded data: [start, end)."""
    header = data.index(SOS)
    start = header + 2 + int.from_bytes(data[header + 2 : header + 4], "big")
    following = data.find(b"\xff", start)
    while data[following + 1] in (0x00, *range(0xD0, 0xD8)):  # stuffed byte, restart
        following = data.find(b"\xff", following + 2)
    return start, following


def _with_permuted_ac_symbols(data: bytes) -> bytes:
    """The luminance AC Huffman table still well formed, its symbols in reverse order."""
    out = bytearray(data)
    position = 2
    while out[position + 1] != SOS[1]:
        length = int.from_bytes(out[position + 2 : position + 4], "big")
        if out[position + 1] == 0xC4:
            table = position + 4
            while table < position + 2 + length:
                count = sum(out[table + 1 : table + 17])
                symbols = slice(table + 17, table + 17 + count)
                if out[table] == 0x10:
                    out[symbols] = bytes(reversed(out[symbols]))
                table += 17 + count
        position += 2 + length
    return bytes(out)


def _corrupt_cases() -> dict[str, tuple[bytes, str, bool]]:
    """name: (data, a pattern of libjpeg's reason, whether TensorFlow's decode passes it
    silently). Counts of bytes depend on how far libjpeg read ahead, hence patterns."""
    photo = imagegen.photo_like(128, 160, seed=6)
    baseline = imagegen.jpeg_bytes(photo)
    start, end = _scan(baseline)
    middle = (start + end) // 2
    progressive = _progressive(photo)
    last_scan = progressive.rindex(SOS)
    return {
        "truncated-scan.jpg": (baseline[:middle], "Premature end of JPEG file", False),
        "scan-ends-early.jpg": (
            baseline[:middle] + baseline[middle + 200 :],
            "Corrupt JPEG data: premature end of data segment",
            True,
        ),
        # After the last rows, which TensorFlow's crop-decode never reads.
        "bytes-left-over.jpg": (
            baseline[:end] + b"\x5a" * 37 + baseline[end:],
            r"Corrupt JPEG data: \d+ extraneous bytes before marker 0xd9",
            True,
        ),
        "bad-huffman-table.jpg": (
            _with_permuted_ac_symbols(baseline),
            r"Corrupt JPEG data: \d+ extraneous bytes before marker 0xd9",
            True,
        ),
        "corrupt-progressive-scan.jpg": (
            progressive[: last_scan - 40] + progressive[last_scan - 20 :],
            r"Corrupt JPEG data: \d+ extraneous bytes before marker 0xda",
            True,
        ),
    }


@pytest.fixture(params=["strict decode", "without the library"])
def decode_path(request, monkeypatch):
    """Each test twice: with the strict decode, and with the fallback (TensorFlow's
    decode after a separate check) that runs where the library is not built."""
    if request.param == "without the library":
        monkeypatch.setattr(strict_jpeg, "library", lambda: None)
    return request.param


@pytest.mark.parametrize("name", sorted(_corrupt_cases()))
def test_every_kind_of_corrupt_jpeg_is_named_with_libjpegs_reason(name, decode_path):
    data, reason, tensorflow_passes_it = _corrupt_cases()[name]
    decoder = BatchDecoder(IMAGE_SIZE, CROP)
    if tensorflow_passes_it:
        decoder.eval_pixels([data])  # no error: TensorFlow decodes it into garbage
    good = imagegen.jpeg_bytes(imagegen.photo_like(128, 160, seed=7))
    records = [_record("good.jpg", good), _record(name, data)]
    strict, _ = analyze_batch(records, "train", decoder, AnalysisOptions(IMAGE_SIZE, CROP))
    assert strict.images == 1 and [path for path, _ in strict.failures] == [name]
    assert re.fullmatch(f"corrupt jpeg: {reason}", strict.failures[0][1])


def test_without_the_library_the_statistics_say_how_to_build_it(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("IMGPIPE_ARTIFACTS", str(tmp_path))
    strict_jpeg.library.cache_clear()
    try:
        assert strict_jpeg.library() is None
    finally:
        strict_jpeg.library.cache_clear()
    (warning,) = [r.getMessage() for r in caplog.records if "strict JPEG decoder" in r.getMessage()]
    assert str(tmp_path) in warning and strict_jpeg.BUILD_COMMAND in warning
