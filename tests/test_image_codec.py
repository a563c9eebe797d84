"""What happens to the pixels: pass-through, awkward colour models, resizing, orientation."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import simplejpeg
from PIL import Image, ImageOps

from imgpipe.components.common.images import image_formats
from imgpipe.components.common.images import image_header as hdr
from imgpipe.components.image_example_gen import image_codec
from imgpipe.components.image_example_gen.options import ImageOptions
from tests import imagegen

pytestmark = pytest.mark.unit


def _decode_rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(__import__("io").BytesIO(data)).convert("RGB"))


def test_jpeg_and_png_bytes_are_kept_unchanged_by_default():
    for data in (
        imagegen.jpeg_bytes(imagegen.photo_like(30, 40)),
        imagegen.png_bytes(imagegen.photo_like(30, 40)),
    ):
        image, _ = image_codec.convert_image(data, ImageOptions())
        assert image.data is data and not image.reencoded
        assert (image.height, image.width, image.channels) == (30, 40, 3)


def test_cmyk_jpeg_becomes_rgb_jpeg():
    rgb = imagegen.photo_like(24, 32)
    image, header = image_codec.convert_image(imagegen.cmyk_jpeg_bytes(rgb), ImageOptions())
    assert header.mode in ("cmyk", "ycck")
    assert (image.format, image.channels, image.reencoded) == ("jpeg", 3, True)
    assert image_formats.read_header(image.data).mode == "rgb"
    assert np.abs(_decode_rgb(image.data).astype(int) - rgb).mean() < 12


def test_sixteen_bit_png_becomes_eight_bit():
    deep = np.arange(64 * 3, dtype=np.uint16).reshape(8, 8, 3) * 300
    image, _ = image_codec.convert_image(imagegen.png_bytes(deep), ImageOptions())
    header = image_formats.read_header(image.data)
    assert (header.bit_depth, image.format) == (8, "png")
    decoded = cv2.cvtColor(cv2.imdecode(np.frombuffer(image.data, np.uint8), -1), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(decoded, np.round(deep / 257.0).astype(np.uint8))


def test_rgba_png_to_jpeg_composites_onto_the_background_never_black():
    rgba = np.zeros((10, 10, 4), np.uint8)  # fully transparent black
    rgba[:5, :, :] = (255, 0, 0, 255)  # top half opaque red
    image, _ = image_codec.convert_image(
        imagegen.png_bytes(rgba), ImageOptions(output_format="jpeg")
    )
    pixels = _decode_rgb(image.data)
    assert image.channels == 3
    assert pixels[8, 5].min() > 240  # transparent part: white, not black
    assert pixels[2, 5, 0] > 200 and pixels[2, 5, 1] < 60
    grey_bg, _ = image_codec.convert_image(
        imagegen.png_bytes(rgba), ImageOptions(output_format="jpeg", background=(128, 128, 128))
    )
    assert abs(int(_decode_rgb(grey_bg.data)[8, 5, 0]) - 128) < 8


@pytest.mark.parametrize(
    "options", [ImageOptions(), ImageOptions(resize=3)], ids=["kept", "resized"]
)
def test_transparency_is_composited_onto_white_even_passed_through(options):
    """The README's promise, without --rgb: a transparent pixel is white, not black."""
    image, _ = image_codec.convert_image(imagegen.half_transparent_png(6, 6), options)
    assert (image.format, image.channels, image.reencoded, image.composited) == (
        "png",
        3,
        True,
        True,
    )
    pixels = _decode_rgb(image.data)
    assert pixels[-1].min() >= 250  # the transparent half: white
    assert pixels[0, 0, 0] > 200 and pixels[0, 0, 1] < 60


def test_an_opaque_alpha_channel_is_dropped_but_not_counted_as_composited():
    rgba = np.full((4, 4, 4), 255, np.uint8)
    image, _ = image_codec.convert_image(imagegen.png_bytes(rgba), ImageOptions())
    assert image.channels == 3 and not image.composited


def test_grayscale_keeps_one_channel_unless_rgb_is_asked():
    gray = imagegen.photo_like(16, 16)[:, :, 0]
    data = imagegen.pillow_bytes(Image.fromarray(gray), "JPEG")
    kept, _ = image_codec.convert_image(data, ImageOptions(resize=8))
    assert kept.channels == 1 and image_formats.read_header(kept.data).channels == 1
    rgb, _ = image_codec.convert_image(data, ImageOptions(channels=3))
    assert rgb.channels == 3 and image_formats.read_header(rgb.data).channels == 3


