"""The served model's limits: a request is refused, before anything is decoded, where the
conversion would have refused its images.

The serving signature takes encoded bytes from anyone. Without limits, a 400 KB PNG that
claims 20000x20000 cost 5.2 GB and 29 s in one call, and a 389 KB JPEG with 3,000 scans
144 s of CPU. Each image is checked from its header, in the graph (TensorFlow ops only,
so the checks travel inside the SavedModel): JPEG or PNG (the signature's contract), at
most max_pixels, at least the bytes its size needs (the JPEG floor of the most compact
coding, arithmetic; PNG's deflate ratio), and, for JPEG, at most max_scans scans. The
request as a whole decodes at most max_request_pixels. A refusal is an
InvalidArgumentError naming the image's index and the reason.

Example:
  encoded = serving_limits.checked(encoded, ServingLimits())
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from imgpipe.components.common.images import image_header

DEFAULT_MAX_PIXELS = image_header.DEFAULT_MAX_PIXELS
# A request decodes at most this many images' worth at the largest size.
REQUEST_IMAGES_AT_MAX = 4
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_SOS = b"\xff\xda"
# PNG colour type -> samples per pixel (gray, -, RGB, palette, gray+alpha, -, RGBA).
_PNG_SAMPLES = (1, 0, 3, 1, 2, 0, 4)


@dataclasses.dataclass(frozen=True)
class ServingLimits:
    """What one request may ask of the served model.

    Attributes:
      max_pixels: the largest image, in pixels (the conversion's max_pixels).
      max_scans: the most scans a JPEG may have (image_header.MAX_JPEG_SCANS).
      max_request_pixels: the most pixels one request decodes, over all its images.
    """

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_scans: int = image_header.MAX_JPEG_SCANS
    max_request_pixels: int = REQUEST_IMAGES_AT_MAX * DEFAULT_MAX_PIXELS


DEFAULT_LIMITS = ServingLimits()


def checked(encoded: tf.Tensor, limits: ServingLimits) -> tf.Tensor:
    """`encoded` [B] string, once every image and the request are within `limits`.

    Raises (when run):
      tf.errors.InvalidArgumentError: the first image out of bounds, with its index and
        the reason; or a request over max_request_pixels.
    """
    facts = tf.map_fn(
        _image_facts,
        encoded,
        fn_output_signature=tf.TensorSpec([4], tf.int64),
        parallel_iterations=16,
    )
    kind, pixels, floor, scans = tf.unstack(facts, axis=1)
    sizes = tf.cast(tf.strings.length(encoded), tf.int64)
    index = tf.range(tf.shape(encoded, out_type=tf.int64)[0])
    checks = [
        (kind > 0, "is neither JPEG nor PNG (the signature takes JPEG or PNG bytes)", kind),
        (
            pixels <= limits.max_pixels,
            f"claims more than max_pixels={limits.max_pixels} pixels: a decompression bomb",
            pixels,
        ),
        (sizes >= floor, "has fewer bytes than the size its header claims can be coded in", sizes),
        (
            scans <= limits.max_scans,
            f"is a JPEG with more than {limits.max_scans} scans, each a pass over the image",
            scans,
        ),
    ]
    asserts = []
    for ok, reason, value in checks:
        first = tf.argmin(tf.cast(ok, tf.int32))
        asserts.append(
            tf.debugging.Assert(
                tf.reduce_all(ok),
                [tf.strings.format("image {} {} (found {})", (index[first], reason, value[first]))],
            )
        )
    total = tf.reduce_sum(pixels)
    asserts.append(
        tf.debugging.Assert(
            total <= limits.max_request_pixels,
            [
                tf.strings.format(
                    "the request decodes {} pixels, more than max_request_pixels={}: send fewer "
                    "or smaller images",
                    (total, limits.max_request_pixels),
                )
            ],
        )
    )
    with tf.control_dependencies(asserts):
        return tf.identity(encoded)


def _image_facts(data: tf.Tensor) -> tf.Tensor:
    """[kind (1 JPEG, 2 PNG, 0 other), pixels, fewest bytes, scans] of one image."""
    is_jpeg = tf.io.is_jpeg(data)
    is_png = tf.equal(tf.strings.substr(data, 0, 8), _PNG_MAGIC)
    return tf.case(
        [(is_jpeg, lambda: _jpeg_facts(data)), (is_png, lambda: _png_facts(data))],
        default=lambda: tf.zeros([4], tf.int64),
    )


def _jpeg_facts(data: tf.Tensor) -> tf.Tensor:
    shape = tf.cast(tf.image.extract_jpeg_shape(data), tf.int64)
    height, width = shape[0], shape[1]
    blocks = ((height + 7) // 8) * ((width + 7) // 8)
    # Every FF DA is a scan: entropy-coded data never holds one (image_header).
    scans = tf.cast(tf.size(tf.strings.split(data, sep=_SOS)), tf.int64) - 1
    floor = blocks // image_header.ARITHMETIC_BLOCKS_PER_BYTE
    return tf.stack([tf.constant(1, tf.int64), height * width, floor, scans])


def _png_facts(data: tf.Tensor) -> tf.Tensor:
    ihdr = tf.io.decode_raw(tf.strings.substr(data, 16, 10), tf.uint8)
    ihdr = tf.cast(tf.pad(ihdr, [[0, 10 - tf.shape(ihdr)[0]]]), tf.int64)
    width = ihdr[0] * 2**24 + ihdr[1] * 2**16 + ihdr[2] * 2**8 + ihdr[3]
    height = ihdr[4] * 2**24 + ihdr[5] * 2**16 + ihdr[6] * 2**8 + ihdr[7]
    bit_depth, colour = ihdr[8], tf.minimum(ihdr[9], len(_PNG_SAMPLES) - 1)
    samples = tf.gather(tf.constant(_PNG_SAMPLES, tf.int64), colour)
    raw_row = (width * samples * bit_depth + 7) // 8 + 1
    floor = height * raw_row // image_header.DEFLATE_MAX_RATIO
    return tf.stack([tf.constant(2, tf.int64), height * width, floor, tf.constant(0, tf.int64)])
