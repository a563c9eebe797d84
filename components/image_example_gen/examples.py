"""Builds the `tf.train.Example` of one image (feature keys in components.common.features)."""

from __future__ import annotations

from tensorflow.core.example import example_pb2, feature_pb2

from components.common import features as fk
from components.image_example_gen.image_codec import EncodedImage


def _bytes(value: bytes) -> feature_pb2.Feature:
    feature = feature_pb2.Feature()
    feature.bytes_list.value.append(value)
    return feature


def _int64(value: int) -> feature_pb2.Feature:
    feature = feature_pb2.Feature()
    feature.int64_list.value.append(value)
    return feature


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
    feature[fk.IMAGE_ENCODED_KEY].CopyFrom(_bytes(image.data))
    feature[fk.IMAGE_FORMAT_KEY].CopyFrom(_bytes(image.format.encode()))
    feature[fk.IMAGE_HEIGHT_KEY].CopyFrom(_int64(image.height))
    feature[fk.IMAGE_WIDTH_KEY].CopyFrom(_int64(image.width))
    feature[fk.IMAGE_CHANNELS_KEY].CopyFrom(_int64(image.channels))
    feature[fk.LABEL_KEY].CopyFrom(_int64(label_id))
    feature[fk.LABEL_TEXT_KEY].CopyFrom(_bytes(label.encode()))
    feature[fk.FILENAME_KEY].CopyFrom(_bytes(relpath.encode()))
    feature[fk.SHA256_KEY].CopyFrom(_bytes(sha256_hex.encode()))
    return example.SerializeToString(deterministic=True)
