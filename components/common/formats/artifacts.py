"""Readers and writers of the files inside this project's artifacts (names in layout.py;
the typed JSON documents in image_stats.py and conversion_summary.py).

All access goes through the file seam (fileio), so gs:// and s3:// URIs work.
"""

from __future__ import annotations

import json
import os
from typing import Any

from imgpipe.components.common.formats import label_map
from imgpipe.components.common.formats.layout import (
    DALI_INDEX_DIR,
    DALI_INDEX_SUFFIX,
    GZIP,
    GZIP_SUFFIX,
    LABEL_MAP_FILE,
    SHARD_PREFIX,
    SKIPPED_FILE,
    SPLIT_DIR_PREFIX,
)
from imgpipe.components.common.storage import fileio


class ShardReadError(OSError):
    """A shard is corrupt or truncated, or the shards disagree with the recorded counts;
    the message names the shard or the split."""


def shard_compression(path: str) -> str:
    """The TFRecord compression of a shard, from its name: GZIP for .gz, else none ("")."""
    return GZIP if path.endswith(GZIP_SUFFIX) else ""


def split_dir(examples_uri: str, split: str) -> str:
    return os.path.join(examples_uri, SPLIT_DIR_PREFIX + split)


def split_shard_pattern(examples_uri: str, split: str) -> str:
    return os.path.join(split_dir(examples_uri, split), f"{SHARD_PREFIX}-*")


def dali_index_dir(examples_uri: str, split: str) -> str:
    return os.path.join(examples_uri, DALI_INDEX_DIR, SPLIT_DIR_PREFIX + split)


def dali_index_path(examples_uri: str, split: str, shard_path: str) -> str:
    """The DALI index file of one of `split`'s shards (it has one when not GZIP'd)."""
    return os.path.join(
        dali_index_dir(examples_uri, split), os.path.basename(shard_path) + DALI_INDEX_SUFFIX
    )


def read_json(path: str) -> Any:
    with fileio.open_file(path, "r") as f:
        return json.load(f)


def write_json(path: str, value: Any) -> None:
    """Writes JSON with sorted keys, so equal values give byte-identical files."""
    with fileio.open_file(path, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def load_labels(examples_uri: str) -> list[str]:
    """Class names in id order, from an ImageExampleGen `Examples` artifact."""
    path = os.path.join(examples_uri, LABEL_MAP_FILE)
    if not fileio.exists(path):
        raise FileNotFoundError(
            f"{path} not found: the Examples artifact was not written by ImageExampleGen"
        )
    return list(label_map.read(path).labels)


def load_skipped(examples_uri: str) -> list[dict[str, str]]:
    path = os.path.join(examples_uri, SKIPPED_FILE)
    return read_json(path) if fileio.exists(path) else []
