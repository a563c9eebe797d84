"""Pixels as the user sees them, in TensorFlow ops: EXIF orientation applied, and
transparency composited onto white.

`tf.io.decode_jpeg` ignores EXIF, so a phone's JPEG (orientation 6) decodes sideways,
and `decode_png(channels=3)` drops alpha, so a transparent pixel decodes as whatever
colour it hides, black for most. ImageExampleGen's conversion stores images upright and
opaque (image_codec.decode and composite_alpha); this module does the same for bytes
that reach the model without it (the serving signature, Examples written before), and is
the one decode the training, evaluation and serving inputs take for such images
(preprocessing.py). Graph ops only, no tf.py_function, so it runs inside a SavedModel.

The orientation is read from the first EXIF_WINDOW_BYTES bytes: the JPEG's segments
are walked to its APP1 "Exif" segment (at most MAX_SEGMENTS of them), then IFD0's
entries (at most MAX_IFD_ENTRIES) are searched for tag 0x0112, as
header_parsers.exif_orientation reads them in Python. A value outside 1..8, or any field
beyond the window, reads as 1 (upright).
"""

from __future__ import annotations

import tensorflow as tf

EXIF_WINDOW_BYTES = 4096
MAX_SEGMENTS = 8
MAX_IFD_ENTRIES = 32
ORIENTATION_TAG = 0x0112
# What transparency is composited onto: white, as ImageOptions.background's default.
BACKGROUND = 255
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def exif_orientations(encoded: tf.Tensor) -> tf.Tensor:
    """The EXIF orientation (int32, 1..8) of each encoded image of `encoded` [B]; 1 for an
    image that is not a JPEG or has none. Vectorized over the batch, and each field read
    with one gather: about 150 small ops per batch, not per image (every trace of an
    input or serving graph builds them, so their number is a fixed cost of each run)."""
    window = EXIF_WINDOW_BYTES + 16  # zeros past the end, so every read is in bounds
    data = tf.cast(
        tf.io.decode_raw(
            tf.strings.substr(encoded, 0, EXIF_WINDOW_BYTES), tf.uint8, fixed_length=window
        ),
        tf.int32,
    )
    size = tf.minimum(tf.strings.length(encoded), EXIF_WINDOW_BYTES)

    def bytes_at(at: tf.Tensor, count: int) -> tf.Tensor:
        """The `count` bytes from each offset of `at` [B] or [B, K]: [..., count]."""
        offsets = tf.clip_by_value(at[..., None] + tf.range(count), 0, window - 1)
        return tf.gather(data, offsets, batch_dims=1)

    exif_id = tf.constant(list(b"Exif\x00\x00"))

    def next_segment(pos: tf.Tensor, exif: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # A segment's head: 0xFF, its marker, its big-endian length, then "Exif\0\0".
        head = bytes_at(pos, 10)
        marker = head[:, 1]
        is_marker = tf.equal(head[:, 0], 0xFF) & (pos + 4 <= size)
        named = tf.reduce_all(tf.equal(head[:, 4:], exif_id), axis=1)
        is_exif = is_marker & tf.equal(marker, 0xE1) & named
        exif = tf.where((exif < 0) & is_exif, pos + 10, exif)
        going = is_marker & tf.not_equal(marker, 0xDA) & (exif < 0)
        return tf.where(going, pos + 2 + head[:, 2] * 256 + head[:, 3], pos), exif

    # A loop, not MAX_SEGMENTS copies of its body: a third of the graph's ops.
    _, exif = tf.while_loop(
        lambda pos, exif: tf.constant(True),
        next_segment,
        (tf.fill(tf.shape(encoded), 2), tf.fill(tf.shape(encoded), -1)),
        maximum_iterations=MAX_SEGMENTS,
    )

    little = tf.equal(bytes_at(exif, 1)[:, 0], 0x49)  # "II"; "MM" is big-endian

    def read(at: tf.Tensor, width: int) -> tf.Tensor:
        values = bytes_at(at, width)
        big = tf.reduce_sum(values * [1 << (8 * (width - 1 - i)) for i in range(width)], -1)
        small = tf.reduce_sum(values * [1 << (8 * i) for i in range(width)], -1)
        return tf.where(little if at.shape.rank == 1 else little[:, None], small, big)

    ifd = exif + read(exif + 4, 4)
    count = read(ifd, 2)
    entries = ifd[:, None] + 2 + 12 * tf.range(MAX_IFD_ENTRIES)
    found = (
        tf.equal(read(entries, 2), ORIENTATION_TAG)
        & (tf.range(MAX_IFD_ENTRIES) < count[:, None])
        & (entries + 10 <= size[:, None])
    )
    value = tf.reduce_max(tf.where(found, read(entries + 8, 2), 0), axis=1)
    valid = (exif >= 0) & (value >= 1) & (value <= 8) & tf.io.is_jpeg(encoded)
    return tf.where(valid, value, 1)


def exif_orientation(encoded: tf.Tensor) -> tf.Tensor:
    """exif_orientations of one encoded image: an int32 scalar."""
    return exif_orientations(tf.expand_dims(encoded, 0))[0]


# After the transpose of 5..8: the orientations whose rows (upside down) and columns
# (mirrored) are reversed. 3 is 180 degrees; 6 and 8 are 90 degrees either way; 7 is the
# transverse.
_FLIP_ROWS = (3, 4, 7, 8)
_FLIP_COLUMNS = (2, 3, 6, 7)


def orient(image: tf.Tensor, orientation: tf.Tensor) -> tf.Tensor:
    """Applies an EXIF orientation (1..8) to [h, w, C] pixels, so they are upright: the
    same transforms as image_codec.apply_orientation.

    Each orientation is a transpose (5..8) followed by flips of the rows and columns, so
    the graph is three ops with the orientation as data, not a branch per orientation
    (every trace of the input and serving functions builds it).
    """
    orientation = tf.clip_by_value(orientation, 1, 8)
    transposed = tf.transpose(image, tf.where(orientation >= 5, [1, 0, 2], [0, 1, 2]))
    flip_rows = tf.reduce_any(tf.equal(orientation, _FLIP_ROWS))
    flip_columns = tf.reduce_any(tf.equal(orientation, _FLIP_COLUMNS))
    return tf.reverse(transposed, tf.boolean_mask([0, 1], [flip_rows, flip_columns]))


def composite_on_white(rgba: tf.Tensor) -> tf.Tensor:
    """RGBA uint8 [h, w, 4] onto white, as image_codec.composite_alpha rounds: RGB."""
    pixels = tf.cast(rgba, tf.int32)
    color, alpha = pixels[..., :3], pixels[..., 3:]
    out = (color * alpha + BACKGROUND * (255 - alpha) + 127) // 255
    return tf.cast(out, tf.uint8)


def is_png(encoded: tf.Tensor) -> tf.Tensor:
    return tf.equal(tf.strings.substr(encoded, 0, 8), _PNG_SIGNATURE)


def decode_upright(
    encoded: tf.Tensor, dct_method: str = "", orientation: tf.Tensor | None = None
) -> tf.Tensor:
    """One encoded image (JPEG, PNG, GIF's first frame, BMP, WebP) as uint8 [h, w, 3]:
    upright by its EXIF orientation, transparency composited onto white.

    Args:
      orientation: the image's exif_orientation, when the caller read it with the
        batch's (a map over a batch then builds the parser once, not per branch).
    """
    if orientation is None:
        orientation = exif_orientation(encoded)

    def jpeg() -> tf.Tensor:
        image = tf.io.decode_jpeg(encoded, channels=3, dct_method=dct_method)
        return orient(image, orientation)

    def png() -> tf.Tensor:
        return composite_on_white(tf.io.decode_png(encoded, channels=4))

    def other() -> tf.Tensor:
        return tf.io.decode_image(encoded, channels=3, expand_animations=False)

    image = tf.case(
        [(tf.io.is_jpeg(encoded), jpeg), (is_png(encoded), png)], default=other, exclusive=True
    )
    return tf.ensure_shape(image, [None, None, 3])


def needs_upright(orientations: tf.Tensor) -> tf.Tensor:
    """Whether any image of a batch whose exif_orientations are `orientations` [B] is a
    rotated JPEG (a bool scalar): the batch then takes decode_upright rather than the
    JPEG crop-while-decoding path."""
    return tf.reduce_any(orientations != 1)
