"""conversion_summary.json, ImageExampleGen's counts: typed, and read and written here only.

ImageExampleGen (and `imgpipe convert`) write it beside the splits; ImageStatistics and
the Trainer read its per-split record counts to check the shards they read, and its
label counts to size their sampling.

Example:
  summary = conversion_summary.read(examples_uri)
  summary.splits["train"].records
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from imgpipe.components.common import config_loader, fileio
from imgpipe.components.common.layout import SUMMARY_FILE

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class SplitSummary:
    records: int
    bytes_in: int
    bytes_out: int
    reencoded: int
    num_shards: int
    labels: dict[str, int]  # label name -> records


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
        return config_loader.from_document(ConversionSummary, f.read(), path, SCHEMA_VERSION)


def read_if_present(folder: str) -> ConversionSummary | None:
    """The summary, or None for Examples written by something else (e.g. TFDS records)."""
    try:
        return read(folder)
    except FileNotFoundError:
        return None
