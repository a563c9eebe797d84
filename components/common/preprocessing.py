"""Image preprocessing shared by ImageStatistics, the Trainer's input_fn and serving.

One function, `eval_image`, decides the pixels the model sees at evaluation and serving
time and the pixels the statistics are computed over, so the normalization constants
match what the model is fed.
"""

from __future__ import annotations

import tensorflow as tf

# Center crop keeps this fraction of the shorter side (the ImageNet convention 224/256).
DEFAULT_CROP_FRACTION = 0.875


def _center_crop_window(shape: tf.Tensor, crop_fraction: float) -> tf.Tensor:
    height, width = shape[0], shape[1]
    side = tf.cast(
        tf.cast(tf.minimum(height, width), tf.float32) * crop_fraction, tf.int32
    )
    side = tf.maximum(side, 1)
    offset_y = (height - side) // 2
    offset_x = (width - side) // 2
    return tf.stack([offset_y, offset_x, side, side])


def eval_image(
    encoded: tf.Tensor,
    image_size: int,
    crop_fraction: float = DEFAULT_CROP_FRACTION,
) -> tf.Tensor:
    """Decodes one encoded JPEG or PNG, center-crops it and resizes it.

    JPEGs are cropped while decoding (`decode_and_crop_jpeg`), so only the kept
    region is decoded.

    Args:
      encoded: scalar string tensor of JPEG or PNG bytes.
      image_size: output side in pixels.
      crop_fraction: fraction of the shorter side kept by the center crop.

    Returns:
      A uint8 tensor [image_size, image_size, 3].
    """

    def jpeg() -> tf.Tensor:
        shape = tf.image.extract_jpeg_shape(encoded)
        window = _center_crop_window(shape, crop_fraction)
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=3)

    def other() -> tf.Tensor:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        image = tf.ensure_shape(image, [None, None, 3])
        window = _center_crop_window(tf.shape(image), crop_fraction)
        return tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])

    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    return resize_uint8(image, image_size)


def resize_uint8(image: tf.Tensor, image_size: int) -> tf.Tensor:
    """Bilinear resize to [image_size, image_size, 3], rounded back to uint8."""
    resized = tf.image.resize(image, [image_size, image_size], method="bilinear")
    return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)


def train_image(
    encoded: tf.Tensor,
    image_size: int,
    area_range: tuple[float, float] = (0.08, 1.0),
    aspect_ratio_range: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
) -> tf.Tensor:
    """Random-resized-crop and horizontal flip; JPEGs are cropped while decoding.

    Returns:
      A uint8 tensor [image_size, image_size, 3].
    """

    def sample_window(shape: tf.Tensor) -> tf.Tensor:
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape,
            bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
            min_object_covered=0.1,
            aspect_ratio_range=aspect_ratio_range,
            area_range=area_range,
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        return tf.stack([begin[0], begin[1], size[0], size[1]])

    def jpeg() -> tf.Tensor:
        window = sample_window(tf.image.extract_jpeg_shape(encoded))
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=3)

    def other() -> tf.Tensor:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        image = tf.ensure_shape(image, [None, None, 3])
        window = sample_window(tf.shape(image))
        return tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])

    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    image = tf.image.random_flip_left_right(image)
    return resize_uint8(image, image_size)
