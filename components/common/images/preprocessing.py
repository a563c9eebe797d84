"""Image preprocessing shared by ImageStatistics, the Trainer's input_fn and serving.

One function, `eval_images` (`eval_image` for one image), decides the pixels the model
sees at evaluation and serving time and the pixels the statistics are computed over, so
the normalization constants match what the model is fed.

Both it and `train_images` work on whole batches: the crop windows are computed for the
batch at once, and format branches are taken per batch, because inside `tf.map_fn` each
small op, and above all each `tf.cond`, costs a noticeable share of a 256 px decode.

Pixels are those the user sees (upright.py): a batch of JPEGs with no EXIF rotation,
the common case, takes the crop-while-decoding path; any other batch decodes each
rotated JPEG or other format with `upright.decode_upright` (EXIF orientation applied,
transparency composited onto white), and each plain JPEG as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import tensorflow as tf

from imgpipe.components.common.images import upright
from imgpipe.components.common.images.model_input import DEFAULT_CROP_FRACTION

# Training decodes JPEGs with libjpeg's fast integer IDCT: measured 20-30% cheaper than
# the default (accurate) one, with differences of a level or two that augmentation
# dwarfs. Evaluation and serving keep the default, so they agree with each other.
TRAIN_DCT_METHOD = "INTEGER_FAST"
# Random-resized-crop's ranges: the crop's area as a fraction of the image's, and its
# aspect ratio (Inception's, as tensorflow/models' classification input uses).
TRAIN_AREA_RANGE = (0.08, 1.0)
TRAIN_ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def center_crop_windows(shapes: tf.Tensor, crop_fraction: float) -> tf.Tensor:
    """Centered square [offset_y, offset_x, side, side] windows for images of `shapes`
    [B, 2], the side `crop_fraction` of the shorter one."""
    heights, widths = shapes[:, 0], shapes[:, 1]
    side = tf.cast(tf.cast(tf.minimum(heights, widths), tf.float32) * crop_fraction, tf.int32)
    side = tf.maximum(side, 1)
    return tf.stack([(heights - side) // 2, (widths - side) // 2, side, side], axis=1)


def eval_images(
    encoded: tf.Tensor,
    image_size: int,
    crop_fraction: float = DEFAULT_CROP_FRACTION,
) -> tf.Tensor:
    """Decodes a batch of encoded JPEGs or PNGs, center-crops and resizes each.

    JPEGs are cropped while decoding (`decode_and_crop_jpeg`), so only the kept
    region is decoded. The same pixels as `eval_image` on each image.

    Args:
      encoded: string tensor [B] of JPEG or PNG bytes.
      image_size: output side in pixels.
      crop_fraction: fraction of the shorter side kept by the center crop.

    Returns:
      A uint8 tensor [B, image_size, image_size, 3].
    """
    orientations = upright.exif_orientations(encoded)
    all_jpeg = all_plain_jpeg(encoded, orientations)
    windows = center_crop_windows(image_shapes(encoded, all_jpeg, orientations), crop_fraction)
    # A batch whose crops are all at the output size skips the resize (a same-size
    # bilinear resize is the identity): shards stored at the crop size decode about
    # 1.5 times as fast.
    same_size = tf.reduce_all(windows[:, 2] == image_size)

    def map_images(crop: Callable, resize: bool) -> tf.Tensor:
        def one(args: tuple[tf.Tensor, tf.Tensor, tf.Tensor]) -> tf.Tensor:
            image = crop(*args)
            return eval_resize(image, image_size) if resize else image

        return _map_to_images(one, (encoded, windows, orientations), image_size)

    def decode(crop: Callable) -> tf.Tensor:
        return tf.cond(
            same_size, lambda: map_images(crop, resize=False), lambda: map_images(crop, resize=True)
        )

    return tf.cond(
        all_jpeg,
        lambda: decode(_crop_decoder(jpeg_only=True)),
        lambda: decode(_crop_decoder(jpeg_only=False)),
    )


def eval_resize(image: tf.Tensor, image_size: int) -> tf.Tensor:
    """eval_images' resize of one crop [h, w, C] to a uint8 [image_size, image_size, C]."""
    return _round_to_uint8(_resize_bilinear(image, image_size))


