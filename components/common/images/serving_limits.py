"""The served model's limits: a request is refused, before anything is decoded, where the
conversion would have refused its images, or where the request as a whole asks more than
one served pod should give it.

The serving signature takes encoded bytes from anyone. Without limits, a 400 KB PNG that
claims 20000x20000 cost 5.2 GB and 29 s in one call, a 389 KB JPEG with 3,000 scans 144 s
of CPU, and four 99.99-megapixel PNGs in one 1.17 MB request 104 s and 8.1 GB. Each image
is checked from its header, in the graph (TensorFlow ops only, so the checks travel
inside the SavedModel), as image_header.check_bounded checks it at conversion: JPEG or
PNG (the signature's contract), at most max_pixels, at least the coded bytes its size
needs (for JPEG its entropy-coded data alone, walked marker by marker as
image_header.jpeg_scans walks it: comments and APPn segments do not count), and, for
JPEG, at most max_scans scans of any coding. The request as a whole holds at least one
image and at most max_request_images, max_request_bytes and max_request_pixels. A
refusal is an InvalidArgumentError naming the limit, and the image's index where one
image is at fault.

An empty request is refused, not answered with an empty batch: a client that sends no
image has lost its images on the way (a wrong key, an empty list), and an error says so
where zero predictions would not.

Example:
  encoded = serving_limits.checked(encoded, ServingLimits())
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from imgpipe.components.common.images import image_header

DEFAULT_MAX_PIXELS = image_header.DEFAULT_MAX_PIXELS
# The request budget is what one served pod can give one request. ServingConfig's pod
# (components/pusher/serving_files.py) has 4 GiB, 1.1 GB of it the loaded model; a
# 99.99-megapixel PNG costs about 2 GB and 26 s to decode, crop and resize. So a request
# decodes one largest image's worth of pixels (or, say, eight 12-megapixel photos).
DEFAULT_MAX_REQUEST_PIXELS = DEFAULT_MAX_PIXELS
# Bytes bound the work before the pixels (each JPEG's marker walk, the entropy decoding):
# a 100-megapixel photo is a 20 to 40 MB JPEG.
DEFAULT_MAX_REQUEST_BYTES = 64 * 2**20
# Images bound what pixels cannot: each image, a 1x1 PNG too, becomes a full-size model
# input, and a batch of them is the model's activations. KServe's batcher sends 32.
DEFAULT_MAX_REQUEST_IMAGES = 64
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Facts of one image (_image_facts), in this order.
_FACTS = ("kind", "pixels", "floor", "coded_bytes", "scans", "markers")
_JPEG, _PNG = 1, 2
# PNG colour type -> samples per pixel (gray, -, RGB, palette, gray+alpha, -, RGBA).
_PNG_SAMPLES = (1, 0, 3, 1, 2, 0, 4)
# Frame headers (SOFn) of Huffman-coded DCT JPEG: a bit a block at least. The others
# TensorFlow decodes are arithmetic-coded (image_header.ARITHMETIC_BLOCKS_PER_BYTE).
_HUFFMAN_DCT_SOF = (0xC0, 0xC2)
_SOF = (0xC0, 0xCF)  # the SOFn range, less DHT (C4), JPG (C8) and DAC (CC)
_NOT_SOF = (0xC4, 0xC8, 0xCC)


@dataclasses.dataclass(frozen=True)
class ServingLimits:
    """What one request may ask of the served model.

    Attributes:
      max_pixels: the largest image, in pixels (the conversion's max_pixels).
      max_scans: the most scans a JPEG may have (image_header.MAX_JPEG_SCANS).
      max_request_images: the most images in one request.
      max_request_bytes: the most encoded bytes in one request, over all its images.
      max_request_pixels: the most pixels one request decodes, over all its images.
    """

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_scans: int = image_header.MAX_JPEG_SCANS
    max_request_images: int = DEFAULT_MAX_REQUEST_IMAGES
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS


DEFAULT_LIMITS = ServingLimits()


def checked(encoded: tf.Tensor, limits: ServingLimits) -> tf.Tensor:
    """`encoded` [B] string, once the request and every image are within `limits`.

    The request's count and bytes are checked first, then each header is read, then
    each image and the request's pixels: nothing is walked for a request over its bytes.

    Raises (when run):
      tf.errors.InvalidArgumentError: an empty request; a request over
        max_request_images, max_request_bytes or max_request_pixels; or the first image
        out of bounds, with its index and the reason.
    """
    count = tf.shape(encoded, out_type=tf.int64)[0]
    with tf.control_dependencies(_request_asserts(encoded, count, limits)):
        facts = tf.map_fn(
            lambda data: _image_facts(data, limits.max_scans),
            encoded,
            fn_output_signature=tf.TensorSpec([len(_FACTS)], tf.int64),
            parallel_iterations=16,
        )
    with tf.control_dependencies(_image_asserts(facts, count, limits)):
        return tf.identity(encoded)


def _request_asserts(
    encoded: tf.Tensor, count: tf.Tensor, limits: ServingLimits
) -> list[tf.Operation]:
    """The request has images, and no more images or bytes than `limits` allow."""
    sizes = tf.cast(tf.strings.length(encoded), tf.int64)
    total_bytes = tf.reduce_sum(sizes)
    return [
        _assert(count > 0, "the request has no images: send at least one"),
        _assert(
            count <= limits.max_request_images,
            "the request has {} images, more than max_request_images={}: send fewer per request",
            (count, limits.max_request_images),
        ),
        _assert(
            total_bytes <= limits.max_request_bytes,
            "the request holds {} bytes of images, more than max_request_bytes={}: send fewer "
            "or smaller images",
            (total_bytes, limits.max_request_bytes),
        ),
    ]


def _image_asserts(facts: tf.Tensor, count: tf.Tensor, limits: ServingLimits) -> list[tf.Operation]:
    """Each image (by its header's `facts`) within `limits`, the first out of bounds named
    by its index and the reason; then the pixels of the whole request."""
    kind, pixels, floor, coded_bytes, scans, markers = tf.unstack(facts, axis=1)
    index = tf.range(count)
    checks = [
        (kind > 0, "is neither JPEG nor PNG (the signature takes JPEG or PNG bytes)", kind),
        (
            pixels <= limits.max_pixels,
            f"claims more than max_pixels={limits.max_pixels} pixels: a decompression bomb",
            pixels,
        ),
        (
            markers <= image_header.MAX_JPEG_MARKERS,
            f"is a JPEG with more than {image_header.MAX_JPEG_MARKERS} marker segments",
            markers,
        ),
        (
            scans <= limits.max_scans,
            f"is a JPEG with more than {limits.max_scans} scans, each a pass over the image",
            scans,
        ),
        (
            coded_bytes >= floor,
            "has too few coded bytes for the size its header claims (comments and metadata "
            "do not count)",
            coded_bytes,
        ),
    ]
    asserts = []
    for ok, reason, value in checks:
        first = tf.argmin(tf.cast(ok, tf.int32))
        asserts.append(
            _assert(
                tf.reduce_all(ok),
                "image {} " + reason + " (found {})",
                (index[first], value[first]),
            )
        )
    total = tf.reduce_sum(pixels)
    asserts.append(
        _assert(
            total <= limits.max_request_pixels,
            "the request decodes {} pixels, more than max_request_pixels={}: send fewer or "
            "smaller images",
            (total, limits.max_request_pixels),
        )
    )
    return asserts


def _assert(ok: tf.Tensor, template: str, values: tuple = ()) -> tf.Operation:
    """An assert whose message is the template, formatted with the values when it fails."""
    message = tf.strings.format(template, values) if values else tf.constant(template)
    return tf.debugging.Assert(ok, [message])


def _image_facts(data: tf.Tensor, max_scans: int) -> tf.Tensor:
    """_FACTS of one image: kind (1 JPEG, 2 PNG, 0 other), pixels, fewest coded bytes,
    coded bytes, scans, markers."""
    is_jpeg = tf.io.is_jpeg(data)
    is_png = tf.equal(tf.strings.substr(data, 0, 8), _PNG_MAGIC)
    return tf.case(
        [(is_jpeg, lambda: _jpeg_facts(data, max_scans)), (is_png, lambda: _png_facts(data))],
        default=lambda: tf.zeros([len(_FACTS)], tf.int64),
    )


def _jpeg_facts(data: tf.Tensor, max_scans: int) -> tf.Tensor:
    shape = tf.cast(tf.image.extract_jpeg_shape(data), tf.int64)
    height, width = shape[0], shape[1]
    blocks = ((height + 7) // 8) * ((width + 7) // 8)
    coded_bytes, scans, markers, sof = _jpeg_walk(data, max_scans)
    huffman = (sof >= _HUFFMAN_DCT_SOF[0]) & (sof <= _HUFFMAN_DCT_SOF[1])
    floor = tf.where(
        huffman,
        blocks // image_header.HUFFMAN_BLOCKS_PER_BYTE,
        blocks // image_header.ARITHMETIC_BLOCKS_PER_BYTE,
    )
    return tf.stack(
        [tf.constant(_JPEG, tf.int64), height * width, floor, coded_bytes, scans, markers]
    )


def _jpeg_walk(data: tf.Tensor, max_scans: int) -> tuple[tf.Tensor, ...]:
    """image_header.jpeg_scans in TensorFlow ops: (coded bytes, scans, markers, the first
    frame header's marker), each int64, stopping after max_scans + 1 scans or
    MAX_JPEG_MARKERS + 1 markers.

    Every place a marker can start (0xFF, then no stuffing, fill, TEM or restart byte) is
    found at once; the walk then steps from marker to marker, skipping each segment by its
    length and each scan's entropy-coded data to the next marker.
    """
    raw = tf.io.decode_raw(data, tf.uint8)
    size = tf.size(raw)
    ffs = tf.cast(tf.where(tf.equal(raw[:-1], 0xFF))[:, 0], tf.int32)
    after = tf.gather(raw, ffs + 1)
    is_marker = (
        (after != 0x00) & (after != 0x01) & (after != 0xFF) & ((after < 0xD0) | (after > 0xD7))
    )
    # Sorted, with the end of the data as the marker after the last.
    starts = tf.concat([tf.boolean_mask(ffs, is_marker), [size]], axis=0)

    def byte(i: tf.Tensor) -> tf.Tensor:
        return tf.cast(tf.gather(raw, tf.minimum(i, size - 1)), tf.int32)

    def next_marker(position: tf.Tensor) -> tf.Tensor:
        return tf.gather(starts, tf.searchsorted(starts, position[tf.newaxis])[0])

    def more(position, coded, scans, markers, sof):
        del coded, sof
        return (position < size) & (scans <= max_scans) & (markers <= image_header.MAX_JPEG_MARKERS)

    def step(position, coded, scans, markers, sof):
        position = next_marker(position)
        found = position < size
        marker = byte(position + 1)
        end = tf.minimum(position + 2 + byte(position + 2) * 256 + byte(position + 3), size)
        is_scan = found & tf.equal(marker, 0xDA)
        scan_end = next_marker(end)
        is_sof = (marker >= _SOF[0]) & (marker <= _SOF[1])
        for not_sof in _NOT_SOF:
            is_sof &= tf.not_equal(marker, not_sof)
        following = tf.where(
            tf.equal(marker, 0xD9),
            size,
            tf.where(tf.equal(marker, 0xD8), position + 2, tf.where(is_scan, scan_end, end)),
        )
        return (
            tf.where(found, following, size),
            coded + tf.where(is_scan, scan_end - end, 0),
            scans + tf.cast(is_scan, tf.int32),
            markers + tf.cast(found, tf.int32),
            tf.where(found & is_sof & tf.equal(sof, 0), marker, sof),
        )

    zero = tf.constant(0, tf.int32)
    _, coded, scans, markers, sof = tf.while_loop(
        more,
        step,
        (zero, zero, zero, zero, zero),
        maximum_iterations=image_header.MAX_JPEG_MARKERS + 1,
    )
    return tuple(tf.cast(value, tf.int64) for value in (coded, scans, markers, sof))


def _png_facts(data: tf.Tensor) -> tf.Tensor:
    ihdr = tf.io.decode_raw(tf.strings.substr(data, 16, 10), tf.uint8)
    ihdr = tf.cast(tf.pad(ihdr, [[0, 10 - tf.shape(ihdr)[0]]]), tf.int64)
    width = ihdr[0] * 2**24 + ihdr[1] * 2**16 + ihdr[2] * 2**8 + ihdr[3]
    height = ihdr[4] * 2**24 + ihdr[5] * 2**16 + ihdr[6] * 2**8 + ihdr[7]
    bit_depth, colour = ihdr[8], tf.minimum(ihdr[9], len(_PNG_SAMPLES) - 1)
    samples = tf.gather(tf.constant(_PNG_SAMPLES, tf.int64), colour)
    raw_row = (width * samples * bit_depth + 7) // 8 + 1
    floor = height * raw_row // image_header.DEFLATE_MAX_RATIO
    none = tf.constant(0, tf.int64)
    size = tf.cast(tf.strings.length(data), tf.int64)
    return tf.stack([tf.constant(_PNG, tf.int64), height * width, floor, size, none, none])