@pytest.mark.parametrize("fmt", ["GIF", "BMP", "WEBP"])
def test_other_formats_are_reencoded(fmt):
    source = imagegen.photo_like(12, 20)
    data = imagegen.pillow_bytes(
        Image.fromarray(source), fmt, **({"lossless": True} if fmt == "WEBP" else {})
    )
    as_png, _ = image_codec.convert_image(data, ImageOptions())
    assert as_png.format == "png" and (as_png.height, as_png.width) == (12, 20)
    if fmt != "GIF":  # GIF is paletted, so lossy by nature
        np.testing.assert_array_equal(_decode_rgb(as_png.data), source)
    as_jpeg, _ = image_codec.convert_image(data, ImageOptions(other_formats_to="jpeg"))
    assert as_jpeg.format == "jpeg"


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_when_pixels_are_reencoded(orientation):
    source = imagegen.photo_like(24, 40, seed=3)
    data = imagegen.exif_jpeg_bytes(source, orientation)
    image, _ = image_codec.convert_image(data, ImageOptions(quality=95))
    expected = np.asarray(ImageOps.exif_transpose(Image.open(__import__("io").BytesIO(data))))
    assert (image.height, image.width) == expected.shape[:2]
    assert np.abs(_decode_rgb(image.data).astype(int) - expected).mean() < 6


@pytest.mark.parametrize("orientation", range(2, 9))
def test_a_rotated_jpeg_is_stored_upright_even_passed_through(orientation):
    upright = imagegen.marked(24, 40)
    data = imagegen.exif_jpeg_bytes(imagegen.stored_for(upright, orientation), orientation)
    image, _ = image_codec.convert_image(data, ImageOptions())
    assert image.reencoded and image.rotated and not image.composited
    assert image_formats.read_header(image.data).exif_orientation == 1  # not rotated twice
    pixels = _decode_rgb(image.data)
    assert pixels.shape[:2] == (24, 40)
    assert np.abs(pixels.astype(int) - upright).mean() < 6
    assert pixels[2, 2, 0] > 200 and pixels[-3, -3, 0] < 80  # the marker at top-left


def test_an_upright_jpeg_is_kept_byte_for_byte():
    data = imagegen.exif_jpeg_bytes(imagegen.marked(24, 40), 1)
    image, _ = image_codec.convert_image(data, ImageOptions())
    assert image.data is data and not image.reencoded and not image.rotated


def test_resize_shorter_side_and_center_crop():
    data = imagegen.jpeg_bytes(imagegen.photo_like(300, 500))
    resized, _ = image_codec.convert_image(data, ImageOptions(resize=100))
    assert (resized.height, resized.width) == (100, 167)
    cropped, _ = image_codec.convert_image(data, ImageOptions(resize=100, center_crop=True))
    assert (cropped.height, cropped.width, cropped.format) == (100, 100, "jpeg")


def test_large_jpeg_is_decoded_reduced_in_the_dct_domain():
    data = imagegen.jpeg_bytes(imagegen.photo_like(800, 1200))
    header = image_formats.read_header(data)
    reduced = image_codec.decode(data, header, min_side=100)
    assert 100 <= min(reduced.shape[:2]) <= 200  # 1/4 scale, not the full 800x1200
    full = simplejpeg.decode_jpeg(data)
    assert full.shape[:2] == (800, 1200)


def test_kept_jpeg_pixels_are_decoded_with_the_accurate_idct_as_opencv_does():
    data = imagegen.jpeg_bytes(imagegen.photo_like(96, 128))
    header = image_formats.read_header(data)
    opencv = cv2.cvtColor(
        cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB
    )
    np.testing.assert_array_equal(image_codec.decode(data, header, min_side=None), opencv)
    fast = image_codec.decode(data, header, min_side=None, accurate=False)
    assert not np.array_equal(fast, opencv)  # the fast IDCT is only for checks


def test_jpeg_encode_is_opencvs_at_the_quality_asked_for():
    pixels = imagegen.photo_like(64, 80)
    encoded = image_codec.encode(pixels, "jpeg", 90)
    header = image_formats.read_header(encoded)
    assert (header.height, header.width, header.mode) == (64, 80, "rgb")
    ok, opencv = cv2.imencode(
        ".jpg", cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90]
    )
    assert ok and encoded == opencv.tobytes()
    gray = image_codec.encode(pixels[:, :, 0], "jpeg", 90)
    assert image_formats.read_header(gray).mode == "gray"


def test_decompression_bomb_is_refused_from_the_header_alone():
    # A PNG header claiming 20000 x 20000 with no pixel data at all: decoding is never tried.
    bomb = bytearray(imagegen.png_bytes(np.zeros((1, 1, 3), np.uint8)))
    bomb[16:24] = (20000).to_bytes(4, "big") + (20000).to_bytes(4, "big")
    with pytest.raises(hdr.ImageHeaderError, match="decompression bomb: 20000x20000"):
        image_codec.convert_image(bytes(bomb), ImageOptions())


