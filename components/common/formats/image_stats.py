"""image_stats.json, ImageStatistics' output: typed, and read and written here only.

ImageStatistics builds an `ImageStats` and writes it with `write`; the Trainer, the
report, the anomaly checks and `imgpipe stats` read the typed fields. Field names are
the JSON keys. Pixel statistics are exact, over `eval_image` pixels, on the 0..255 scale,
in RGB order. Histogram `edges` are bin lower bounds; the last bin has no upper bound.

Example:
  stats = image_stats.read(statistics_uri)
  norm = stats.normalization("train")  # mean, std, image_size, crop_fraction
"""

from __future__ import annotations

import dataclasses
import os

from imgpipe.components.common.formats.layout import IMAGE_STATS_FILE, TRAIN_SPLIT
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.common.runtime import config_loader

SCHEMA_VERSION = 3
# Version 2 added fields with defaults (SplitStats.class_means, ImageStats.drift), so a
# version 1 file still reads, with those fields empty; version 3 likewise added
# ImageStats.label_audit.
READABLE_VERSIONS = (1, 2, 3)
EXACT = "exact"
NEAR = "near"


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """The pixels the statistics are computed over: the model's eval preprocessing."""

    image_size: int
    crop_fraction: float
    function: str
    description: str


@dataclasses.dataclass(frozen=True)
class Source:
    examples_uri: str
    images_decoded: int
    undecodable: int
    skipped_by_example_gen: int
    supported_fraction: float
    native_resolution: bool


@dataclasses.dataclass(frozen=True)
class FileReason:
    path: str
    reason: str


@dataclasses.dataclass(frozen=True)
class PixelStats:
    """Exact per-channel moments, from integer histograms [3][256]."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    pixels_per_channel: int
    image_weighted_mean: tuple[float, ...] | None
    histogram: tuple[tuple[int, ...], ...]


@dataclasses.dataclass(frozen=True)
class Histogram:
    edges: tuple[int | float, ...]
    counts: tuple[int, ...]
    min: int | None = None
    max: int | None = None


@dataclasses.dataclass(frozen=True)
class ByteStats:
    edges: tuple[int | float, ...]
    counts: tuple[int, ...]
    total: int
    mean: float | None
    min: int | None = None
    max: int | None = None


@dataclasses.dataclass(frozen=True)
class Sizes:
    width: Histogram
    height: Histogram
    aspect_ratio: Histogram


@dataclasses.dataclass(frozen=True)
class LabelStats:
    counts: dict[str, int]
    imbalance_ratio: float | None
    missing: tuple[str, ...]
    unknown_ids: dict[str, int]

    @property
    def present(self) -> set[str]:
        return {name for name, n in self.counts.items() if n}


@dataclasses.dataclass(frozen=True)
class ClassMean:
    """One class's exact per-channel mean over its eval_image pixels."""

    mean: tuple[float, ...]
    pixels_per_channel: int


@dataclasses.dataclass(frozen=True)
class GroupFile:
    split: str
    path: str


@dataclasses.dataclass(frozen=True)
class ExactGroup:
    """Files with the same SHA-256 of their bytes."""

    sha256: str
    size: int
    split_counts: dict[str, int]
    files: tuple[GroupFile, ...]


@dataclasses.dataclass(frozen=True)
class NearGroup:
    """Files with the same difference hash of their eval image, but not the same bytes."""

    dhash: str
    size: int
    split_counts: dict[str, int]
    files: tuple[GroupFile, ...]


@dataclasses.dataclass(frozen=True)
class Duplicates:
    groups: int
    redundant_images: int
    examples: tuple[ExactGroup, ...]


@dataclasses.dataclass(frozen=True)
class NearDuplicates:
    groups: int
    examples: tuple[NearGroup, ...]


