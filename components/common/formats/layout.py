"""Names inside the artifacts this project writes: files, split folders, shards, splits.

Each name is defined here once. ImageExampleGen's `Examples` artifact holds, beside the
standard `Split-<name>/` folders of `data_tfrecord-SSSSS-of-NNNNN[.gz]` shards:
  label_map.json            {"labels": [names in id order], "version": 1}
  labels.txt                one class name per line, line i is id i
  skipped.json              [{"path", "reason"}] for every file not written
  ignored.json              [{"path", "reason"}] for every file that is not an image
  conversion_summary.json   counts and bytes per split (conversion_summary.py)
  manifest.json             every other file with its size and checksum (manifest.py)
  dali_index/Split-<name>/data_tfrecord-SSSSS-of-NNNNN.idx
                            NVIDIA DALI's TFRecord index of each uncompressed shard: one
                            `offset size` line per record (DALI's tfrecord2idx format).
                            Outside Split-<name>/, whose every file TFX reads as a shard.
ImageStatistics' artifact holds image_stats.json (image_stats.py), report.html and
manifest.json; the Trainer's model artifact holds Format-Serving/ and manifest.json.
An artifact folder is complete only when its manifest.json exists: it is written last.
No TensorFlow here: configuration types and the CLI import it.
"""

from __future__ import annotations

LABEL_MAP_FILE = "label_map.json"
LABELS_TXT_FILE = "labels.txt"
SKIPPED_FILE = "skipped.json"
IGNORED_FILE = "ignored.json"
SUMMARY_FILE = "conversion_summary.json"
IMAGE_STATS_FILE = "image_stats.json"
REPORT_FILE = "report.html"
MANIFEST_FILE = "manifest.json"
# Beside an ImageStatistics output folder: where the outputs of a run stopped by a gate
# stay, for whoever is paged (retention keeps the newest few).
REJECTED_SUFFIX = ".rejected"
# The files ImageExampleGen writes beside the splits.
EXAMPLES_METADATA_FILES = (
    LABEL_MAP_FILE,
    LABELS_TXT_FILE,
    SKIPPED_FILE,
    IGNORED_FILE,
    SUMMARY_FILE,
)
# Hidden folders inside an output that hold a run's intermediate files; a finished run
# removes its own, and a rerun those of a run that was killed.
WORK_DIR_PREFIX = ".imgpipe-work-"
# ExampleValidator's output file in each Split-<name>/ folder
# (tfx.components.example_validator.executor.DEFAULT_FILE_NAME).
VALIDATOR_ANOMALIES_FILE = "SchemaDiff.pb"

SHARD_PREFIX = "data_tfrecord"
# TFX names the folder of each split of an artifact Split-<name>.
SPLIT_DIR_PREFIX = "Split-"
GZIP_SUFFIX = ".gz"
DALI_INDEX_DIR = "dali_index"
DALI_INDEX_SUFFIX = ".idx"
GZIP = "GZIP"

# The splits a flat image folder is divided into, and that the Trainer and the
# Evaluator read by default (OutputOptions.train_split and eval_split).
TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"
# A pre-split folder's held-out split (test/, testing/); it stands in for a missing eval.
TEST_SPLIT = "test"

# The Evaluator's scores and decision, in its evaluation artifact and beside its blessing.
EVALUATION_FILE = "evaluation.json"
