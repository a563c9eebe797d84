"""Reduces a batch of serialized image Examples to one `SplitAccumulator`.

Pixels come from `imgpipe.components.common.images.preprocessing.eval_images`, the function the
Trainer and serving use, run over chunks of the batch in one `tf.function`. Each image
is then reduced to its integer histogram (`cv2.calcHist`, one fused C++ pass), from
which sums and sums of squares follow exactly; each chunk's dHashes are computed
together. On this project's machines a TF `bincount` or `histogram_fixed_width` cost
more than `calcHist`, a numpy float32 mean more than the decode, and the dHash in the
decode graph twice as much.

Chunks are decoded and histogrammed on worker threads (TF and OpenCV release the GIL)
while the calling thread does the per-image Python bookkeeping of earlier chunks.

Decoding, strict JPEG checks included, is decoding.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np

from imgpipe.components.common.images import image_formats, image_header
from imgpipe.components.image_statistics.accumulator import SplitAccumulator, Thumbnail
from imgpipe.components.image_statistics.decoding import (
    BatchDecoder,
    ParsedImage,
    decode_chunk,
    decode_strictly,
    parse_record,
    strict_jpeg_colorspace,
    strict_jpeg_error,
)
from imgpipe.components.image_statistics.pixel_summaries import (
    channel_histograms,
    difference_hashes,
    hash_fraction,
    thumbnail_jpeg,
)

# Images decoded and reduced per job. Jobs run on their own threads, ahead of the
# Python bookkeeping that consumes them; 64 keeps TF's per-call cost small.
DECODE_CHUNK = 64


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
class ReducedImage:
    """One image after decoding: what the accumulator and the duplicate search need."""

    image: ParsedImage
    pixels: np.ndarray | None  # eval pixels, None when the image failed to decode
    error: str | None = None
    hist: np.ndarray | None = None  # [3, 256] counts of the eval pixels
    native_hist: np.ndarray | None = None  # [3, 256] at the stored size, when asked
    dhash: int = 0


def _reduce_chunk(
    decoder: BatchDecoder,
    images: Sequence[ParsedImage],
    native: bool,
    strict_headers: Sequence[image_header.ImageHeader | None] | None = None,
) -> list[ReducedImage]:
    eval_pixels, errors = (
        decode_strictly(decoder, images, strict_headers) if strict_headers else ({}, {})
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
    pixels, decode_errors = decode_chunk(decoder, [images[index] for index in to_decode])
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
        decoder.in_background(
            _reduce_chunk,
            decoder,
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
            header = image_formats.read_header(image.encoded)
            # Bounded work for any record, converted here or not: bombs and JPEG codings
            # TensorFlow cannot decode are failures, as at conversion.
            image_header.check_bounded(image.encoded, header)
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