@dataclasses.dataclass(frozen=True)
class SplitStats:
    images: int
    undecodable: int
    undecodable_files: tuple[FileReason, ...]
    pixels: PixelStats | None
    native_pixels: PixelStats | None  # only with native_resolution
    sizes: Sizes
    bytes: ByteStats
    formats: dict[str, int]
    channels: dict[str, int]
    color_modes: dict[str, int]
    labels: LabelStats
    duplicates: Duplicates
    near_duplicates: NearDuplicates
    thumbnails: dict[str, tuple[str, ...]]  # label -> paths (the pictures are in the report)
    class_means: dict[str, ClassMean] = dataclasses.field(default_factory=dict)  # version 2


@dataclasses.dataclass(frozen=True)
class Leakage:
    """Exact copies across splits."""

    groups: int
    images_by_split: dict[str, int]
    fraction_by_split: dict[str, float]
    threshold: float
    examples: tuple[ExactGroup, ...]


@dataclasses.dataclass(frozen=True)
class Anomaly:
    code: str
    split: str | None
    message: str


@dataclasses.dataclass(frozen=True)
class DataSummary:
    """One side of a drift comparison: every split of a data set, pooled."""

    images: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    labels: dict[str, int]  # images per class
    class_means: dict[str, tuple[float, ...]]
    sizes: Sizes


@dataclasses.dataclass(frozen=True)
class DriftCheck:
    """One drift metric where it is largest: both sides, the distance and the threshold.

    Attributes:
      metric: the metric, named as its threshold in StatisticsConfig.
      subject: where the distance is largest, e.g. "channel green",
        "class 'cat', channel red", "label 'cat'", "width >=512".
      baseline, current: the compared values on each side.
      distance: the metric's value there.
      threshold: the configured limit.
      drifted: distance > threshold.
    """

    metric: str
    subject: str
    baseline: float
    current: float
    distance: float
    threshold: float
    drifted: bool


@dataclasses.dataclass(frozen=True)
class Drift:
    """This data compared with the data the served model (the champion) was trained on.

    Attributes:
      checked: whether the comparison ran; if not, `reason` says why.
      reason: why there was no comparison, or notes on metrics left out ("" if none).
      baseline_uri: the baseline's image_stats.json ("" when there is none).
      baseline, current: both sides, pooled over their splits.
      checks: one per metric.
      classes_added, classes_removed: classes with images on one side only.
      accepted: what drift was accepted for this one span, and by what
        (StatisticsConfig.accept_drift_span); "" when none was.
    """

    checked: bool
    reason: str
    baseline_uri: str = ""
    baseline: DataSummary | None = None
    current: DataSummary | None = None
    checks: tuple[DriftCheck, ...] = ()
    classes_added: tuple[str, ...] = ()
    classes_removed: tuple[str, ...] = ()
    accepted: str = ""


@dataclasses.dataclass(frozen=True)
class LabelIssue:
    """An image the auditing model believes is filed under the wrong class.

    Attributes:
      split: its split.
      path: its file (the Example's image/filename; its SHA-256 when it has none).
      given: the class it is filed under.
      suggested: the class the model gives it the highest probability.
      confidence: that probability.
      given_confidence: the probability of the given class (its self-confidence).
    """

    split: str
    path: str
    given: str
    suggested: str
    confidence: float
    given_confidence: float


