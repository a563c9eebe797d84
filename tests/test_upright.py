"""Pixels as the user sees them on the TensorFlow side (components/common/images/upright.py):
the EXIF orientation read in graph ops, rotated JPEGs and transparent PNGs decoded as a
viewer shows them by the train, eval and serving inputs, and plain JPEGs unchanged."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from imgpipe.components.common.images import image_formats, preprocessing, upright
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.image_example_gen import image_codec
from imgpipe.components.trainer import export
from tests import imagegen

ORIENTATIONS = range(1, 9)


def rotated_jpeg(orientation: int, height: int = 24, width: int = 40) -> bytes:
    stored = imagegen.stored_for(imagegen.marked(height, width), orientation)
    return imagegen.exif_jpeg_bytes(stored, orientation)


def big_endian_exif_jpeg(orientation: int) -> bytes:
    """A JPEG whose APP1 EXIF is Motorola order ("MM"), after a JFIF APP0."""
    plain = imagegen.jpeg_bytes(imagegen.marked(16, 16))  # OpenCV: SOI, APP0 JFIF, ...
    tiff = b"MM\x00\x2a\x00\x00\x00\x08" + b"\x00\x02"
    tiff += b"\x01\x0f\x00\x02\x00\x00\x00\x01\x00\x00\x00\x00"  # Make: another tag first
    tiff += b"\x01\x12\x00\x03\x00\x00\x00\x01" + orientation.to_bytes(2, "big") + b"\x00\x00"
    tiff += b"\x00\x00\x00\x00"
    segment = b"Exif\x00\x00" + tiff
    app1 = b"\xff\xe1" + (len(segment) + 2).to_bytes(2, "big") + segment
    app0_end = 4 + int.from_bytes(plain[4:6], "big")
    return plain[:app0_end] + app1 + plain[app0_end:]


@pytest.mark.unit
def test_the_orientation_read_in_graph_ops_is_the_header_readers():
    encoded = [rotated_jpeg(o) for o in ORIENTATIONS]
    encoded += [big_endian_exif_jpeg(o) for o in ORIENTATIONS]
    encoded += [
        imagegen.jpeg_bytes(imagegen.marked(8, 8)),
        imagegen.png_bytes(np.zeros((4, 4, 3), np.uint8)),
        b"",
    ]
    expected = [image_formats.read_header(e).exif_orientation for e in encoded[:-1]] + [1]
    assert expected[:16] == [*ORIENTATIONS, *ORIENTATIONS]  # the files say what they should
    assert upright.exif_orientations(tf.constant(encoded)).numpy().tolist() == expected


@pytest.mark.unit
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_a_rotated_jpeg_decodes_upright_as_the_conversion_stores_it(orientation):
    data = rotated_jpeg(orientation)
    decoded = upright.decode_upright(tf.constant(data)).numpy()
    expected = image_codec.decode(data, image_formats.read_header(data), min_side=None)
    assert decoded.shape == expected.shape == (24, 40, 3)
    assert np.abs(decoded.astype(int) - expected).mean() < 3  # two JPEG decoders
    assert decoded[2, 2, 0] > 200 and decoded[-3, -3, 0] < 80  # the marker at top-left


@pytest.mark.unit
@pytest.mark.parametrize("orientation", [0, *ORIENTATIONS, 9])
def test_orient_moves_pixels_exactly_as_the_conversion(orientation):
    pixels = np.random.default_rng(orientation).integers(0, 256, (5, 7, 3), np.uint8)
    oriented = upright.orient(tf.constant(pixels), tf.constant(orientation)).numpy()
    # Out of range reads as the nearest orientation, as exif_orientations never gives.
    nearest = min(max(orientation, 1), 8)
    np.testing.assert_array_equal(oriented, image_codec.apply_orientation(pixels, nearest))


@pytest.mark.unit
def test_transparency_decodes_onto_white_exactly_as_the_conversion_composites():
    data = imagegen.half_transparent_png(6, 8)
    decoded = upright.decode_upright(tf.constant(data)).numpy()
    header = image_formats.read_header(data)
    expected = image_codec.composite_alpha(image_codec.decode(data, header, None), (255,) * 3)
    np.testing.assert_array_equal(decoded, expected)
    assert (decoded[-1] == 255).all()


@pytest.mark.unit
def test_eval_and_train_inputs_see_the_upright_opaque_image():
    size = 16
    rotated, plain = rotated_jpeg(6, 32, 32), imagegen.jpeg_bytes(imagegen.marked(32, 32))
    # The plain JPEG alone takes the crop-while-decoding path; beside a rotated one, the
    # per-image path: the same pixels either way.
    alone = preprocessing.eval_images(tf.constant([plain]), size, 1.0).numpy()
    mixed = preprocessing.eval_images(tf.constant([plain, rotated]), size, 1.0).numpy()
    np.testing.assert_array_equal(mixed[0], alone[0])
    assert np.abs(mixed[1].astype(int) - alone[0]).mean() < 4  # upright: like the plain one
    assert mixed[1][1, 1, 0] > 200 and mixed[1][-2, -2, 0] < 80

    transparent = imagegen.png_bytes(np.zeros((32, 32, 4), np.uint8))  # all see-through
    trained = preprocessing.train_images(tf.constant([transparent, rotated]), size).numpy()
    assert (trained[0] == 255).all()
    served = preprocessing.eval_image(tf.constant(transparent), size).numpy()
    assert (served == 255).all()


def _ops(function, *args) -> list[str]:
    """The op types of `function`'s graph, its branches' and loops' bodies included."""
    graph = tf.function(function).get_concrete_function(*args).graph.as_graph_def()
    return [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]


