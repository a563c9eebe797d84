"""The served model refuses what the conversion refuses, from the headers, before it
decodes: bombs of pixels, of bytes per pixel and of scans, other formats, and requests
over their budget; ordinary JPEG and PNG requests are served."""

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
        ("small budget", ServingLimits(max_request_pixels=2 * 48 * 64)),
    ):
        path = str(tmp_path_factory.mktemp("model"))
        export.export_serving_model(
            model, path, th.CLASSES, ModelInput(MEAN, STD, SIZE), limits=limits
        )
        signatures[name] = tf.saved_model.load(path).signatures[serving.SERVING_DEFAULT]

    def call(images: list[bytes], limits: str = "default"):
        return signatures[limits](**{serving.IMAGES_INPUT: tf.constant(images)})

    return call


def test_ordinary_jpeg_and_png_are_served(serve):
    photo = imagegen.photo_like(48, 64)
    out = serve(
        [imagegen.jpeg_bytes(photo), imagegen.png_bytes(photo), jpeg_tools.arithmetic_photo()]
    )
    assert out[serving.PROBABILITIES].shape == (3, len(th.CLASSES))


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: png_bomb(12_000), "claims more than max_pixels=100000000 pixels"),
        (lambda: imagegen.lying_jpeg(9000, 9000), "fewer bytes than the size its header claims"),
        (lambda: jpeg_tools.arithmetic_bomb(4000), "fewer bytes than the size its header claims"),
        (
            lambda: jpeg_tools.progressive_with_scans(2000),
            f"more than {image_header.MAX_JPEG_SCANS} scans",
        ),
        (lambda: imagegen.gif_bytes((1, 1), [(0, 0, 1, 1)]), "neither JPEG nor PNG"),
    ],
    ids=["png-bomb", "lying-jpeg", "arithmetic-bomb", "scan-bomb", "gif"],
)
def test_a_bomb_is_refused_before_decoding_naming_the_image(serve, make, reason):
    good = imagegen.jpeg_bytes(imagegen.photo_like(48, 64))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"image 1 .*{reason}"):
        serve([good, make()])


def test_a_request_over_its_pixel_budget_is_refused(serve):
    photos = [imagegen.jpeg_bytes(imagegen.photo_like(48, 64, seed=i)) for i in range(3)]
    assert serve(photos[:2], "small budget")[serving.PROBABILITIES].shape[0] == 2
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than max_request_pixels"):
        serve(photos, "small budget")
