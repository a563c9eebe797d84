"""The served model refuses what the conversion refuses, from the headers, before it
decodes: bombs of pixels, of coded bytes per pixel (padding does not count) and of scans
of any coding, marker floods, other formats; and requests that are empty or over their
budget of images, bytes or pixels. Ordinary JPEG and PNG requests are served."""

from __future__ import annotations

import struct
import zlib

import pytest
import tensorflow as tf

from imgpipe.components.common.formats import serving
from imgpipe.components.common.images import image_header
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.common.images.serving_limits import ServingLimits
from tests import imagegen, jpeg_tools
from tests import trainer_helpers as th

pytestmark = pytest.mark.component

SIZE = 32
MEAN, STD = (110.0, 80.0, 110.0), (70.0, 60.0, 70.0)


def png_bomb(side: int) -> bytes:
    """A real grey PNG of side x side zeros: deflate packs it about 1000:1."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    packer, row = zlib.compressobj(9), b"\x00" * (side + 1)
    data = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


FEWER_CODED_BYTES = "too few coded bytes for the size its header claims"
MORE_SCANS = f"more than {image_header.MAX_JPEG_SCANS} scans"


def stray_byte(jpeg: bytes) -> bytes:
    """The JPEG with a comment and a stray byte before its first scan: libjpeg skips the
    byte (with a warning) and decodes every scan after it."""
    sos = jpeg.index(b"\xff\xda")
    return jpeg[:sos] + b"\xff\xfe\x00\x02\x00" + jpeg[sos:]


def marker_flood() -> bytes:
    """A small JPEG with 100,000 empty comments after its scan."""
    photo = imagegen.jpeg_bytes(imagegen.photo_like(16, 16))
    end = photo.rindex(b"\xff\xd9")
    return photo[:end] + b"\xff\xfe\x00\x02" * 100_000 + photo[end:]


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    from imgpipe.components.trainer import export
    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer.config import TrainerConfig

    model = model_lib.build_model(
        TrainerConfig(backbone="tiny_cnn", image_size=SIZE),
        len(th.CLASSES),
        ModelInput(MEAN, STD, SIZE),
    )
    signatures = {}
    for name, limits in (
        ("default", ServingLimits()),
        (
            "small budget",
            ServingLimits(
                max_request_images=3, max_request_bytes=50_000, max_request_pixels=2 * 48 * 64
            ),
        ),
    ):
        path = str(tmp_path_factory.mktemp("model"))
        export.export_serving_model(
            model, path, th.CLASSES, ModelInput(MEAN, STD, SIZE), limits=limits
        )
        signatures[name] = tf.saved_model.load(path).signatures[serving.SERVING_DEFAULT]

    def call(images: list[bytes], limits: str = "default"):
        return signatures[limits](**{serving.IMAGES_INPUT: tf.constant(images, tf.string)})

    return call


def test_ordinary_jpeg_and_png_are_served(serve):
    photo = imagegen.photo_like(48, 64)
    exif = imagegen.exif_jpeg_bytes(photo, 6)  # its thumbnail's scan is not counted
    images = [
        imagegen.jpeg_bytes(photo),
        imagegen.png_bytes(photo),
        jpeg_tools.arithmetic_photo(),
        jpeg_tools.sequential_with_scans(0),
        jpeg_tools.sequential_with_scans(0, arithmetic=True),
        jpeg_tools.progressive_with_scans(0),
        jpeg_tools.with_segment(exif, 0xFE, 30_000),  # a long comment
    ]
    out = serve(images)
    assert out[serving.PROBABILITIES].shape == (len(images), len(th.CLASSES))


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: png_bomb(12_000), "claims more than max_pixels=100000000 pixels"),
        (lambda: imagegen.lying_jpeg(9000, 9000), FEWER_CODED_BYTES),
        (lambda: jpeg_tools.arithmetic_bomb(4000), FEWER_CODED_BYTES),
        (jpeg_tools.padded_arithmetic_bomb, FEWER_CODED_BYTES),
        (
            lambda: jpeg_tools.with_segment(jpeg_tools.arithmetic_bomb(4000), 0xE2, 20_000),
            FEWER_CODED_BYTES,
        ),
        (lambda: jpeg_tools.progressive_with_scans(2000), MORE_SCANS),
        (lambda: jpeg_tools.sequential_with_scans(2000), MORE_SCANS),
        (lambda: jpeg_tools.sequential_with_scans(2000, arithmetic=True), MORE_SCANS),
        (lambda: stray_byte(jpeg_tools.sequential_with_scans(2000)), MORE_SCANS),
        (marker_flood, f"more than {image_header.MAX_JPEG_MARKERS} marker segments"),
        (lambda: imagegen.gif_bytes((1, 1), [(0, 0, 1, 1)]), "neither JPEG nor PNG"),
    ],
    ids=[
        "png-bomb",
        "lying-jpeg",
        "arithmetic-bomb",
        "comment-padded-arithmetic-bomb",
        "app2-padded-arithmetic-bomb",
        "progressive-scan-bomb",
        "sequential-huffman-scan-bomb",
        "sequential-arithmetic-scan-bomb",
        "stray-byte-scan-bomb",
        "marker-flood",
        "gif",
    ],
)
def test_a_bomb_is_refused_before_decoding_naming_the_image(serve, make, reason):
    good = imagegen.jpeg_bytes(imagegen.photo_like(48, 64))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"image 1 .*{reason}"):
        serve([good, make()])


def test_a_request_over_its_budget_is_refused_naming_the_limit(serve):
    photos = [imagegen.jpeg_bytes(imagegen.photo_like(48, 64, seed=i)) for i in range(3)]
    assert serve(photos[:2], "small budget")[serving.PROBABILITIES].shape[0] == 2
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than max_request_pixels=6144"):
        serve(photos, "small budget")
    tiny = imagegen.jpeg_bytes(imagegen.photo_like(8, 8))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="4 images, more than max_request_images=3"
    ):
        serve([tiny] * 4, "small budget")
    padded = jpeg_tools.with_segment(tiny, 0xFE, 60_000)
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than max_request_bytes=50000"):
        serve([padded], "small budget")


def test_the_default_request_budget_is_one_largest_image(serve):
    """Four 99.99-megapixel PNGs in one 1.17 MB request took 104 s and 8.1 GB; one
    largest image is the request's budget, and two are refused before decoding."""
    largest = png_bomb(9999)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"decodes 199960002 pixels, more than max_request_pixels=100000000",
    ):
        serve([largest, largest])


def test_an_empty_request_is_refused_with_a_reason(serve):
    for limits in ("default", "small budget"):
        with pytest.raises(tf.errors.InvalidArgumentError, match="the request has no images"):
            serve([], limits)
