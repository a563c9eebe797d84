"""Files this project writes inside TFX artifacts, and readers for them.

ImageExampleGen's `Examples` artifact holds, beside the standard `Split-<name>/` folders:
  label_map.json            {"labels": [names in id order], "version": 1}
  labels.txt                one class name per line, line i is id i
  skipped.json              [{"path", "reason"}] for every file not written
  conversion_summary.json   counts and bytes per split (see ConversionSummary)
ImageStatistics' artifact holds `image_stats.json` (schema in components/image_statistics)
and `report.html`.
All access goes through tf.io.gfile, so gs:// and s3:// URIs work.
"""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

LABEL_MAP_FILE = "label_map.json"
LABELS_TXT_FILE = "labels.txt"
SKIPPED_FILE = "skipped.json"
SUMMARY_FILE = "conversion_summary.json"
IMAGE_STATS_FILE = "image_stats.json"
REPORT_FILE = "report.html"

SHARD_PREFIX = "data_tfrecord"
# TFX names the folder of each split of an artifact Split-<name>.
SPLIT_DIR_PREFIX = "Split-"
GZIP_SUFFIX = ".gz"
GZIP = "GZIP"


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


def read_json(path: str) -> Any:
    with tf.io.gfile.GFile(path, "r") as f:
        return json.load(f)


def write_json(path: str, value: Any) -> None:
    """Writes JSON with sorted keys, so equal values give byte-identical files."""
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def load_labels(examples_uri: str) -> list[str]:
    """Class names in id order, from an ImageExampleGen `Examples` artifact."""
    path = os.path.join(examples_uri, LABEL_MAP_FILE)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"{path} not found: the Examples artifact was not written by ImageExampleGen"
        )
    return list(read_json(path)["labels"])


def load_summary(examples_uri: str) -> dict[str, Any]:
    """ImageExampleGen's conversion summary: per-split records and bytes written."""
    return read_json(os.path.join(examples_uri, SUMMARY_FILE))


def load_skipped(examples_uri: str) -> list[dict[str, str]]:
    path = os.path.join(examples_uri, SKIPPED_FILE)
    return read_json(path) if tf.io.gfile.exists(path) else []


def load_normalization(statistics_uri: str, split: str = "train") -> dict[str, Any]:
    """The Trainer's normalization constants from an ImageStatistics artifact.

    The contract with components/image_statistics: image_stats.json holds
      {"version": 1,
       "preprocessing": {"image_size": int, "crop_fraction": float},
       "splits": {<split>: {"pixels": {"mean": [r, g, b], "std": [r, g, b]}, ...}}}
    with mean and std on the 0..255 scale, computed over `eval_image` pixels.

    Returns:
      {"mean": [3 floats], "std": [3 floats], "image_size": int, "crop_fraction": float}
    """
    stats = read_json(os.path.join(statistics_uri, IMAGE_STATS_FILE))
    if split not in stats["splits"]:
        raise KeyError(f"{statistics_uri}/{IMAGE_STATS_FILE} has no split {split!r}; "
                       f"it has {sorted(stats['splits'])}")
    pixels = stats["splits"][split]["pixels"]
    return {
        "mean": [float(v) for v in pixels["mean"]],
        "std": [float(v) for v in pixels["std"]],
        "image_size": int(stats["preprocessing"]["image_size"]),
        "crop_fraction": float(stats["preprocessing"]["crop_fraction"]),
    }
