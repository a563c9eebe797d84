"""Decoding ImageStatistics' images: Examples parsed to their bytes, then a batch of them
decoded by `preprocessing.eval_images`, the function the Trainer and serving use, in one
`tf.function` built once per process.

TensorFlow decodes a JPEG with corrupt data behind valid markers into garbage without
a word. With `verify_images`, JPEGs are decoded by strict_jpeg instead: TensorFlow's
crop-decode and resize, bit for bit, in which libjpeg's warnings are errors, so one that
fails counts as undecodable, with libjpeg's reason, and no image is decoded twice.
CMYK and YCCK JPEGs, and every JPEG when the library is not built, are checked by a
second, cheaper decode (strict_jpeg_error) before TensorFlow's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import simplejpeg
import tensorflow as tf
from tensorflow.core.example import example_pb2

from imgpipe.components.common.formats import features as fk
from imgpipe.components.common.images import image_header, upright
from imgpipe.components.common.images.preprocessing import center_crop_windows, eval_images
from imgpipe.components.common.runtime import cpu
from imgpipe.components.common.runtime.tf_errors import op_error_reason
from imgpipe.components.image_statistics import strict_jpeg

T = TypeVar("T")
# More jobs than cores: each alternates between TF's decode and OpenCV and Python, and
# the spare ones fill the gaps (2 cores: 4 threads measured about 8% faster than 2).
REDUCING_THREADS = min(8, cpu.available_cores() + 2)


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
        raise ValueError(
            f"an Example has no {fk.IMAGE_ENCODED_KEY} bytes; "
            "ImageStatistics reads Examples written by ImageExampleGen"
        )
    encoded = feature[fk.IMAGE_ENCODED_KEY].bytes_list.value[0]
    # The source file's hash, when ImageExampleGen stored it, finds copies even when
    # one copy was re-encoded differently.
    sha256 = (
        feature[fk.SHA256_KEY].bytes_list.value[0].decode()
        if fk.SHA256_KEY in feature
        else hashlib.sha256(encoded).hexdigest()
    )
    path = (
        feature[fk.FILENAME_KEY].bytes_list.value[0].decode()
        if fk.FILENAME_KEY in feature
        else f"sha256:{sha256}"
    )
    label = feature[fk.LABEL_KEY].int64_list.value[0] if fk.LABEL_KEY in feature else -1
    return ParsedImage(path, int(label), encoded, sha256)


_BUILD_LOCK = threading.Lock()
_FUNCTIONS: dict[tuple[int, float], tuple[Callable, Callable]] = {}


def _decoder_functions(size: int, crop: float) -> tuple[Callable, Callable]:
    """The decoder's two tf.functions, built once per process: tracing one costs about
    0.3 s, and a worker runs one decoder per split."""
    with _BUILD_LOCK:
        if (size, crop) in _FUNCTIONS:
            return _FUNCTIONS[size, crop]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def eval_batch(encoded: tf.Tensor) -> tf.Tensor:
            return eval_images(encoded, size, crop)

        @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
        def native(encoded: tf.Tensor) -> tf.Tensor:
            return upright.decode_upright(encoded)  # as the model's inputs decode it

        eval_batch.get_concrete_function()  # traced under the lock, once
        _FUNCTIONS[size, crop] = eval_batch, native
        return eval_batch, native


class BatchDecoder:
    """eval_images over a batch in one tf.function; the TF state and the worker threads
    are built lazily and dropped when pickled, so Beam can ship the decoder to workers."""

    def __init__(self, image_size: int, crop_fraction: float):
        self._image_size = image_size
        self._crop_fraction = crop_fraction
        self._functions_built: tuple[Callable, Callable] | None = None
        self._threads: ThreadPoolExecutor | None = None

    def __getstate__(self) -> dict:
        return {
            "_image_size": self._image_size,
            "_crop_fraction": self._crop_fraction,
            "_functions_built": None,
            "_threads": None,
        }

    def in_background(self, job: Callable[..., T], *args: Any) -> Future[T]:
        """A future of `job(*args)` on the decoder's threads, its functions built first.
        TF, OpenCV, ctypes and simplejpeg release the GIL, so chunks are decoded and
        reduced while the caller accumulates earlier ones."""
        self._functions()  # built here, before the threads that call them
        with _BUILD_LOCK:  # two batches may start at once
            if self._threads is None:
                self._threads = ThreadPoolExecutor(
                    max_workers=REDUCING_THREADS, thread_name_prefix="image-stats"
                )
        return self._threads.submit(job, *args)

    def _functions(self) -> tuple[Callable, Callable]:
        if self._functions_built is None:
            self._functions_built = _decoder_functions(self._image_size, self._crop_fraction)
        return self._functions_built

    @property
    def image_size(self) -> int:
        return self._image_size

    def eval_pixels(self, encoded: Sequence[bytes]) -> np.ndarray:
        """[B, S, S, 3] uint8 pixels. Raises tf.errors.InvalidArgumentError on a bad
        image."""
        return self._functions()[0](tf.constant(list(encoded), tf.string)).numpy()

    def no_pixels(self) -> np.ndarray:
        """An empty [0, S, S, 3] batch of eval pixels."""
        return np.zeros((0, self._image_size, self._image_size, 3), np.uint8)

    def native_pixels(self, encoded: bytes) -> np.ndarray:
        return self._functions()[1](tf.constant(encoded, tf.string)).numpy()

    def crop_windows(self, shapes: Sequence[tuple[int, int]]) -> np.ndarray:
        """eval_images' [offset_y, offset_x, height, width] crop of images of `shapes`
        [(height, width)]."""
        return center_crop_windows(tf.constant(shapes, tf.int32), self._crop_fraction).numpy()


def decode_chunk(
    decoder: BatchDecoder, images: Sequence[ParsedImage]
) -> tuple[np.ndarray, dict[int, str]]:
    """The eval pixels [N, S, S, 3] of the images that decode, in order, and why each
    other one did not, by its index: the chunk decoded at once, or one by one to single
    out the images that fail."""
    if not images:
        return decoder.no_pixels(), {}
    try:
        return decoder.eval_pixels([image.encoded for image in images]), {}
    except tf.errors.InvalidArgumentError as e:
        if len(images) == 1:
            return decoder.no_pixels(), {0: _undecodable(e)}
    decoded, errors = [], {}
    for index, image in enumerate(images):
        try:
            decoded.append(decoder.eval_pixels([image.encoded])[0])
        except tf.errors.InvalidArgumentError as e:
            errors[index] = _undecodable(e)
    return (np.stack(decoded) if decoded else decoder.no_pixels()), errors


def _undecodable(error: tf.errors.OpError) -> str:
    return f"TensorFlow cannot decode it: {op_error_reason(error.message)}"


# JPEG colour models TensorFlow converts to RGB itself: not decoded by strict_jpeg.
_TENSORFLOW_CONVERTED_MODES = (image_header.MODE_CMYK, image_header.MODE_YCCK)


def strict_jpeg_colorspace(header: image_header.ImageHeader) -> str | None:
    """The colorspace a JPEG is checked strictly in (the cheapest one libjpeg converts it
    to), or None for an image that is not a JPEG."""
    if header.format != image_header.JPEG:
        return None
    return "CMYK" if header.mode in _TENSORFLOW_CONVERTED_MODES else "GRAY"


_TURBOJPEG_HEADER_CALL = "tjDecompressHeader"
_CORRUPT_JPEG = "corrupt jpeg: "


def strict_jpeg_error(encoded: bytes, colorspace: str) -> str | None:
    """Why a JPEG is corrupt, or None.

    TensorFlow's decoder takes libjpeg's warnings (corrupt entropy-coded data, a
    premature end) in its stride and returns garbage pixels; this decode turns them into
    errors. It is libjpeg-turbo's cheapest full pass: every coefficient is entropy-decoded,
    which is where corruption shows, but the image comes out at 1/8 scale (DC only) and
    in one channel.
    """
    try:
        simplejpeg.decode_jpeg(encoded, colorspace=colorspace, fastdct=True, min_factor=8)
    except ValueError as e:
        if str(e).startswith(_TURBOJPEG_HEADER_CALL):
            # A layout TurboJPEG's API does not take (an unusual chroma subsampling, or
            # a damaged header): TensorFlow's own decode, which follows, is the judge.
            return None
        return f"{_CORRUPT_JPEG}{e}"
    return None


def decode_strictly(
    decoder: BatchDecoder,
    images: Sequence[ParsedImage],
    headers: Sequence[image_header.ImageHeader | None],
) -> tuple[dict[int, np.ndarray], dict[int, str]]:
    """The eval pixels of each JPEG that strict_jpeg decodes, and why each corrupt one
    is not, by index. The other images are left out of both."""
    lib = strict_jpeg.library()
    candidates = [
        (index, header)
        for index, header in enumerate(headers)
        if header is not None
        and header.format == image_header.JPEG
        and header.mode not in _TENSORFLOW_CONVERTED_MODES
        # A rotated JPEG is turned upright by TensorFlow's eval decode (upright.py),
        # which the strict crop-decode does not do: left to TensorFlow.
        and header.exif_orientation == 1
    ]
    if lib is None or not candidates:
        return {}, {}
    windows = decoder.crop_windows([(header.height, header.width) for _, header in candidates])
    # A crop too large to decode (a lying header) is left to TensorFlow, which refuses it.
    fits = windows[:, 2].astype(np.int64) * windows[:, 3] * 3 < strict_jpeg.MAX_OUTPUT_BYTES
    candidates = [candidate for candidate, fit in zip(candidates, fits, strict=True) if fit]
    windows = windows[fits]
    size = decoder.image_size
    out: np.ndarray = np.empty((len(candidates), size, size, 3), np.uint8)
    pixels, errors = {}, {}
    for (index, _), window, image_pixels in zip(candidates, windows, out, strict=True):
        try:
            if strict_jpeg.decode(lib, images[index].encoded, tuple(window), image_pixels):
                pixels[index] = image_pixels
        except strict_jpeg.StrictJpegError as e:
            errors[index] = f"{_CORRUPT_JPEG}{e}"
    return pixels, errors