@pytest.mark.unit
def test_each_input_graph_reads_the_batchs_orientations_once():
    """The EXIF parser (one DecodePaddedRaw) is built once per batch graph, not again in
    each per-image branch: every trace of the train, eval and serving inputs builds it,
    and six copies made each small run's Trainer and Evaluator 2-4 times as long."""
    batch = tf.TensorSpec([None], tf.string)
    for ops in (
        _ops(lambda e: preprocessing.eval_images(e, 32, 0.875), batch),
        _ops(lambda e: preprocessing.train_images(e, 32), batch),
        _ops(lambda e: preprocessing.image_shapes(e), batch),
    ):
        assert ops.count("DecodePaddedRaw") == 1
        assert len(ops) < 1_500


QUADRANTS = ["top-left", "top-right", "bottom-left", "bottom-right"]


def quadrant_model(size: int) -> keras.Model:
    """'Predicts' the quadrant whose red channel is brightest: which way up it saw."""
    half = size // 2

    def quadrant_means(images: tf.Tensor) -> tf.Tensor:
        red = tf.cast(images[..., 0], tf.float32)
        return tf.stack(
            [
                tf.reduce_mean(red[:, :half, :half], [1, 2]),
                tf.reduce_mean(red[:, :half, half:], [1, 2]),
                tf.reduce_mean(red[:, half:, :half], [1, 2]),
                tf.reduce_mean(red[:, half:, half:], [1, 2]),
            ],
            axis=1,
        )

    inputs = keras.Input((size, size, 3), dtype="uint8")
    return keras.Model(inputs, keras.layers.Lambda(quadrant_means)(inputs))


@pytest.mark.component
def test_the_serving_signature_sees_bytes_that_arrive_rotated_or_transparent(tmp_path):
    size = 16
    export.export_serving_model(
        quadrant_model(size),
        str(tmp_path),
        QUADRANTS,
        ModelInput((0.0,) * 3, (1.0,) * 3, size, 1.0),
    )
    serve = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    rotated = [rotated_jpeg(o, 32, 32) for o in ORIENTATIONS]
    # Black and opaque but for a see-through bottom-right quadrant hiding black.
    rgba = np.zeros((32, 32, 4), np.uint8)
    rgba[..., 3] = 255
    rgba[16:, 16:, 3] = 0
    images = tf.constant([*rotated, imagegen.png_bytes(rgba)])
    predicted = [p.decode() for p in serve(images=images)["predicted_class"].numpy()]
    assert predicted == ["top-left"] * 8 + ["bottom-right"]