def eval_image(
    encoded: tf.Tensor,
    image_size: int,
    crop_fraction: float = DEFAULT_CROP_FRACTION,
) -> tf.Tensor:
    """`eval_images` of one scalar string tensor: a uint8 [image_size, image_size, 3]."""
    return eval_images(tf.expand_dims(encoded, 0), image_size, crop_fraction)[0]


def _map_to_images(fn: Callable, elements: tuple, image_size: int) -> tf.Tensor:
    return tf.map_fn(
        fn, elements, fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.uint8)
    )


def all_plain_jpeg(encoded: tf.Tensor, orientations: tf.Tensor) -> tf.Tensor:
    """Whether every image of `encoded` [B], whose upright.exif_orientations are
    `orientations`, is a JPEG with no EXIF rotation: the batch can take the
    crop-while-decoding path (a bool scalar)."""
    return tf.reduce_all(tf.io.is_jpeg(encoded)) & tf.logical_not(
        upright.needs_upright(orientations)
    )


def _crop_decoder(jpeg_only: bool, dct_method: str = "") -> Callable:
    """fn(encoded, window, orientation) -> the window of the upright image as uint8
    [h, w, 3], given the image's EXIF orientation. `jpeg_only` (every image a plain
    JPEG: all_plain_jpeg) leaves out the per-image format branch (a tf.cond per image
    costs about as much as the arithmetic of a whole batch)."""

    def jpeg(e: tf.Tensor, window: tf.Tensor, orientation: tf.Tensor) -> tf.Tensor:
        del orientation  # 1: a plain JPEG
        return tf.image.decode_and_crop_jpeg(e, window, channels=3, dct_method=dct_method)

    def any_format(e: tf.Tensor, window: tf.Tensor, orientation: tf.Tensor) -> tf.Tensor:
        def other() -> tf.Tensor:
            image = upright.decode_upright(e, dct_method, orientation)
            # Kept inside the image: windows from shapes stored before the rotation.
            shape = tf.shape(image)[:2]
            start = tf.minimum(window[:2], shape - 1)
            size = tf.maximum(tf.minimum(window[2:], shape - start), 1)
            return tf.slice(image, [start[0], start[1], 0], [size[0], size[1], 3])

        plain = tf.io.is_jpeg(e) & tf.equal(orientation, 1)
        return tf.cond(plain, lambda: jpeg(e, window, orientation), other)

    return jpeg if jpeg_only else any_format


def _round_to_uint8(image: tf.Tensor) -> tf.Tensor:
    """Float pixels from a bilinear resize to uint8. Bilinear weights are convex, so the
    values stay within 0..255 and need no clipping; +0.5 then truncation rounds."""
    return tf.cast(image + 0.5, tf.uint8)


def _resize_bilinear(image: tf.Tensor, image_size: int) -> tf.Tensor:
    """Float32 bilinear resize. The input is cast first: the same values, but TF's
    float32 kernel runs in about two thirds of the time of its uint8 one."""
    return tf.image.resize(tf.cast(image, tf.float32), [image_size, image_size], method="bilinear")


def random_crop_windows(
    shapes: tf.Tensor,
    area_range: tuple[float, float] = TRAIN_AREA_RANGE,
    aspect_ratio_range: tuple[float, float] = TRAIN_ASPECT_RATIO_RANGE,
) -> tf.Tensor:
    """Random [offset_y, offset_x, height, width] windows inside images of `shapes` [B, 2].

    The area is uniform in `area_range` (fractions of the image) and the aspect ratio
    log-uniform in `aspect_ratio_range`; a side that would not fit is clipped to the
    image. Drawn for the whole batch at once: `sample_distorted_bounding_box`, or the
    same arithmetic per image, costs a fifth to a third of a 256 px JPEG decode.
    """
    heights = tf.cast(shapes[:, 0], tf.float32)
    widths = tf.cast(shapes[:, 1], tf.float32)
    draws = tf.random.uniform([4, tf.shape(shapes)[0]])
    area = heights * widths * (area_range[0] + (area_range[1] - area_range[0]) * draws[0])
    log_low, log_high = math.log(aspect_ratio_range[0]), math.log(aspect_ratio_range[1])
    ratio = tf.exp(log_low + (log_high - log_low) * draws[1])
    crop_w = tf.clip_by_value(tf.round(tf.sqrt(area * ratio)), 1.0, widths)
    crop_h = tf.clip_by_value(tf.round(tf.sqrt(area / ratio)), 1.0, heights)
    # floor(u * (n + 1)) is uniform over the n + 1 offsets 0..n.
    offset_y = tf.floor(draws[2] * (heights - crop_h + 1.0))
    offset_x = tf.floor(draws[3] * (widths - crop_w + 1.0))
    return tf.cast(tf.stack([offset_y, offset_x, crop_h, crop_w], axis=1), tf.int32)