@dataclasses.dataclass(frozen=True)
class LabelAudit:
    """Confident learning's verdict on the labels (components/image_statistics/label_audit.py).

    Attributes:
      checked: whether the audit ran; if not, `reason` says why.
      reason: why it did not run, or notes ("" if none).
      model: the SavedModel that scored the images (the champion before training, the
        candidate after).
      model_version: its version in the serving directory (None for a candidate).
      images: the images offered to the audit (all of the audited splits).
      audited: the images scored and audited (at most the configured cap).
      not_sampled: images left out by the cap.
      unknown_class: images of classes the model does not know, left out.
      flagged: images confident learning flags as likely label errors.
      flagged_fraction: flagged / audited.
      agreement: the share of audited images whose given label is the model's top class:
        how good a judge it is here (None in documents before it).
      reference_fraction: the same audit's rate on the model's own (held-out) data,
        recorded when it was trained; None when the push carries none.
      threshold: the gate, max(statistics.max_label_issue_fraction,
        statistics.label_issue_reference_factor x reference_fraction).
      exceeded: flagged_fraction > threshold.
      accepted: how an exceeded gate was accepted for this span
        (StatisticsConfig.accept_label_issues_span); "" when it was not.
      issues: the flagged images, least self-confident first (at most a listed cap).
    """

    checked: bool
    reason: str = ""
    model: str = ""
    model_version: int | None = None
    images: int = 0
    audited: int = 0
    not_sampled: int = 0
    unknown_class: int = 0
    flagged: int = 0
    flagged_fraction: float = 0.0
    agreement: float | None = None
    reference_fraction: float | None = None
    threshold: float = 0.0
    exceeded: bool = False
    accepted: str = ""
    issues: tuple[LabelIssue, ...] = ()


@dataclasses.dataclass(frozen=True)
class ImageStats:
    """The whole image_stats.json document."""

    version: int
    preprocessing: Preprocessing
    notes: dict[str, str]
    labels: tuple[str, ...]
    source: Source
    splits: dict[str, SplitStats]
    leakage: Leakage
    anomalies: tuple[Anomaly, ...] = ()
    drift: Drift | None = None  # version 2; None when no comparison was asked for
    label_audit: LabelAudit | None = None  # version 3; None when no audit was asked for

    def normalization(self, split: str = TRAIN_SPLIT) -> ModelInput:
        """The model input the statistics describe: `split`'s mean and std (a std below
        model_input.MIN_STD floored to it), at the size and crop they were computed with.

        Raises:
          KeyError: the split is missing or has no decodable image.
        """
        if split not in self.splits:
            raise KeyError(
                f"{IMAGE_STATS_FILE} has no split {split!r}; it has {sorted(self.splits)}"
            )
        pixels = self.splits[split].pixels
        if pixels is None:
            raise KeyError(
                f"{IMAGE_STATS_FILE}: split {split!r} has no decodable image, "
                "so no normalization constants"
            )
        return ModelInput.from_statistics(
            tuple(pixels.mean),
            tuple(pixels.std),
            self.preprocessing.image_size,
            self.preprocessing.crop_fraction,
        )


def to_json_text(stats: ImageStats) -> str:
    """The file's text: sorted keys, indented, so equal statistics give equal bytes."""
    return config_loader.to_document(stats)


def from_json_text(text: str, where: str = IMAGE_STATS_FILE) -> ImageStats:
    """Parses and checks the file's text.

    Raises:
      ValueError: not JSON, a schema version not in READABLE_VERSIONS, or a field that
        does not fit.
    """
    return config_loader.from_document(ImageStats, text, where, READABLE_VERSIONS)


def write(folder: str, stats: ImageStats) -> str:
    """Writes folder/image_stats.json; returns its path."""
    return write_file(os.path.join(folder, IMAGE_STATS_FILE), stats)


def write_file(path: str, stats: ImageStats) -> str:
    """Writes the statistics to `path` (any name, local or remote), whole or not at all;
    returns it."""
    from imgpipe.components.common.storage import fileio

    fileio.write_atomic(path, to_json_text(stats).encode())
    return path


def read(folder: str) -> ImageStats:
    """The statistics in an ImageStatistics artifact (or any folder holding the file).

    Raises:
      FileNotFoundError: no image_stats.json in the folder.
      ValueError: the file does not fit the schema.
    """
    from imgpipe.components.common.storage import fileio

    path = os.path.join(folder, IMAGE_STATS_FILE)
    if not fileio.exists(path):
        raise FileNotFoundError(f"{path} not found: is {folder} an ImageStatistics artifact?")
    with fileio.open_file(path, "r") as f:
        return from_json_text(f.read(), path)
