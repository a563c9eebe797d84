"""Configuration of an image conversion: what happens to each image, and how the
output is split and sharded. Both are frozen dataclasses that round-trip through JSON
with the one loader (components/common/runtime/config_loader.py), which is how the component
stores them in `exec_properties`. Each is validated when it is built (`__post_init__`),
so one that exists is valid and no caller checks it again.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from imgpipe.components.common.formats.layout import EVAL_SPLIT, TRAIN_SPLIT
from imgpipe.components.common.images import image_header
from imgpipe.components.common.runtime.config_loader import NAME, flag

ON_ERROR_SKIP = "skip"
ON_ERROR_FAIL = "fail"

VERIFY_HEADER = "header"
VERIFY_DECODE = "decode"

OUTPUT_KEEP = "keep"
OUTPUT_JPEG = "jpeg"
OUTPUT_PNG = "png"

LAYOUT_AUTO = "auto"
LAYOUT_FLAT = "flat"
LAYOUT_SPLIT = "split"

NEW_LABEL_FAIL = "fail"
NEW_LABEL_APPEND = "append"

SPLIT_BY_CONTENT = "content"
SPLIT_BY_PATH = "path"

LABEL_CONFLICT_SKIP = "skip"
LABEL_CONFLICT_KEEP = "keep"
LABEL_CONFLICT_FAIL = "fail"

# The values each setting takes, for its validation and its flag's choices.
ON_ERRORS = (ON_ERROR_SKIP, ON_ERROR_FAIL)
VERIFY_MODES = (VERIFY_HEADER, VERIFY_DECODE)
OUTPUT_FORMATS = (OUTPUT_KEEP, OUTPUT_JPEG, OUTPUT_PNG)
OTHER_FORMAT_TARGETS = (OUTPUT_JPEG, OUTPUT_PNG)
LAYOUTS = (LAYOUT_AUTO, LAYOUT_FLAT, LAYOUT_SPLIT)
NEW_LABEL_ACTIONS = (NEW_LABEL_FAIL, NEW_LABEL_APPEND)
SPLIT_BYS = (SPLIT_BY_CONTENT, SPLIT_BY_PATH)
LABEL_CONFLICT_ACTIONS = (LABEL_CONFLICT_SKIP, LABEL_CONFLICT_KEEP, LABEL_CONFLICT_FAIL)

DEFAULT_SHARD_MB = 128.0
DEFAULT_JPEG_QUALITY = 90
DEFAULT_MAX_PIXELS = image_header.DEFAULT_MAX_PIXELS
# What a file may hold besides its pixels (EXIF, ICC profiles, XMP, thumbnails) before
# it is too large to be an image within max_pixels.
MAX_METADATA_BYTES = 64 << 20
# The most an image file can take per pixel: 16-bit RGBA stored without compression.
MAX_BYTES_PER_PIXEL = 8


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """What is done to each image.

    With every field at its default, JPEG and PNG bytes are stored unchanged; only
    formats and colour models TensorFlow cannot decode are re-encoded.

    Attributes:
      resize: resize so that the shorter side is this many pixels.
      center_crop: with `resize`, crop the centre square to resize x resize.
      quality: re-encode JPEGs at this quality (re-encoding also happens whenever
        pixels change, at DEFAULT_JPEG_QUALITY unless this is set).
      output_format: `keep` the source format, or re-encode everything to `jpeg` or `png`.
      other_formats_to: target format for GIF, BMP and WebP sources.
      channels: 0 keeps the source's channels; 3 makes every image RGB.
      background: RGB that alpha is composited onto when alpha must go.
      max_pixels: larger images (by their header) are skipped as decompression bombs.
      verify: `header` checks header and end marker; `decode` also decodes every image.
    """

    resize: int | None = dataclasses.field(default=None, metadata=flag(metavar="S"))
    center_crop: bool = False
    quality: int | None = dataclasses.field(default=None, metadata=flag(metavar="Q"))
    output_format: str = dataclasses.field(
        default=OUTPUT_KEEP, metadata=flag(choices=OUTPUT_FORMATS, name="format")
    )
    other_formats_to: str = dataclasses.field(
        default=OUTPUT_PNG, metadata=flag(choices=OTHER_FORMAT_TARGETS)
    )
    channels: int = 0
    background: tuple[int, int, int] = dataclasses.field(
        default=(255, 255, 255), metadata=flag(metavar="R,G,B")
    )
    max_pixels: int = DEFAULT_MAX_PIXELS
    verify: str = dataclasses.field(default=VERIFY_HEADER, metadata=flag(choices=VERIFY_MODES))

    @property
    def decodes_every_image(self) -> bool:
        """Whether every image's pixels are decoded, rather than its header read and its
        bytes kept (pass-through, where only unusual images are re-encoded)."""
        return self.transforms_pixels or self.verify == VERIFY_DECODE

    # config_loader: validate() runs once, when the value is built.
    VALIDATED_WHEN_BUILT: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if self.resize is not None and self.resize < 1:
            raise ValueError(f"resize must be a positive side length, got {self.resize}")
        if self.center_crop and self.resize is None:
            raise ValueError("center_crop needs resize: the crop is resize x resize")
        if self.quality is not None and not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be in 1..100, got {self.quality}")
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(f"output_format must be keep, jpeg or png, got {self.output_format!r}")
        if self.other_formats_to not in OTHER_FORMAT_TARGETS:
            raise ValueError(f"other_formats_to must be jpeg or png, got {self.other_formats_to!r}")
        if self.channels not in (0, 3):
            raise ValueError(f"channels must be 0 (keep) or 3 (RGB), got {self.channels}")
        if len(self.background) != 3 or not all(0 <= c <= 255 for c in self.background):
            raise ValueError(f"background must be three values in 0..255, got {self.background}")
        if self.max_pixels < 1:
            raise ValueError(f"max_pixels must be positive, got {self.max_pixels}")
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be header or decode, got {self.verify!r}")

    @property
    def transforms_pixels(self) -> bool:
        return (
            self.resize is not None
            or self.quality is not None
            or self.output_format != OUTPUT_KEEP
            or self.channels != 0
        )

    @property
    def max_file_bytes(self) -> int:
        """Larger files are skipped unread: no image within max_pixels is that large."""
        return MAX_BYTES_PER_PIXEL * self.max_pixels + MAX_METADATA_BYTES

    @property
    def jpeg_quality(self) -> int:
        return self.quality if self.quality is not None else DEFAULT_JPEG_QUALITY


@dataclasses.dataclass(frozen=True)
class OutputOptions:
    """How images are laid out, labelled, split and sharded.

    Attributes:
      layout: `flat` is root/<label>/..., `split` is root/<split>/<label>/...,
        `auto` picks `split` when every top-level folder is a known split name.
      follow_links: follow symbolic links that stay inside the input root (a loop,
        or a second link to one folder, is reported, not followed). Links that leave
        the root are never followed. False reports every link, unread.
      splits: (name, weight) pairs for a flat layout; weights need not sum to 1.
      split_by: what a flat layout's split is decided by (see splitting.py):
        `content`, the hash of the image bytes, so byte-identical files always land
        in the same split whatever their paths; or `path`, the hash of the relative
        path, decided at listing, before any file is read, but copies of a file at
        two paths may land in two splits.
      stratify: give every label the split proportions exactly, so small classes
        reach every split (see splitting.py); False decides each file by its own
        hash, so adding images never moves old ones.
      train_split: the split the Trainer trains on.
      eval_split: the split the Trainer validates on and the Evaluator evaluates.
        A split layout's folders are mapped to these names (split_names.py).
      on_label_conflict: byte-identical images under different labels are `skip`ped
        (every copy, listed in skipped.json), `keep`t under each label (in one
        split), or `fail` the conversion. Each conflict is reported either way.
      num_shards: shards per split; None sizes shards by shard_mb.
      shard_mb: target shard size in MB when num_shards is None.
      gzip: GZIP-compress shards (names end in .gz, as TFX readers expect).
      dali_index: write NVIDIA DALI's TFRecord index file of each shard, under
        dali_index/Split-<name>/. DALI cannot index GZIP shards: with `gzip`, none is
        written, and the summary's warnings say so.
      seed: seeds the order of records within a shard.
      on_error: `skip` bad files (listed in skipped.json) or `fail` on the first.
      on_new_label: with a given label map, `fail` on a new class or `append` it.
      label_map_uri: an existing label_map.json or labels.txt, to keep ids stable.
    """

    layout: str = dataclasses.field(default=LAYOUT_AUTO, metadata=flag(choices=LAYOUTS))
    follow_links: bool = False
    splits: tuple[tuple[str, float], ...] = dataclasses.field(
        default=((TRAIN_SPLIT, 0.9), (EVAL_SPLIT, 0.1)), metadata=flag(kind=NAME)
    )
    split_by: str = dataclasses.field(default=SPLIT_BY_CONTENT, metadata=flag(choices=SPLIT_BYS))
    stratify: bool = True
    train_split: str = dataclasses.field(
        default=TRAIN_SPLIT, metadata=flag(metavar="NAME", kind=NAME)
    )
    eval_split: str = dataclasses.field(
        default=EVAL_SPLIT, metadata=flag(metavar="NAME", kind=NAME)
    )
    on_label_conflict: str = dataclasses.field(
        default=LABEL_CONFLICT_SKIP, metadata=flag(choices=LABEL_CONFLICT_ACTIONS)
    )
    num_shards: int | None = dataclasses.field(
        default=None, metadata=flag(metavar="N", name="shards", exclusive="shards")
    )
    shard_mb: float = dataclasses.field(
        default=DEFAULT_SHARD_MB, metadata=flag(metavar="M", exclusive="shards")
    )
    gzip: bool = False
    dali_index: bool = True
    seed: int = 0
    on_error: str = dataclasses.field(default=ON_ERROR_SKIP, metadata=flag(choices=ON_ERRORS))
    on_new_label: str = dataclasses.field(
        default=NEW_LABEL_FAIL, metadata=flag(choices=NEW_LABEL_ACTIONS)
    )
    label_map_uri: str | None = dataclasses.field(
        default=None, metadata=flag(metavar="FILE", name="label-map")
    )

    @property
    def writes_dali_index(self) -> bool:
        return self.dali_index and not self.gzip

    # config_loader: validate() runs once, when the value is built.
    VALIDATED_WHEN_BUILT: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be auto, flat or split, got {self.layout!r}")
        names = [name for name, _ in self.splits]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"splits need distinct names, got {names}")
        for name, weight in self.splits:
            if not name or "/" in name or weight <= 0:
                raise ValueError(
                    f"split {name!r} needs a plain name and a positive weight, got {weight}"
                )
        if self.split_by not in SPLIT_BYS:
            raise ValueError(f"split_by must be content or path, got {self.split_by!r}")
        for setting in ("train_split", "eval_split"):
            name = getattr(self, setting)
            if not name or "/" in name:
                raise ValueError(f"{setting} must be a plain split name, got {name!r}")
        if self.train_split == self.eval_split:
            raise ValueError(
                f"train_split and eval_split must differ: evaluating on the training split "
                f"({self.train_split!r}) measures nothing"
            )
        if self.on_label_conflict not in LABEL_CONFLICT_ACTIONS:
            raise ValueError(
                f"on_label_conflict must be skip, keep or fail, got {self.on_label_conflict!r}"
            )
        if self.num_shards is not None and self.num_shards < 1:
            raise ValueError(f"num_shards must be at least 1, got {self.num_shards}")
        if self.shard_mb <= 0:
            raise ValueError(f"shard_mb must be positive, got {self.shard_mb}")
        if self.on_error not in ON_ERRORS:
            raise ValueError(f"on_error must be skip or fail, got {self.on_error!r}")
        if self.on_new_label not in NEW_LABEL_ACTIONS:
            raise ValueError(f"on_new_label must be fail or append, got {self.on_new_label!r}")


@dataclasses.dataclass(frozen=True)
class ExampleGenConfig:
    """ImageExampleGen's settings, as the pipeline config composes them."""

    image: ImageOptions = dataclasses.field(default_factory=ImageOptions)
    output: OutputOptions = dataclasses.field(default_factory=OutputOptions)


def flat_splits(
    eval_fraction: float, train_split: str = TRAIN_SPLIT, eval_split: str = EVAL_SPLIT
) -> tuple[tuple[str, float], ...]:
    """The (train, eval) split weights of a flat layout with this eval fraction.

    Raises:
      ValueError: the fraction is not in (0, 1).
    """
    if not 0 < eval_fraction < 1:
        raise ValueError(f"the eval fraction must be in (0, 1), got {eval_fraction}")
    return ((train_split, 1 - eval_fraction), (eval_split, eval_fraction))


def eval_fraction(splits: tuple[tuple[str, float], ...], eval_split: str = EVAL_SPLIT) -> float:
    """The eval split's share of the weights (the inverse of flat_splits)."""
    weights = dict(splits)
    return weights.get(eval_split, 0.0) / sum(weights.values())
