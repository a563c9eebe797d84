"""Reduces a batch of serialized image Examples to one `SplitAccumulator`.

Pixels come from `imgpipe.components.common.preprocessing.eval_images`, the function the
Trainer and serving use, run over chunks of the batch in one `tf.function`. Each image
is then reduced to its integer histogram (`cv2.calcHist`, one fused C++ pass), from
which sums and sums of squares follow exactly; each chunk's dHashes are computed
together. On this project's machines a TF `bincount` or `histogram_fixed_width` cost
more than `calcHist`, a numpy float32 mean more than the decode, and the dHash in the
decode graph twice as much.

Chunks are decoded and histogrammed on worker threads (TF and OpenCV release the GIL)
while the calling thread does the per-image Python bookkeeping of earlier chunks.

TensorFlow decodes a JPEG with corrupt data behind valid markers into garbage without
a word. With `verify_images`, JPEGs are decoded by strict_jpeg instead: TensorFlow's
crop-decode and resize, bit for bit, in which libjpeg's warnings are errors, so one that
fails counts as undecodable, with libjpeg's reason, and no image is decoded twice.
CMYK and YCCK JPEGs, and every JPEG when the library is not built, are checked by a
second, cheaper decode (strict_jpeg_error) before TensorFlow's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import cv2
import numpy as np
import simplejpeg
import tensorflow as tf
from tensorflow.core.example import example_pb2

from imgpipe.components.common import cpu, image_header, upright
from imgpipe.components.common import features as fk
from imgpipe.components.common.preprocessing import center_crop_windows, eval_images
from imgpipe.components.common.tf_errors import op_error_reason
from imgpipe.components.image_statistics import strict_jpeg
from imgpipe.components.image_statistics.accumulator import LEVELS, SplitAccumulator, Thumbnail

THUMBNAIL_SIZE = 96
THUMBNAIL_QUALITY = 85
# cv2.calcHist counts in float32, exact up to 2**24 pixels per bin.
_CALCHIST_EXACT_PIXELS = 1 << 24
_DHASH_GRID = 56
# BT.601 luma (as RGB2GRAY) times 1000: integer weights keep the dHash's sums exact.
_LUMA_WEIGHTS = np.asarray((299, 587, 114), np.float64)
# Images decoded and reduced per job. Jobs run on their own threads, ahead of the
# Python bookkeeping that consumes them; 64 keeps TF's per-call cost small.
DECODE_CHUNK = 64
# More jobs than cores: each alternates between TF's decode and OpenCV and Python, and
# the spare ones fill the gaps (2 cores: 4 threads measured about 8% faster than 2).
REDUCING_THREADS = min(8, cpu.available_cores() + 2)


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
      verify_images: decode every JPEG strictly (strict_jpeg); a corrupt one counts
        as undecodable.
    """

    image_size: int
    crop_fraction: float
    keep_thumbnails: int = 8
    native_resolution: bool = False
    thumbnail_fraction: float = 1.0
    verify_images: bool = True


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


def channel_histograms(pixels: np.ndarray) -> np.ndarray:
    """[3, 256] int64 pixel counts per channel of an HxWx3 uint8 image."""
    if pixels.shape[0] * pixels.shape[1] < _CALCHIST_EXACT_PIXELS:
        return np.stack(
            [cv2.calcHist([pixels], [c], None, [LEVELS], [0, LEVELS]).reshape(-1) for c in range(3)]
        ).astype(np.int64)
    return np.stack(
        [np.bincount(pixels[..., c].ravel(), minlength=LEVELS) for c in range(3)]
    ).astype(np.int64)


def difference_hashes(pixels: np.ndarray) -> list[int]:
    """The 64-bit dHash of each image of [B, H, W, 3] uint8 RGB pixels, the first bit most
    significant: is each cell of an 8x9 grey thumbnail brighter than its left neighbour.

    The thumbnail is an area mean. The batch is halved down to about 56x56 pixels an
    image with one OpenCV call per halving for all the images, then reduced to 9x8 with
    integer luma and area weights, whose sums float64 holds exactly: a hash does not
    depend on the batch, and equal cells compare equal. Measured at 224 px on one thread,
    40 µs an image against 85 µs for the same steps image by image, whose per-call
    Python cost also held the GIL that the decoding threads share.
    """
    if not len(pixels):
        return []
    small = _halve_down_to(pixels, _DHASH_GRID)
    count, height, width = small.shape[:3]
    grey = small.astype(np.float64) @ _LUMA_WEIGHTS
    cells = _area_weights(height, 8) @ grey @ _area_weights(width, 9).T
    bits = (cells[:, :, 1:] > cells[:, :, :-1]).reshape(count, 64)
    return [int(value) for value in np.packbits(bits, axis=1).view(">u8").reshape(-1)]


