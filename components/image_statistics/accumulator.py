"""The mergeable per-split statistics of ImageStatistics, and their Beam CombineFn.

Everything that must be exact is an integer: per-channel 256-bin pixel histograms
(sums and sums of squares follow from them exactly), counts and size histograms with
fixed bin edges. The image-weighted means are sums of floats; they are kept as
Shewchuk partials (the exact sum as a few non-overlapping floats), so they too come
out the same whatever the order in which accumulators are merged.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Iterable, Sequence

import apache_beam as beam
import numpy as np

# Fixed bin edges (lower bounds; the last bin is open-ended), so that any two
# accumulators can be merged by adding their counts.
SIDE_EDGES = (0, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 4096, 8192)
ASPECT_EDGES = (0.0, 0.5, 0.67, 0.8, 0.95, 1.05, 1.25, 1.5, 2.0, 3.0)
BYTES_EDGES = tuple(k * 1024 for k in (0, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192))

CHANNELS = 3
CHANNEL_NAMES = ("red", "green", "blue")  # pixels are RGB
LEVELS = 256
MAX_LISTED_FAILURES = 100


def exact_add(partials: list[float], x: float) -> None:
    """Adds x to the exact float sum held in `partials` (Shewchuk's algorithm)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


@dataclasses.dataclass
class Thumbnail:
    key: str  # selection key: the content hash, so the sample is deterministic
    path: str
    jpeg: bytes


@dataclasses.dataclass
class SplitAccumulator:
    """Statistics of some images of one split; `merge` is commutative and associative.

    `pixel_hist` counts `eval_image` pixels (the Trainer's resolution) per channel and
    level; `native_hist` counts the decoded pixels at the stored size (only filled when
    native statistics are asked for).
    """

    images: int = 0
    failed: int = 0
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    pixel_hist: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros((CHANNELS, LEVELS), np.int64)
    )
    image_mean_partials: list[list[float]] = dataclasses.field(
        default_factory=lambda: [[] for _ in range(CHANNELS)]
    )
    native_images: int = 0
    native_hist: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros((CHANNELS, LEVELS), np.int64)
    )
    native_image_mean_partials: list[list[float]] = dataclasses.field(
        default_factory=lambda: [[] for _ in range(CHANNELS)]
    )
    width_hist: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(len(SIDE_EDGES), np.int64)
    )
    height_hist: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(len(SIDE_EDGES), np.int64)
    )
    aspect_hist: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(len(ASPECT_EDGES), np.int64)
    )
    bytes_hist: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(len(BYTES_EDGES), np.int64)
    )
    bytes_total: int = 0
    min_width: int | None = None
    max_width: int | None = None
    min_height: int | None = None
    max_height: int | None = None
    formats: dict[str, int] = dataclasses.field(default_factory=dict)
    channels: dict[int, int] = dataclasses.field(default_factory=dict)
    modes: dict[str, int] = dataclasses.field(default_factory=dict)
    labels: dict[int, int] = dataclasses.field(default_factory=dict)
    # label -> [pixels per channel, sum of R, sum of G, sum of B] of its eval_image pixels,
    # as Python ints (exact at any size).
    class_sums: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    thumbnails: dict[int, list[Thumbnail]] = dataclasses.field(default_factory=dict)

    def add_images(
        self,
        *,
        labels: Sequence[int],
        formats: Sequence[str],
        widths: Sequence[int],
        heights: Sequence[int],
        channels: Sequence[int],
        modes: Sequence[str],
        num_bytes: Sequence[int],
        hists: np.ndarray,
    ) -> None:
        """Adds a batch of images: per-image header facts and [B, 3, 256] histograms."""
        width_array = np.asarray(widths, np.int64)
        height_array = np.asarray(heights, np.int64)
        bytes_array = np.asarray(num_bytes, np.int64)
        self.images += len(labels)
        self.pixel_hist += hists.sum(axis=0)
        pixels, sums = _channel_sums(hists)
        self._add_image_means(self.image_mean_partials, pixels, sums)
        self._add_class_sums(labels, pixels, sums)
        self.width_hist += _bin_counts(SIDE_EDGES, width_array)
        self.height_hist += _bin_counts(SIDE_EDGES, height_array)
        self.aspect_hist += _bin_counts(ASPECT_EDGES, width_array / height_array)
        self.bytes_hist += _bin_counts(BYTES_EDGES, bytes_array)
        self.bytes_total += int(bytes_array.sum())
        for name, pick, values in (
            ("min_width", min, width_array.min()),
            ("max_width", max, width_array.max()),
            ("min_height", min, height_array.min()),
            ("max_height", max, height_array.max()),
        ):
            current = getattr(self, name)
            setattr(self, name, int(values) if current is None else pick(current, int(values)))
        for counts, keys in (
            (self.formats, formats),
            (self.channels, channels),
            (self.modes, modes),
            (self.labels, labels),
        ):
            for key, n in collections.Counter(keys).items():
                _count(counts, key, n)

    def add_native(self, hists: np.ndarray) -> None:
        """Adds [B, 3, 256] (or one [3, 256]) histograms of pixels at the stored size."""
        hists = hists.reshape(-1, CHANNELS, LEVELS)
        self.native_images += len(hists)
        self.native_hist += hists.sum(axis=0)
        self._add_image_means(self.native_image_mean_partials, *_channel_sums(hists))

    def add_failure(self, path: str, reason: str) -> None:
        self.failed += 1
        # The first MAX_LISTED_FAILURES by path, so the list does not depend on order.
        self.failures = sorted([*self.failures, (path, reason)])[:MAX_LISTED_FAILURES]

    def offer_thumbnail(self, label: int, thumbnail: Thumbnail, keep: int) -> None:
        kept = self.thumbnails.setdefault(label, [])
        kept.append(thumbnail)
        kept.sort(key=lambda t: (t.key, t.path))
        del kept[keep:]

    def would_keep_thumbnail(self, label: int, key: str, path: str, keep: int) -> bool:
        kept = self.thumbnails.get(label, [])
        return keep > 0 and (len(kept) < keep or (key, path) < (kept[-1].key, kept[-1].path))

    def merge(self, other: SplitAccumulator, keep_thumbnails: int) -> None:
        self.images += other.images
        self.failed += other.failed
        self.failures = sorted(self.failures + other.failures)[:MAX_LISTED_FAILURES]
        self.pixel_hist += other.pixel_hist
        self.native_images += other.native_images
        self.native_hist += other.native_hist
        for mine, theirs in (
            (self.image_mean_partials, other.image_mean_partials),
            (self.native_image_mean_partials, other.native_image_mean_partials),
        ):
            for channel in range(CHANNELS):
                for x in theirs[channel]:
                    exact_add(mine[channel], x)
        for name in ("width_hist", "height_hist", "aspect_hist", "bytes_hist"):
            getattr(self, name).__iadd__(getattr(other, name))
        self.bytes_total += other.bytes_total
        for name, pick in (
            ("min_width", min),
            ("max_width", max),
            ("min_height", min),
            ("max_height", max),
        ):
            values = [v for v in (getattr(self, name), getattr(other, name)) if v is not None]
            setattr(self, name, pick(values) if values else None)
        for name in ("formats", "channels", "modes", "labels"):
            mine = getattr(self, name)
            for key, count in getattr(other, name).items():
                _count(mine, key, count)
        for label, sums in other.class_sums.items():
            self._add_to_class(label, sums)
        for label, thumbnails in other.thumbnails.items():
            for thumbnail in thumbnails:
                self.offer_thumbnail(label, thumbnail, keep_thumbnails)

    def _add_class_sums(self, labels: Sequence[int], pixels: np.ndarray, sums: np.ndarray) -> None:
        """Adds each image's pixel count and per-channel sums to its class's."""
        rows = np.column_stack([pixels, sums]).tolist()
        for label, row in zip(labels, rows, strict=True):
            self._add_to_class(int(label), row)

    def _add_to_class(self, label: int, row: list[int]) -> None:
        total = self.class_sums.get(label)
        if total is None:
            self.class_sums[label] = list(row)
        else:
            for i, value in enumerate(row):
                total[i] += value

    @staticmethod
    def _add_image_means(partials: list[list[float]], pixels: np.ndarray, sums: np.ndarray) -> None:
        """Adds each image's per-channel mean, from its pixel count and channel sums."""
        means = sums / pixels[:, np.newaxis]  # int64 / int64: each correctly rounded
        for channel in range(CHANNELS):
            for mean in means[:, channel].tolist():
                exact_add(partials[channel], mean)


