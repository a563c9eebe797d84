"""Feature keys of the image `tf.train.Example`s this project writes and reads.

Every key is spelled once, here. Readers take a `FeatureKeyMap`, so records written
with another layout (for example the inception `build_imagenet_data.py` one) can be read.
"""

from __future__ import annotations

import dataclasses

IMAGE_ENCODED_KEY = "image/encoded"
IMAGE_FORMAT_KEY = "image/format"
IMAGE_HEIGHT_KEY = "image/height"
IMAGE_WIDTH_KEY = "image/width"
IMAGE_CHANNELS_KEY = "image/channels"
LABEL_KEY = "image/class/label"
LABEL_TEXT_KEY = "image/class/text"
FILENAME_KEY = "image/filename"
SHA256_KEY = "image/key/sha256"
# Only in a reference set's records: the span whose eval split the image came from.
REFERENCE_SPAN_KEY = "image/span"

FORMAT_JPEG = "jpeg"
FORMAT_PNG = "png"


@dataclasses.dataclass(frozen=True)
class FeatureKeyMap:
    """Names the features of an image Example; `None` marks a feature the layout lacks.

    Attributes:
      label_offset: subtracted from stored labels to give 0-based ids (the inception
        layout stores 1-based labels, keeping 0 for background).
    """

    encoded: str = IMAGE_ENCODED_KEY
    format: str | None = IMAGE_FORMAT_KEY
    height: str | None = IMAGE_HEIGHT_KEY
    width: str | None = IMAGE_WIDTH_KEY
    channels: str | None = IMAGE_CHANNELS_KEY
    label: str = LABEL_KEY
    label_text: str | None = LABEL_TEXT_KEY
    filename: str | None = FILENAME_KEY
    sha256: str | None = SHA256_KEY
    label_offset: int = 0


DEFAULT_KEY_MAP = FeatureKeyMap()

# tensorflow/models research/inception/inception/data/build_imagenet_data.py
INCEPTION_KEY_MAP = FeatureKeyMap(
    channels="image/channels",
    label_text="image/class/text",
    sha256=None,
    label_offset=1,
)

# TFDS-style records: {"image": encoded bytes, "label": int64}.
TFDS_KEY_MAP = FeatureKeyMap(
    encoded="image",
    format=None,
    height=None,
    width=None,
    channels=None,
    label="label",
    label_text=None,
    filename=None,
    sha256=None,
)

DEFAULT_KEY_MAP_NAME = "default"
KEY_MAPS = {
    DEFAULT_KEY_MAP_NAME: DEFAULT_KEY_MAP,
    "inception": INCEPTION_KEY_MAP,
    "tfds": TFDS_KEY_MAP,
}
