"""Reduces a batch of serialized image Examples to one `SplitAccumulator`.

Pixels come from `components.common.preprocessing.eval_image`, the function the
Trainer and serving use, run over the whole batch in one `tf.function`. Each image is
then reduced by OpenCV's integer histogram (`cv2.calcHist`, one fused C++ pass); sums
and sums of squares follow from the histogram exactly. On this project's machines a
TF `reduce_sum` or `bincount` over the batch cost a third to a half of the decode
itself, and a numpy float32 mean more than the decode.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Sequence

import cv2
import numpy as np
import tensorflow as tf
from tensorflow.core.example import example_pb2

from components.common import features as fk
from components.common.preprocessing import eval_image
from components.image_example_gen import image_header
from components.image_statistics.accumulator import LEVELS, SplitAccumulator, Thumbnail

THUMBNAIL_SIZE = 96
THUMBNAIL_QUALITY = 85
# cv2.calcHist counts in float32, exact up to 2**24 pixels per bin.
_CALCHIST_EXACT_PIXELS = 1 << 24
_PARALLEL_DECODES = 4


@dataclasses.dataclass(frozen=True)
class AnalysisOptions:
    """How images are analysed.

    Attributes:
      image_size: side of the Trainer's input (eval_image's output).
      crop_fraction: eval_image's center-crop fraction.
      keep_thumbnails: sample thumbnails kept per class (0 for none).
      native_resolution: also decode every image at its stored size, for pixel
        statistics there (doubles the decoding work).
      thumbnail_fraction: only images whose content hash falls in this lowest
        fraction are thumbnail candidates. Thumbnails are the lowest hashes of each
        class, so this keeps the result and saves making a thumbnail per image (each
        batch starts a fresh accumulator, which would take every image).
    """

    image_size: int
    crop_fraction: float
    keep_thumbnails: int = 8
    native_resolution: bool = False
    thumbnail_fraction: float = 1.0


@dataclasses.dataclass(frozen=True)
class ImageKey:
    """What the duplicate search needs of one image."""

    split: str
    path: str
    sha256: str
    dhash: int  # 64-bit difference hash of the eval image (perceptual)


@dataclasses.dataclass(frozen=True)
class ParsedImage:
    path: str
    label: int
    encoded: bytes
    sha256: str


def parse_record(record: bytes) -> ParsedImage:
    """Reads the fields the statistics need from one serialized tf.train.Example."""
    feature = example_pb2.Example.FromString(record).features.feature
    if fk.IMAGE_ENCODED_KEY not in feature or not feature[fk.IMAGE_ENCODED_KEY].bytes_list.value:
        raise ValueError(f"an Example has no {fk.IMAGE_ENCODED_KEY} bytes; "
                         "ImageStatistics reads Examples written by ImageExampleGen")
    encoded = feature[fk.IMAGE_ENCODED_KEY].bytes_list.value[0]
    # The source file's hash, when ImageExampleGen stored it, finds copies even when
    # one copy was re-encoded differently.
    sha256 = (feature[fk.SHA256_KEY].bytes_list.value[0].decode()
              if fk.SHA256_KEY in feature else hashlib.sha256(encoded).hexdigest())
    path = (feature[fk.FILENAME_KEY].bytes_list.value[0].decode()
            if fk.FILENAME_KEY in feature else f"sha256:{sha256}")
    label = (feature[fk.LABEL_KEY].int64_list.value[0]
             if fk.LABEL_KEY in feature else -1)
    return ParsedImage(path, int(label), encoded, sha256)


def channel_histograms(pixels: np.ndarray) -> np.ndarray:
    """[3, 256] int64 pixel counts per channel of an HxWx3 uint8 image."""
    if pixels.shape[0] * pixels.shape[1] < _CALCHIST_EXACT_PIXELS:
        return np.stack([cv2.calcHist([pixels], [c], None, [LEVELS], [0, LEVELS]).reshape(-1)
                         for c in range(3)]).astype(np.int64)
    return np.stack([np.bincount(pixels[..., c].ravel(), minlength=LEVELS)
                     for c in range(3)]).astype(np.int64)


def difference_hash(pixels: np.ndarray) -> int:
    """64-bit dHash: is each cell of an 8x9 grey thumbnail brighter than its left one.

    The thumbnail is made from every 4th pixel: a quarter of the area work, and the
    hash only looks at 72 cells anyway.
    """
    sparse = np.ascontiguousarray(pixels[::4, ::4])
    grey = cv2.cvtColor(cv2.resize(sparse, (9, 8), interpolation=cv2.INTER_AREA),
                        cv2.COLOR_RGB2GRAY).astype(np.int16)
    bits = (grey[:, 1:] > grey[:, :-1]).ravel()
    return int(np.packbits(bits).view(">u8")[0])


def hash_fraction(sha256_hex: str) -> float:
    """Where a content hash falls in [0, 1)."""
    return int(sha256_hex[:8], 16) / 2**32


def thumbnail_jpeg(pixels: np.ndarray) -> bytes:
    small = cv2.resize(pixels, (THUMBNAIL_SIZE, THUMBNAIL_SIZE), interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(small, cv2.COLOR_RGB2BGR),
                            [cv2.IMWRITE_JPEG_QUALITY, THUMBNAIL_QUALITY])
    if not ok:
        raise RuntimeError("OpenCV could not encode a thumbnail")
    return data.tobytes()


class BatchDecoder:
    """eval_image over a batch in one tf.function; the TF state is built lazily and
    dropped when pickled, so Beam can ship the decoder to workers."""

    def __init__(self, image_size: int, crop_fraction: float):
        self._image_size = image_size
        self._crop_fraction = crop_fraction
        self._eval = None
        self._native = None

    def __getstate__(self) -> dict:
        return {"_image_size": self._image_size, "_crop_fraction": self._crop_fraction,
                "_eval": None, "_native": None}

    def _build(self) -> None:
        size, crop = self._image_size, self._crop_fraction

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def eval_batch(encoded: tf.Tensor) -> tf.Tensor:
            return tf.map_fn(lambda e: eval_image(e, size, crop), encoded,
                             fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8),
                             parallel_iterations=_PARALLEL_DECODES)

        @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
        def native(encoded: tf.Tensor) -> tf.Tensor:
            return tf.io.decode_image(encoded, channels=3, expand_animations=False)

        self._eval, self._native = eval_batch, native

    def eval_pixels(self, encoded: Sequence[bytes]) -> np.ndarray:
        """[B, S, S, 3] uint8. Raises tf.errors.InvalidArgumentError on a bad image."""
        if self._eval is None:
            self._build()
        return self._eval(tf.constant(list(encoded), tf.string)).numpy()

    def native_pixels(self, encoded: bytes) -> np.ndarray:
        if self._native is None:
            self._build()
        return self._native(tf.constant(encoded, tf.string)).numpy()


def _decode_each(decoder: BatchDecoder, images: Sequence[ParsedImage]
                 ) -> Iterator[tuple[ParsedImage, np.ndarray | None, str | None]]:
    """Decodes the batch at once, or one by one to single out the images that fail."""
    try:
        pixels = decoder.eval_pixels([image.encoded for image in images])
        for image, image_pixels in zip(images, pixels, strict=True):
            yield image, image_pixels, None
        return
    except tf.errors.InvalidArgumentError:
        if len(images) == 1:
            message = "TensorFlow cannot decode it"
            yield images[0], None, message
            return
    for image in images:
        try:
            yield image, decoder.eval_pixels([image.encoded])[0], None
        except tf.errors.InvalidArgumentError as e:
            yield image, None, f"TensorFlow cannot decode it: {e.message.splitlines()[0]}"


def analyze_batch(records: Sequence[bytes], split: str, decoder: BatchDecoder,
                  options: AnalysisOptions) -> tuple[SplitAccumulator, list[ImageKey]]:
    """One accumulator and one ImageKey per decodable image, for a batch of records."""
    accumulator = SplitAccumulator()
    parsed: list[tuple[ParsedImage, image_header.ImageHeader]] = []
    for record in records:
        image = parse_record(record)
        try:
            parsed.append((image, image_header.read_header(image.encoded)))
        except image_header.ImageHeaderError as e:
            accumulator.add_failure(image.path, str(e))
    headers = {id(image): header for image, header in parsed}
    keys = []
    for image, pixels, error in _decode_each(decoder, [image for image, _ in parsed]):
        if pixels is None:
            accumulator.add_failure(image.path, error or "undecodable")
            continue
        header = headers[id(image)]
        accumulator.add_image(
            label=image.label, fmt=header.format, width=header.width, height=header.height,
            channels=header.channels, mode=header.mode, num_bytes=len(image.encoded),
            hist=channel_histograms(pixels))
        if options.native_resolution:
            accumulator.add_native(channel_histograms(decoder.native_pixels(image.encoded)))
        keys.append(ImageKey(split, image.path, image.sha256, difference_hash(pixels)))
        if (hash_fraction(image.sha256) < options.thumbnail_fraction
                and accumulator.would_keep_thumbnail(image.label, image.sha256, image.path,
                                                     options.keep_thumbnails)):
            accumulator.offer_thumbnail(
                image.label, Thumbnail(image.sha256, image.path, thumbnail_jpeg(pixels)),
                options.keep_thumbnails)
    return accumulator, keys
