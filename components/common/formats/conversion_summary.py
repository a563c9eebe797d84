"""conversion_summary.json, ImageExampleGen's counts: typed, and read and written here only.

ImageExampleGen (and `imgpipe convert`) write it beside the splits; ImageStatistics and
the Trainer read its per-split record counts to check the shards they read, and its
label counts to size their sampling. `warnings` says, by name, what a user should look
at: empty class folders, classes too small for every split, empty splits, label
conflicts (byte-identical images under different labels, also in `label_conflicts`),
GZIP shards that DALI cannot read (no index files were written).

Example:
  summary = conversion_summary.read(examples_uri)
  summary.splits["train"].records
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from imgpipe.components.common.formats.layout import SUMMARY_FILE
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio

SCHEMA_VERSION = 2
# Version 1 had no split_by, label_conflicts or warnings; it reads with their defaults.
READABLE_VERSIONS = (1, SCHEMA_VERSION)

# ConversionWarning codes.
EMPTY_CLASS = "empty_class"
SMALL_CLASS = "small_class"
EMPTY_SPLIT = "empty_split"
LABEL_CONFLICT = "label_conflict"
SPLIT_FOLDERS = "split_folders"
NO_DALI_INDEX = "no_dali_index"
FEW_CLASSES = "few_classes"

MAX_LISTED_PATHS = 10


@dataclasses.dataclass(frozen=True)
class SplitSummary:
    records: int
    bytes_in: int
    bytes_out: int
    reencoded: int
    num_shards: int
    labels: dict[str, int]  # label name -> records
    # Of the re-encoded: JPEGs stored upright by their EXIF orientation (2..8), and
    # images whose transparency was composited onto the background. Added in place:
    # a summary without them reads as 0.
    rotated: int = 0
    composited: int = 0


@dataclasses.dataclass(frozen=True)
class LabelConflict:
    """Byte-identical images filed under more than one label.

    Attributes:
      sha256: the images' content hash.
      labels: the labels they are filed under, sorted.
      paths: every copy's relative path, sorted.
      kept: whether the copies were written (on_label_conflict keep) or skipped.
    """

    sha256: str
    labels: tuple[str, ...]
    paths: tuple[str, ...]
    kept: bool

    @property
    def reason(self) -> str:
        """The one line that skipped.json, the log and errors give for each copy."""
        shown = ", ".join(self.paths[:MAX_LISTED_PATHS])
        more = len(self.paths) - MAX_LISTED_PATHS
        return (
            f"label conflict: identical bytes under labels [{', '.join(self.labels)}]: "
            f"{shown}{f' and {more} more' if more > 0 else ''}"
        )


@dataclasses.dataclass(frozen=True)
class ConversionWarning:
    """Something in the data a user should look at; `message` names the class or split."""

    code: str
    message: str


@dataclasses.dataclass(frozen=True)
class ConversionSummary:
    """What one conversion read and wrote. files_seen = written + skipped + ignored."""

    version: int
    layout: str
    files_seen: int
    written: int
    skipped: int
    ignored: int
    ignored_by_reason: dict[str, int]
    bytes_in: int
    bytes_out: int
    size_ratio: float | None
    num_labels: int
    splits: dict[str, SplitSummary]
    compression: str
    image_options: dict[str, Any]  # ImageOptions as plain data
    # Every written image was decoded, strictly (libjpeg's warnings are errors), or is
    # the encoder's own output: ImageStatistics' strict check has nothing to add.
    decoded_every_image: bool = False
    split_by: str = ""  # OutputOptions.split_by of a flat layout; "" for a split layout
    label_conflicts: tuple[LabelConflict, ...] = ()
    warnings: tuple[ConversionWarning, ...] = ()

    @property
    def split_names(self) -> list[str]:
        return list(self.splits)


def write(folder: str, summary: ConversionSummary) -> str:
    """Writes folder/conversion_summary.json; returns its path."""
    path = os.path.join(folder, SUMMARY_FILE)
    with fileio.open_file(path, "w") as f:
        f.write(config_loader.to_document(summary))
    return path


def read(folder: str) -> ConversionSummary:
    """The summary in an Examples folder.

    Raises:
      FileNotFoundError: the folder has no conversion_summary.json.
      ValueError: the file does not fit the schema.
    """
    path = os.path.join(folder, SUMMARY_FILE)
    if not fileio.exists(path):
        raise FileNotFoundError(
            f"{path} not found: was {folder} written by ImageExampleGen or `imgpipe convert`?"
        )
    with fileio.open_file(path, "r") as f:
        text = f.read()
    return config_loader.from_document(ConversionSummary, text, path, _readable_version(text))


def _readable_version(text: str) -> int:
    """The file's version when this release reads it, else the current one (whose
    check then names the file and both versions)."""
    try:
        found = json.loads(text).get("version")
    except (json.JSONDecodeError, AttributeError):
        return SCHEMA_VERSION
    return found if found in READABLE_VERSIONS else SCHEMA_VERSION


def read_if_present(folder: str) -> ConversionSummary | None:
    """The summary, or None for Examples written by something else (e.g. TFDS records)."""
    try:
        return read(folder)
    except FileNotFoundError:
        return None