@functools.cache
def _area_weights(source: int, target: int) -> np.ndarray:
    """[target, source] weights of an area (box) reduction from `source` pixels to
    `target` cells: each pixel's overlap with each cell, in units of 1/target pixel, so
    every weight is an integer (a cell's weights sum to `source`)."""
    cell_start: np.ndarray = np.arange(target)[:, None] * source
    pixel_start: np.ndarray = np.arange(source)[None, :] * target
    overlap = np.minimum(cell_start + source, pixel_start + target) - np.maximum(
        cell_start, pixel_start
    )
    return np.clip(overlap, 0, None).astype(np.float64)


def hash_fraction(sha256_hex: str) -> float:
    """Where a content hash falls in [0, 1)."""
    return int(sha256_hex[:8], 16) / 2**32


def _halve_down_to(pixels: np.ndarray, side: int) -> np.ndarray:
    """Area-halves [B, H, W, C] pixels while the shorter side is at least 2 x `side`,
    dropping an odd last row or column. Halving is OpenCV's fast INTER_AREA path (other
    factors take a generic one several times slower). The images are stacked into one
    tall image: with an even height, no 2x2 block spans two of them."""
    while min(pixels.shape[1:3]) >= 2 * side:
        count, height, width, channels = pixels.shape
        height, width = height - height % 2, width - width % 2
        stacked = np.ascontiguousarray(pixels[:, :height, :width]).reshape(
            count * height, width, channels
        )
        pixels = cv2.resize(
            stacked, (width // 2, count * height // 2), interpolation=cv2.INTER_AREA
        ).reshape(count, height // 2, width // 2, channels)
    return pixels


def thumbnail_jpeg(pixels: np.ndarray) -> bytes:
    """A THUMBNAIL_SIZE square JPEG of HxWx3 RGB pixels.

    Halved first (0.05 ms at 224 against 0.27 ms for INTER_AREA straight to 96); the
    step left, under 2x, is bilinear.
    """
    halved = _halve_down_to(pixels[None], THUMBNAIL_SIZE)[0]
    interpolation = cv2.INTER_LINEAR if halved.shape != pixels.shape else cv2.INTER_AREA
    small = cv2.resize(halved, (THUMBNAIL_SIZE, THUMBNAIL_SIZE), interpolation=interpolation)
    ok, data = cv2.imencode(
        ".jpg",
        cv2.cvtColor(small, cv2.COLOR_RGB2BGR),
        [cv2.IMWRITE_JPEG_QUALITY, THUMBNAIL_QUALITY],
    )
    if not ok:
        raise RuntimeError("OpenCV could not encode a thumbnail")
    return data.tobytes()


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

    def reduce_in_background(
        self,
        images: Sequence[ParsedImage],
        native: bool,
        strict_headers: Sequence[image_header.ImageHeader | None] | None = None,
    ) -> Future:
        """A future of `_reduce_chunk(images)`. TF, OpenCV, ctypes and simplejpeg release
        the GIL, so chunks are decoded and reduced while the caller accumulates earlier
        ones.

        Args:
          strict_headers: for each image, its header when it is decoded strictly, or
            None for TensorFlow's decode alone.
        """
        self._functions()  # built here, before the threads that call them
        with _BUILD_LOCK:  # two batches may start at once
            if self._threads is None:
                self._threads = ThreadPoolExecutor(
                    max_workers=REDUCING_THREADS, thread_name_prefix="image-stats"
                )
        return self._threads.submit(_reduce_chunk, self, images, native, strict_headers)

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


def _decode_chunk(
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


@dataclasses.dataclass(frozen=True)
class ReducedImage:
    """One image after decoding: what the accumulator and the duplicate search need."""

    image: ParsedImage
    pixels: np.ndarray | None  # eval pixels, None when the image failed to decode
    error: str | None = None
    hist: np.ndarray | None = None  # [3, 256] counts of the eval pixels
    native_hist: np.ndarray | None = None  # [3, 256] at the stored size, when asked
    dhash: int = 0


def _decode_strictly(
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


def _reduce_chunk(
    decoder: BatchDecoder,
    images: Sequence[ParsedImage],
    native: bool,
    strict_headers: Sequence[image_header.ImageHeader | None] | None = None,
) -> list[ReducedImage]:
    eval_pixels, errors = (
        _decode_strictly(decoder, images, strict_headers) if strict_headers else ({}, {})
    )
    done = eval_pixels.keys() | errors.keys()
    rest = [index for index in range(len(images)) if index not in done]
    for index in rest:
        header = strict_headers[index] if strict_headers else None
        colorspace = strict_jpeg_colorspace(header) if header is not None else None
        if colorspace is not None:
            error = strict_jpeg_error(images[index].encoded, colorspace)
            if error is not None:
                errors[index] = error
    to_decode = [index for index in rest if index not in errors]
    pixels, decode_errors = _decode_chunk(decoder, [images[index] for index in to_decode])
    errors.update({to_decode[index]: error for index, error in decode_errors.items()})
    eval_pixels.update(
        zip([index for index in to_decode if index not in errors], pixels, strict=True)
    )
    decoded = [index for index in range(len(images)) if index in eval_pixels]
    stacked = (
        np.stack([eval_pixels[index] for index in decoded]) if decoded else decoder.no_pixels()
    )
    dhashes = dict(zip(decoded, difference_hashes(stacked), strict=True))
    reduced = []
    for index, image in enumerate(images):
        if index in errors:
            reduced.append(ReducedImage(image, None, errors[index]))
            continue
        image_pixels = eval_pixels[index]
        native_hist = channel_histograms(decoder.native_pixels(image.encoded)) if native else None
        reduced.append(
            ReducedImage(
                image,
                image_pixels,
                None,
                channel_histograms(image_pixels),
                native_hist,
                dhashes[index],
            )
        )
    return reduced


def _reduce_pipelined(
    decoder: BatchDecoder,
    images: Sequence[ParsedImage],
    native: bool,
    strict_headers: Sequence[image_header.ImageHeader | None] | None = None,
) -> Iterator[ReducedImage]:
    """`_reduce_chunk` over the images, in order, with the worker threads running ahead."""
    pending = [
        decoder.reduce_in_background(
            images[i : i + DECODE_CHUNK],
            native,
            strict_headers[i : i + DECODE_CHUNK] if strict_headers else None,
        )
        for i in range(0, len(images), DECODE_CHUNK)
    ]
    for chunk in pending:
        yield from chunk.result()


def analyze_batch(
    records: Sequence[bytes], split: str, decoder: BatchDecoder, options: AnalysisOptions
) -> tuple[SplitAccumulator, list[ImageKey]]:
    """One accumulator and one ImageKey per decodable image, for a batch of records."""
    accumulator = SplitAccumulator()
    parsed: list[tuple[ParsedImage, image_header.ImageHeader]] = []
    for record in records:
        image = parse_record(record)
        try:
            header = image_header.read_header(image.encoded)
            # Bounded work for any record, converted here or not: bombs and JPEG codings
            # TensorFlow cannot decode are failures, as at conversion.
            image_header.check_complete(image.encoded, header)
            parsed.append((image, header))
        except image_header.ImageHeaderError as e:
            accumulator.add_failure(image.path, str(e))
    headers = {id(image): header for image, header in parsed}
    strict_headers = [header for _, header in parsed] if options.verify_images else None
    keys = []
    batch = ImageBatch()
    for result in _reduce_pipelined(
        decoder, [image for image, _ in parsed], options.native_resolution, strict_headers
    ):
        image = result.image
        if result.pixels is None or result.hist is None:
            accumulator.add_failure(image.path, result.error or "undecodable")
            continue
        batch.append(
            image.label, headers[id(image)], len(image.encoded), result.hist, result.native_hist
        )
        keys.append(ImageKey(split, image.path, image.sha256, result.dhash))
        if hash_fraction(
            image.sha256
        ) < options.thumbnail_fraction and accumulator.would_keep_thumbnail(
            image.label, image.sha256, image.path, options.keep_thumbnails
        ):
            accumulator.offer_thumbnail(
                image.label,
                Thumbnail(image.sha256, image.path, thumbnail_jpeg(result.pixels)),
                options.keep_thumbnails,
            )
    batch.add_to(accumulator)
    return accumulator, keys


@dataclasses.dataclass
class ImageBatch:
    """Per-image facts gathered for one vectorized `SplitAccumulator.add_images`."""

    labels: list[int] = dataclasses.field(default_factory=list)
    formats: list[str] = dataclasses.field(default_factory=list)
    widths: list[int] = dataclasses.field(default_factory=list)
    heights: list[int] = dataclasses.field(default_factory=list)
    channels: list[int] = dataclasses.field(default_factory=list)
    modes: list[str] = dataclasses.field(default_factory=list)
    num_bytes: list[int] = dataclasses.field(default_factory=list)
    hists: list[np.ndarray] = dataclasses.field(default_factory=list)
    native_hists: list[np.ndarray] = dataclasses.field(default_factory=list)

    def append(
        self,
        label: int,
        header: image_header.ImageHeader,
        num_bytes: int,
        hist: np.ndarray,
        native_hist: np.ndarray | None,
    ) -> None:
        self.labels.append(label)
        self.formats.append(header.format)
        self.widths.append(header.width)
        self.heights.append(header.height)
        self.channels.append(header.channels)
        self.modes.append(header.mode)
        self.num_bytes.append(num_bytes)
        self.hists.append(hist)
        if native_hist is not None:
            self.native_hists.append(native_hist)

    def add_to(self, accumulator: SplitAccumulator) -> None:
        if not self.labels:
            return
        accumulator.add_images(
            labels=self.labels,
            formats=self.formats,
            widths=self.widths,
            heights=self.heights,
            channels=self.channels,
            modes=self.modes,
            num_bytes=self.num_bytes,
            hists=np.stack(self.hists),
        )
        if self.native_hists:
            accumulator.add_native(np.stack(self.native_hists))
