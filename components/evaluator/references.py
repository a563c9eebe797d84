"""The reference set a blessed model carries: the eval images of the last pushes.

One span's eval split is a few dozen images, too few for a paired test to tell two
good models apart. So when the Evaluator blesses, the new reference set is the new eval
split followed by the champion's own reference set (the eval images of the pushes
before it), at most `per_class` images of each class, the newest first, each image
once. Old classes keep their images after a class is added; the images were never
trained on (a window of spans trains on train splits only), so the set stays a fair
judge. It is written as one GZIP shard in reference_sets.py's folder layout, each record
with the span it came from (REFERENCE_SPAN_KEY): a comparison leaves out the images of a
span admitted by an acceptance that the other model was trained on and the candidate's
window has moved past (left_behind).

The eval splits of the window's earlier spans (window_set) are unseen in the same way,
and partly the same images: a span whose candidate was blessed left its eval split in
the reference set. So they are judged as one more set of what the reference set does not
already hold (those of spans whose candidate was refused, or past the cap), each image
once, by the SHA-256 of its encoded bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import posixpath
import tempfile
from collections.abc import Iterator, Sequence

import tensorflow as tf
from absl import logging

from imgpipe.components.common.formats import artifacts, label_map, layout, manifest, served_models
from imgpipe.components.common.formats import reference_sets as sets
from imgpipe.components.common.formats.features import DEFAULT_KEY_MAP, REFERENCE_SPAN_KEY
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
    new_split: sets.ReferenceSet,
    span: int | None,
    champion_path: str | None,
    folder: str,
    per_class: int,
) -> dict[str, int]:
    """Writes the new split and the champion's reference set, capped per class, to
    `folder` (manifest last); returns the images kept per class. Each new-split record
    carries `span` (REFERENCE_SPAN_KEY) when it is known; the champion's records keep
    theirs."""
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
                    feature = example.features.feature
                    feature[DEFAULT_KEY_MAP.label].int64_list.value[0] = ids[name]
                    if index == 0 and span is not None:
                        feature[REFERENCE_SPAN_KEY].int64_list.value[:] = [span]
                    writer.write(example.SerializeToString())
        # Through the file seam: the blessing may be on an object store.
        fileio.copy(shard, posixpath.join(folder, SHARD_NAME), overwrite=True)
    label_map.write(folder, labels)
    names = [SHARD_NAME, layout.LABEL_MAP_FILE, layout.LABELS_TXT_FILE]
    manifest.write(folder, manifest.describe(folder, names))
    return kept


def left_behind(baseline_dir: str | None, candidate_dir: str) -> tuple[int, ...]:
    """The spans admitted by an acceptance that the baseline (the champion, the record
    holder) was trained on and the candidate was not: its window has moved past them.

    Such a span differs from what was served (a grey day, a mislabelled batch let
    through); the baseline learnt it, and its images in the reference set would refuse
    every candidate after it, whatever else it did better, and freeze the schedule. So a
    comparison leaves them out. A span that passed its gates on its own stays: losing
    what such data taught is a loss. () when either model has no record of its spans (a
    model trained before the Trainer kept one)."""
    baseline = served_models.training_of(baseline_dir) if baseline_dir else {}
    candidate = served_models.training_of(candidate_dir).get("spans")
    accepted = baseline.get(served_models.ACCEPTED_SPANS_KEY)
    if not isinstance(accepted, list) or not isinstance(candidate, list):
        return ()
    return tuple(sorted({s for s in accepted if isinstance(s, int)} - set(candidate)))


@dataclasses.dataclass(frozen=True)
class WindowSet:
    """The eval splits of the window's earlier spans, merged (window_set).

    Attributes:
      reference: the merged set (one local shard); None when no image is left.
      spans: the spans whose images were read, newest first.
      images: the images it holds.
      already_seen: images left out because a set scored already holds them (or an
        earlier span of the window did).
      unreadable: (span, examples_uri, why) of each span whose records could not be read.
    """

    reference: sets.ReferenceSet | None
    spans: tuple[int, ...]
    images: int
    already_seen: int
    unreadable: tuple[tuple[int, str, str], ...] = ()


def window_set(
    splits: Sequence[tuple[int, sets.ReferenceSet]],
    seen: Sequence[sets.ReferenceSet],
    labels: Sequence[str],
    folder: str,
) -> WindowSet:
    """The eval splits of earlier spans as one set, written to the local `folder`: each
    image once, and none that a set in `seen` holds (the new split, the champion's
    reference set). Label ids are mapped by class name: `labels` (the candidate's) first,
    then any other class a span has. A span whose records cannot be read is left out and
    named; a set in `seen` that cannot be read holds nothing here (it is skipped, and
    said so, where it is scored).

    Args:
      splits: (span, its eval split) of each earlier span, newest first.
      seen: the sets scored already.
      labels: the candidate's classes, in id order.
      folder: a local folder for the merged shard (and the copies of remote shards).
    """
    known: set[bytes] = set()
    for index, reference in enumerate(seen):
        try:
            for _, digest, _ in _records(reference, os.path.join(folder, f"seen-{index}")):
                known.add(digest)
        except _READ_ERRORS as e:
            logging.info("ImageEvaluator: %s holds nothing to leave out: %s", reference.uri, e)
    names = list(labels)
    kept: list[tuple[str, tf.train.Example]] = []
    read: list[int] = []
    unreadable: list[tuple[int, str, str]] = []
    already = 0
    for index, (span, split) in enumerate(splits):
        try:  # each span read whole before any of it is kept
            records = list(_records(split, os.path.join(folder, f"span-{index}")))
        except _READ_ERRORS as e:
            unreadable.append((span, split.uri, " ".join(str(e).split())[:300]))
            continue
        read.append(span)
        for name, digest, example in records:
            if digest in known:
                already += 1
                continue
            known.add(digest)
            if name not in names:
                names.append(name)
            kept.append((name, example))
    if not kept:
        return WindowSet(None, tuple(read), 0, already, tuple(unreadable))
    ids = {name: i for i, name in enumerate(names)}
    shard = os.path.join(folder, SHARD_NAME)
    with tf.io.TFRecordWriter(shard, tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for name, example in kept:
            example.features.feature[DEFAULT_KEY_MAP.label].int64_list.value[0] = ids[name]
            writer.write(example.SerializeToString())
    uris = ", ".join(split.uri for span, split in splits if span in read)
    merged = sets.ReferenceSet(sets.EARLIER_SPANS, uris, tuple(names), (shard,))
    return WindowSet(merged, tuple(read), len(kept), already, tuple(unreadable))