def test_verify_decode_catches_a_corrupt_body_with_intact_markers():
    data = bytearray(imagegen.png_bytes(imagegen.photo_like(32, 32)))
    data[60:200] = b"\x00" * 140  # corrupt IDAT, IEND intact
    image_codec.convert_image(bytes(data), ImageOptions())  # header check passes
    with pytest.raises(image_codec.ImageDecodeError, match="undecodable png"):
        image_codec.convert_image(bytes(data), ImageOptions(verify="decode"))


@pytest.mark.parametrize(
    "options, decodes",
    [
        (ImageOptions(), False),
        (ImageOptions(resize=64), True),
        (ImageOptions(quality=80), True),
        (ImageOptions(channels=3), True),
        (ImageOptions(verify="decode"), True),
    ],
)
def test_decodes_every_image_matches_what_the_codec_does(options, decodes):
    """The converter runs its thread pool exactly when every image's pixels are decoded."""
    jpeg = imagegen.jpeg_bytes(imagegen.photo_like(24, 20))
    header = image_formats.read_header(jpeg)
    assert options.decodes_every_image is decodes
    assert (image_codec.needs_pixels(header, options) or options.verify == "decode") is decodes


@pytest.mark.parametrize(
    "data, reason",
    [
        # The 35-byte GIF: a 1x1 screen with a 60000x60000 frame.
        (imagegen.gif_bytes((1, 1), [(0, 0, 60000, 60000)]), "bomb: frame 0: 60000x60000"),
        # Under max_pixels, but 9000x9000 cannot come from a few bytes of LZW codes.
        (imagegen.gif_bytes((1, 1), [(0, 0, 9000, 9000)]), "cannot hold the 9000x9000 canvas"),
        (imagegen.gif_bytes((1, 1), [(0, 0, 1, 1), (40000, 40000, 1, 1)]), "canvas: 40001x"),
        (imagegen.gif_bytes((1, 1), [(0, 0, 1, 1), (0, 0, 20000, 20000)]), "bomb: frame 1"),
        (imagegen.animated_bytes("PNG", later=(20000, 20000)), "bomb: frame 1: 20000x20000"),
        (imagegen.animated_bytes("PNG", later=(9, 9)), "frame 1: 9x9 at \\(0, 0\\) lies outside"),
        (imagegen.animated_bytes("WEBP", later=(16000, 16000)), "bomb: frame 1: 16000x16000"),
        (imagegen.lying_jpeg(20000, 20000), "bomb: 20000x20000"),
        # A few hundred bytes "of" 100 MP: refused before any allocation.
        (imagegen.lying_jpeg(10000, 10000), "cannot hold the 10000x10000 image"),
    ],
)
def test_every_frame_and_every_claimed_size_is_checked_before_decoding(data, reason):
    with pytest.raises(hdr.ImageHeaderError, match=reason):
        image_codec.convert_image(data, ImageOptions())


@pytest.mark.parametrize(
    "data",
    [
        imagegen.gif_bytes((1, 1), [(0, 0, 1, 1)]),
        imagegen.gif_bytes((4, 4), [(0, 0, 1, 1), (3, 3, 1, 1)]),
        imagegen.animated_bytes("PNG"),
        imagegen.animated_bytes("WEBP"),
    ],
)
def test_well_formed_animations_convert_from_their_first_frame(data):
    image, header = image_codec.convert_image(data, ImageOptions())
    assert (image.width, image.height) == (header.width, header.height)
    assert image_formats.read_header(image.data).format in ("png", "jpeg")


def test_a_decoder_failure_of_any_kind_is_an_image_error():
    # Garbage LZW codes in a well-formed GIF: OpenCV gives up, then Pillow raises OSError.
    gif = bytearray(imagegen.gif_bytes((4, 4), [(0, 0, 4, 4)]))
    gif[-4:-2] = b"\xff\xff"
    with pytest.raises(image_codec.ImageDecodeError, match="^undecodable gif: broken data"):
        image_codec.convert_image(bytes(gif), ImageOptions())
    # CMYK goes through OpenCV, which decodes corrupt data without a word.
    cmyk = bytearray(imagegen.cmyk_jpeg_bytes(imagegen.photo_like(128, 128)))
    middle = len(cmyk) // 2
    cmyk[middle : middle + 50] = np.random.default_rng(0).integers(1, 255, 50, np.uint8).tobytes()
    with pytest.raises(image_codec.ImageDecodeError, match="Corrupt JPEG data"):
        image_codec.convert_image(bytes(cmyk), ImageOptions())
