"""The reference set a blessed model carries: the eval images of the last pushes.

One span's eval split is a few dozen images, too few for a paired test to tell two
good models apart. So when the Evaluator blesses, the new reference set is the new eval
split followed by the champion's own reference set (the eval images of the pushes
before it), at most `per_class` images of each class, the newest first, each image
once. Old classes keep their images after a class is added; the images were never
trained on (a window of spans trains on train splits only), so the set stays a fair
judge. It is written as one GZIP shard in reference_sets.py's folder layout.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import tempfile
from collections.abc import Iterator

import tensorflow as tf
from absl import logging

from imgpipe.components.common.formats import artifacts, label_map, layout, manifest, served_models
from imgpipe.components.common.formats import reference_sets as sets
from imgpipe.components.common.formats.features import DEFAULT_KEY_MAP
from imgpipe.components.common.storage import fileio, staging

# What reading the champion's reference set can raise when it is missing or damaged.
_READ_ERRORS = (OSError, ValueError, KeyError, tf.errors.OpError)
SHARD_NAME = f"{layout.SHARD_PREFIX}-00000-of-00001{layout.GZIP_SUFFIX}"


def _records(
    reference: sets.ReferenceSet, local: str
) -> Iterator[tuple[str, bytes, tf.train.Example]]:
    """(class name, image digest, example) of every record, in file order; shards on an
    object store are copied into the local folder `local` first (TensorFlow reads them)."""
    for shard in staging.stage_files(reference.shards, local, reference.uri):
        dataset = tf.data.TFRecordDataset(shard, artifacts.shard_compression(shard))
        for serialized in dataset.as_numpy_iterator():
            example = tf.train.Example.FromString(serialized)
            features = example.features.feature
            label = features[DEFAULT_KEY_MAP.label].int64_list.value[0]
            encoded = features[DEFAULT_KEY_MAP.encoded].bytes_list.value[0]
            yield reference.labels[label], hashlib.sha256(encoded).digest(), example


def previous(champion_path: str | None) -> sets.ReferenceSet | None:
    """The champion's reference set; None when it has none or it cannot be read (the
    new split alone is kept then, and the log says why)."""
    if not champion_path:
        return None
    folder = os.path.join(champion_path, served_models.REFERENCE_ASSET)
    try:
        return sets.read(folder)
    except FileNotFoundError:
        return None
    except _READ_ERRORS as e:
        logging.warning("ImageEvaluator: %s is not carried on: %s", folder, e)
        return None


def write_grown(
    new_split: sets.ReferenceSet, champion_path: str | None, folder: str, per_class: int
) -> dict[str, int]:
    """Writes the new split and the champion's reference set, capped per class, to
    `folder` (manifest last); returns the images kept per class."""
    sources = [new_split] + [s for s in [previous(champion_path)] if s is not None]
    labels = list(new_split.labels)
    for source in sources[1:]:
        labels += [name for name in source.labels if name not in labels]
    ids = {name: i for i, name in enumerate(labels)}
    kept = dict.fromkeys(labels, 0)
    seen: set[bytes] = set()
    fileio.makedirs(folder)
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    with tempfile.TemporaryDirectory(prefix="imgpipe-reference-") as local:
        shard = os.path.join(local, SHARD_NAME)
        with tf.io.TFRecordWriter(shard, options) as writer:
            for index, source in enumerate(sources):
                for name, digest, example in _records(source, os.path.join(local, str(index))):
                    if kept[name] >= per_class or digest in seen:
                        continue
                    seen.add(digest)
                    kept[name] += 1
                    label = example.features.feature[DEFAULT_KEY_MAP.label].int64_list
                    label.value[0] = ids[name]
                    writer.write(example.SerializeToString())
        # Through the file seam: the blessing may be on an object store.
        fileio.copy(shard, posixpath.join(folder, SHARD_NAME), overwrite=True)
    label_map.write(folder, labels)
    names = [SHARD_NAME, layout.LABEL_MAP_FILE, layout.LABELS_TXT_FILE]
    manifest.write(folder, manifest.describe(folder, names))
    return kept