def _bin_counts(edges: tuple[float, ...], values: np.ndarray) -> np.ndarray:
    """How many values fall in each bin; bins start at `edges`, the last is open."""
    indices = np.searchsorted(edges, values, side="right") - 1
    return np.bincount(indices, minlength=len(edges))


def _count(counts: dict, key, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


def _channel_sums(hists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each image's pixel count [B] and per-channel sums [B, 3], from [B, 3, 256] histograms."""
    return hists[:, 0].sum(axis=1), hists @ np.arange(LEVELS, dtype=np.int64)


def image_weighted_mean(partials: list[list[float]], images: int) -> list[float] | None:
    if not images:
        return None
    return [math.fsum(p) / images for p in partials]


def exact_moments(hist: np.ndarray) -> tuple[int, list[float], list[float]] | None:
    """(pixels per channel, mean, population std) from a [3, 256] histogram, exactly.

    Sums and sums of squares are Python integers, so nothing drifts however many
    pixels there are; the only rounding is the final conversion to float64.
    """
    n = int(hist[0].sum())
    if n == 0:
        return None
    levels = list(range(LEVELS))
    means, stds = [], []
    for channel in range(CHANNELS):
        counts = [int(c) for c in hist[channel]]
        total = sum(v * c for v, c in zip(levels, counts, strict=True))
        squares = sum(v * v * c for v, c in zip(levels, counts, strict=True))
        means.append(total / n)
        stds.append(math.sqrt((n * squares - total * total) / (n * n)))
    return n, means, stds


class ImageStatsCombineFn(beam.CombineFn):
    """Merges per-batch `SplitAccumulator`s of one split into one.

    The inputs are already accumulators: the decoding DoFn reduces each batch of
    images to one, so what travels between workers is a few kilobytes per batch.
    """

    def __init__(self, keep_thumbnails: int):
        self._keep = keep_thumbnails

    def create_accumulator(self) -> SplitAccumulator:
        return SplitAccumulator()

    def add_input(
        self, accumulator: SplitAccumulator, partial: SplitAccumulator
    ) -> SplitAccumulator:
        accumulator.merge(partial, self._keep)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[SplitAccumulator]) -> SplitAccumulator:
        merged = SplitAccumulator()
        for accumulator in accumulators:
            merged.merge(accumulator, self._keep)
        return merged

    def extract_output(self, accumulator: SplitAccumulator) -> SplitAccumulator:
        return accumulator