def image_shapes(
    encoded: tf.Tensor, all_jpeg: tf.Tensor | None = None, orientations: tf.Tensor | None = None
) -> tf.Tensor:
    """[height, width] int32 [B, 2] of each upright image in `encoded` [B], from the
    headers: JPEG's frame header (swapped by an EXIF orientation of 5..8), PNG's IHDR;
    other formats are decoded.

    Args:
      all_jpeg: whether every image is a JPEG with no EXIF rotation (all_plain_jpeg),
        when the caller already knows.
      orientations: the batch's upright.exif_orientations, when the caller has read them.
    """

    def jpeg(e: tf.Tensor) -> tf.Tensor:
        return tf.image.extract_jpeg_shape(e)[:2]

    def any_format(args: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        e, orientation = args

        def rotated_jpeg() -> tf.Tensor:
            shape = jpeg(e)
            return tf.where(orientation >= 5, tf.reverse(shape, [0]), shape)

        def png() -> tf.Tensor:  # IHDR: big-endian width, then height, at byte 16
            width_height = tf.io.decode_raw(
                tf.strings.substr(e, 16, 8), tf.int32, little_endian=False
            )
            return tf.reverse(width_height, [0])

        def other() -> tf.Tensor:
            return tf.shape(tf.io.decode_image(e, expand_animations=False))[:2]

        return tf.case(
            [
                (tf.io.is_jpeg(e), rotated_jpeg),
                (tf.strings.substr(e, 0, 8) == _PNG_SIGNATURE, png),
            ],
            default=other,
            exclusive=True,
        )

    if orientations is None:
        orientations = upright.exif_orientations(encoded)
    if all_jpeg is None:
        all_jpeg = all_plain_jpeg(encoded, orientations)
    signature = tf.TensorSpec([2], tf.int32)
    return tf.cond(
        all_jpeg,
        lambda: tf.map_fn(jpeg, encoded, fn_output_signature=signature),
        lambda: tf.map_fn(any_format, (encoded, orientations), fn_output_signature=signature),
    )


def train_images(
    encoded: tf.Tensor,
    image_size: int,
    shapes: tf.Tensor | None = None,
    area_range: tuple[float, float] = TRAIN_AREA_RANGE,
    aspect_ratio_range: tuple[float, float] = TRAIN_ASPECT_RATIO_RANGE,
) -> tf.Tensor:
    """Random-resized-crop and horizontal flip of a batch; JPEGs are cropped while decoding.

    Args:
      encoded: string tensor [B] of JPEG or PNG bytes.
      image_size: output side in pixels.
      shapes: [B, 2] heights and widths when the Examples carry them (ImageExampleGen's
        `image/height` and `image/width`, read from the same headers); None reads the
        headers here, which costs the input pipeline about a tenth of its throughput.

    Returns:
      A uint8 tensor [B, image_size, image_size, 3].
    """
    orientations = upright.exif_orientations(encoded)
    all_jpeg = all_plain_jpeg(encoded, orientations)
    if shapes is None:
        shapes = image_shapes(encoded, all_jpeg, orientations)
    windows = random_crop_windows(tf.cast(shapes, tf.int32), area_range, aspect_ratio_range)
    flips = tf.random.uniform(tf.shape(encoded)) < 0.5

    def map_images(crop: Callable) -> tf.Tensor:
        def one(args: tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]) -> tf.Tensor:
            e, window, orientation, flip = args
            image = crop(e, window, orientation)
            # Flip before the resize, on the smaller crop. A tf.cond per image costs
            # more than the reverse itself, so the reverse always runs and Select
            # (scalar condition: no copy) picks.
            image = tf.compat.v1.where(flip, tf.reverse(image, [1]), image)
            return _round_to_uint8(_resize_bilinear(image, image_size))

        return _map_to_images(one, (encoded, windows, orientations, flips), image_size)

    return tf.cond(
        all_jpeg,
        lambda: map_images(_crop_decoder(True, TRAIN_DCT_METHOD)),
        lambda: map_images(_crop_decoder(False, TRAIN_DCT_METHOD)),
    )
