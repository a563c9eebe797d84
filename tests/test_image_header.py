"""Header parsing: format from magic bytes, size and channels without decoding."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from PIL import Image

from imgpipe.components.common.images import image_formats
from imgpipe.components.common.images import image_header as hdr
from tests import imagegen

pytestmark = pytest.mark.unit


def test_jpeg_rgb_and_gray_sizes_come_from_the_header():
    rgb = imagegen.photo_like(37, 53)
    header = image_formats.read_header(imagegen.jpeg_bytes(rgb))
    assert (header.format, header.height, header.width, header.channels, header.mode) == (
        "jpeg",
        37,
        53,
        3,
        "rgb",
    )
    gray = imagegen.pillow_bytes(Image.fromarray(rgb[:, :, 0]), "JPEG")
    assert image_formats.read_header(gray).channels == 1


def test_cmyk_jpeg_is_recognised():
    header = image_formats.read_header(imagegen.cmyk_jpeg_bytes(imagegen.photo_like(20, 30)))
    assert header.mode in ("cmyk", "ycck") and header.channels == 4


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_exif_orientation_is_read(orientation):
    data = imagegen.exif_jpeg_bytes(imagegen.photo_like(20, 30), orientation)
    assert image_formats.read_header(data).exif_orientation == orientation


def test_png_modes_and_bit_depth():
    rgba = np.zeros((5, 7, 4), np.uint8)
    header = image_formats.read_header(imagegen.png_bytes(rgba))
    assert (header.width, header.height, header.channels, header.mode) == (7, 5, 4, "rgba")
    deep = image_formats.read_header(imagegen.png_bytes(np.zeros((4, 4), np.uint16)))
    assert (deep.bit_depth, deep.channels) == (16, 1)
    palette = Image.fromarray(imagegen.photo_like(6, 6)).convert("P")
    assert image_formats.read_header(imagegen.pillow_bytes(palette, "PNG")).mode == "palette"
    palette.info["transparency"] = 0
    assert (
        image_formats.read_header(imagegen.pillow_bytes(palette, "PNG", transparency=0)).channels
        == 4
    )


@pytest.mark.parametrize("fmt, expected", [("GIF", "gif"), ("BMP", "bmp"), ("WEBP", "webp")])
def test_other_formats_by_magic_bytes(fmt, expected):
    data = imagegen.pillow_bytes(Image.fromarray(imagegen.photo_like(9, 11)), fmt)
    header = image_formats.read_header(data)
    assert (header.format, header.height, header.width) == (expected, 9, 11)


def test_format_comes_from_content_not_name():
    png = imagegen.png_bytes(imagegen.photo_like(4, 4))
    assert image_formats.sniff_format(png) == "png"  # whatever the file is called


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty file"),
        (b"hello, I am text pretending to be a jpeg", "not an image"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "truncated jpeg"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "truncated png"),
    ],
)
def test_bad_bytes_give_a_reason(data, reason):
    with pytest.raises(hdr.ImageHeaderError, match=reason):
        image_formats.read_header(data)


def test_truncated_body_is_caught_without_decoding():
    jpeg = imagegen.jpeg_bytes(imagegen.photo_like(64, 64))
    hdr.check_complete(jpeg, image_formats.read_header(jpeg))
    with pytest.raises(hdr.ImageHeaderError, match="truncated jpeg"):
        hdr.check_complete(jpeg[: len(jpeg) // 2], image_formats.read_header(jpeg))
    png = imagegen.png_bytes(imagegen.photo_like(64, 64))
    with pytest.raises(hdr.ImageHeaderError, match="truncated png"):
        hdr.check_complete(png[:-40], image_formats.read_header(png))


def _uniform(fmt: str, mode: str, **kwargs) -> bytes:
    return imagegen.pillow_bytes(Image.new(mode, (3000, 2000)), fmt, **kwargs)


@pytest.mark.parametrize(
    "data",
    [
        # The most compressible real files: a uniform image, at each format's best.
        _uniform("JPEG", "RGB", quality=1, progressive=True, optimize=True),
        _uniform("JPEG", "L", quality=1, progressive=True, optimize=True),
        _uniform("PNG", "RGB", optimize=True),
        _uniform("PNG", "1", optimize=True),
        _uniform("GIF", "P"),
        _uniform("BMP", "RGB"),
        _uniform("WEBP", "RGB", lossless=True),
    ],
)
def test_no_real_file_is_shorter_than_its_size_requires(data):
    header = image_formats.read_header(data)
    assert header.min_bytes <= len(data)
    hdr.check_complete(data, header)


def test_a_header_that_claims_more_than_the_bytes_can_hold_is_refused():
    png = bytearray(imagegen.png_bytes(imagegen.photo_like(8, 8)))
    png[16:24] = struct.pack(">II", 10000, 10000)  # 300 MB of pixels in a 300-byte file
    bmp = imagegen.pillow_bytes(Image.fromarray(imagegen.photo_like(40, 40)), "BMP")
    webp = imagegen.pillow_bytes(Image.fromarray(imagegen.photo_like(40, 40)), "WEBP")
    for data in (imagegen.lying_jpeg(10000, 10000), bytes(png), bmp[:-100], webp[:-10]):
        header = image_formats.read_header(data)
        with pytest.raises(hdr.ImageHeaderError, match=f"truncated or corrupt {header.format}"):
            hdr.check_complete(data, header)


def test_frames_are_read_from_every_animated_format():
    gif = imagegen.gif_bytes((5, 5), [(0, 0, 1, 1), (2, 3, 1, 1)])
    assert list(image_formats.frames(gif, image_formats.read_header(gif))) == [
        hdr.Frame(0, 0, 1, 1),
        hdr.Frame(2, 3, 1, 1),
    ]
    for fmt in ("PNG", "WEBP"):
        data = imagegen.animated_bytes(fmt, size=8, later=(6, 7))
        header = image_formats.read_header(data)
        assert header.animated
        assert [(f.width, f.height) for f in image_formats.frames(data, header)] == [(8, 8), (6, 7)]
    with pytest.raises(hdr.ImageHeaderError, match="truncated gif"):
        list(image_formats.frames(gif[:20], image_formats.read_header(gif)))


def test_the_byte_floor_covers_arithmetic_coding():
    from tests import jpeg_tools

    bomb = jpeg_tools.arithmetic_bomb(4000)
    header = image_formats.read_header(bomb)
    assert len(bomb) < 1000 and header.min_bytes == 250_000 // hdr.ARITHMETIC_BLOCKS_PER_BYTE
    with pytest.raises(hdr.ImageHeaderError, match=r"cannot hold the 4000x4000 image"):
        hdr.check_complete(bomb, header)
    photo = jpeg_tools.arithmetic_photo()
    hdr.check_complete(
        photo, image_formats.read_header(photo)
    )  # an ordinary arithmetic file passes


def test_scans_are_counted_and_a_scan_bomb_is_refused():
    from tests import jpeg_tools

    progressive = jpeg_tools.progressive_with_scans(0)
    assert hdr.jpeg_scans(progressive, stop_after=1000).scans == 64
    header = image_formats.read_header(progressive)
    assert header.jpeg_coding == hdr.JPEG_PROGRESSIVE
    hdr.check_complete(progressive, header)
    bomb = jpeg_tools.progressive_with_scans(2000)
    assert hdr.jpeg_scans(bomb, stop_after=hdr.MAX_JPEG_SCANS).scans == hdr.MAX_JPEG_SCANS + 1
    with pytest.raises(hdr.ImageHeaderError, match=r"progressive jpeg with more than 100 scans"):
        hdr.check_complete(bomb, image_formats.read_header(bomb))
    # A baseline JPEG holds one scan, and EXIF's thumbnail scans are not counted.
    assert hdr.jpeg_scans(imagegen.jpeg_bytes(imagegen.photo_like(16, 16)), 10).scans == 1


@pytest.mark.parametrize("arithmetic", [False, True], ids=["huffman", "arithmetic"])
def test_scans_of_a_sequential_jpeg_are_counted_too(arithmetic):
    from tests import jpeg_tools

    three = jpeg_tools.sequential_with_scans(0, arithmetic=arithmetic)
    header = image_formats.read_header(three)
    assert header.jpeg_coding == hdr.JPEG_SEQUENTIAL
    assert hdr.jpeg_scans(three, stop_after=100).scans == 3
    hdr.check_complete(three, header)
    bomb = jpeg_tools.sequential_with_scans(2000, arithmetic=arithmetic)
    with pytest.raises(hdr.ImageHeaderError, match=r"sequential jpeg with more than 100 scans"):
        hdr.check_complete(bomb, image_formats.read_header(bomb))
    # A stray byte between two segments hides no scan: libjpeg skips it, so does the walk.
    sos = bomb.index(b"\xff\xda")
    stray = bomb[:sos] + b"\xff\xfe\x00\x02\x00" + bomb[sos:]
    assert hdr.jpeg_scans(stray, stop_after=100).scans == 101


@pytest.mark.parametrize("marker", [0xFE, 0xE1, 0xEF], ids=["COM", "APP1", "APP15"])
def test_the_byte_floor_counts_coded_bytes_not_padding(marker):
    from tests import jpeg_tools

    bomb = jpeg_tools.arithmetic_bomb(4000)
    padded = jpeg_tools.with_segment(bomb, marker, 20_000)
    header = image_formats.read_header(padded)
    assert len(padded) > 5 * header.min_bytes  # past a floor over the whole file
    assert hdr.jpeg_scans(padded, stop_after=100).coded_bytes == (
        hdr.jpeg_scans(bomb, stop_after=100).coded_bytes
    )
    with pytest.raises(hdr.ImageHeaderError, match=r"coded image data cannot hold the 4000x4000"):
        hdr.check_complete(padded, header)
    # A real file's padding changes nothing: its image is coded in its scans.
    photo = jpeg_tools.with_segment(imagegen.jpeg_bytes(imagegen.photo_like(64, 64)), marker, 9)
    hdr.check_complete(photo, image_formats.read_header(photo))


def test_a_flood_of_markers_is_refused_after_a_bounded_walk():
    photo = imagegen.jpeg_bytes(imagegen.photo_like(16, 16))
    many = hdr.MAX_JPEG_MARKERS
    with pytest.raises(hdr.ImageHeaderError, match=f"more than {many} marker segments before"):
        image_formats.read_header(b"\xff\xd8" + b"\xff\xfe\x00\x02" * 100_000 + photo[2:])
    end = photo.rindex(b"\xff\xd9")
    after_the_scan = photo[:end] + b"\xff\xfe\x00\x02" * 100_000 + photo[end:]
    assert hdr.jpeg_scans(after_the_scan, stop_after=100).markers == many + 1
    with pytest.raises(hdr.ImageHeaderError, match=f"more than {many} marker segments"):
        hdr.check_complete(after_the_scan, image_formats.read_header(after_the_scan))


def test_codings_tensorflow_cannot_decode_are_refused_by_name():
    from tests import jpeg_tools

    lossless = jpeg_tools.lossless_grey()
    header = image_formats.read_header(lossless)
    assert header.jpeg_coding == hdr.JPEG_LOSSLESS
    with pytest.raises(hdr.ImageHeaderError, match="lossless jpeg: TensorFlow cannot decode it"):
        hdr.check_complete(lossless, header)
    twelve_bit = bytearray(imagegen.jpeg_bytes(imagegen.photo_like(16, 16)))
    sof = twelve_bit.index(b"\xff\xc0")
    twelve_bit[sof + 4] = 12  # the frame header's sample precision
    with pytest.raises(hdr.ImageHeaderError, match="12-bit jpeg"):
        hdr.check_complete(bytes(twelve_bit), image_formats.read_header(bytes(twelve_bit)))
