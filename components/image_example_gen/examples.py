"""Builds the `tf.train.Example` of one image (feature keys in common/features.py)."""

from __future__ import annotations

from tensorflow.core.example import example_pb2

from imgpipe.components.common.formats import features as fk
from imgpipe.components.image_example_gen.image_codec import EncodedImage


def image_example(
    image: EncodedImage, label_id: int, label: str, relpath: str, sha256_hex: str
) -> bytes:
    """Serializes one image Example, deterministically (byte-identical across runs).

    Args:
      image: the stored bytes with their format and size.
      label_id: the class id (0-based).
      label: the class name.
      relpath: the source path relative to the image folder.
      sha256_hex: hex SHA-256 of the source file's bytes, the key used for duplicates.
    """
    example = example_pb2.Example()
    feature = example.features.feature
    # Appending in place: building each Feature apart and CopyFrom-ing it copies the
    # image bytes once more (about half the cost of this function, measured).
    feature[fk.IMAGE_ENCODED_KEY].bytes_list.value.append(image.data)
    feature[fk.IMAGE_FORMAT_KEY].bytes_list.value.append(image.format.encode())
    feature[fk.IMAGE_HEIGHT_KEY].int64_list.value.append(image.height)
    feature[fk.IMAGE_WIDTH_KEY].int64_list.value.append(image.width)
    feature[fk.IMAGE_CHANNELS_KEY].int64_list.value.append(image.channels)
    feature[fk.LABEL_KEY].int64_list.value.append(label_id)
    feature[fk.LABEL_TEXT_KEY].bytes_list.value.append(label.encode())
    feature[fk.FILENAME_KEY].bytes_list.value.append(relpath.encode())
    feature[fk.SHA256_KEY].bytes_list.value.append(sha256_hex.encode())
    return example.SerializeToString(deterministic=True)
