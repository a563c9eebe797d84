"""The label audit's I/O: a serving model scores Examples, then label_audit.py judges.

Before training (ImageStatistics, image_statistics/label_gate.py) the model is the
champion; after training (the Trainer) it is the candidate, on its held-out eval split,
and that rate is recorded beside the candidate's weights (REFERENCE_FILE in its
assets.extra/) as the reference the next span's audit is gated against.

The model's `serving_examples` signature scores the serialized Examples themselves, so
the audit sees the pixels exactly as the model is served them. The work is bounded:
at most `StatisticsConfig.label_audit_max_images` images, chosen by a hash of each
file's name, kept while reading (so memory is bounded too).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import posixpath
from collections.abc import Sequence

import cv2
import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

from imgpipe.components.common.formats import artifacts, served_models
from imgpipe.components.common.formats import features as fk
from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.formats.serving import (
    EXAMPLES_INPUT,
    PROBABILITIES,
    SERVING_EXAMPLES,
    ExamplesScorer,
)
from imgpipe.components.common.images import label_audit
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio, staging

# In a serving model's assets.extra/: the audit's rate on the model's own held-out data.
REFERENCE_FILE = "label_audit.json"
REFERENCE_VERSION = 1
BATCH_SIZE = 64
THUMBNAIL_SIZE = 72
# What reading the Examples or loading and running a model can raise (a shard that does
# not read is artifacts.ShardReadError, an OSError): the audit is then skipped, with why.
READ_ERRORS = (OSError, ValueError, KeyError, IndexError, DecodeError, tf.errors.OpError)


@dataclasses.dataclass(frozen=True)
class Reference:
    """REFERENCE_FILE: the label audit of a model's own held-out split, out of sample."""

    flagged_fraction: float
    flagged: int
    audited: int
    split: str
    agreement: float | None = None  # the model's top class is the label (None: older push)
    version: int = REFERENCE_VERSION


@dataclasses.dataclass(frozen=True)
class Record:
    split: str
    path: str
    label: str
    serialized: bytes


@dataclasses.dataclass(frozen=True)
class Audited:
    """An audit with what the report shows besides image_stats.json.

    Attributes:
      result: the typed result for image_stats.json.
      thumbnails: (path, JPEG) of each listed issue, in its order.
    """

    result: schema.LabelAudit
    thumbnails: tuple[tuple[str, bytes], ...] = ()


def skipped(reason: str) -> Audited:
    return Audited(schema.LabelAudit(checked=False, reason=reason))


def _parse(serialized: bytes, names: Sequence[str]) -> tuple[str, str, bytes]:
    """(file name, class name, encoded image) of an Example ImageExampleGen wrote."""
    feature = tf.train.Example.FromString(serialized).features.feature
    encoded = feature[fk.IMAGE_ENCODED_KEY].bytes_list.value[0]
    if fk.FILENAME_KEY in feature:
        path = feature[fk.FILENAME_KEY].bytes_list.value[0].decode()
    elif fk.SHA256_KEY in feature:
        path = "sha256:" + feature[fk.SHA256_KEY].bytes_list.value[0].decode()
    else:
        path = "sha256:" + hashlib.sha256(encoded).hexdigest()
    label = feature[fk.LABEL_KEY].int64_list.value[0] if fk.LABEL_KEY in feature else -1
    return path, names[label] if 0 <= label < len(names) else "", encoded


def read_records(
    examples_uri: str, splits: Sequence[str], max_images: int
) -> tuple[list[Record], int]:
    """The sampled records of `splits` and how many there were in all.

    The `max_images` records whose file names hash lowest: the same images whatever the
    shards' order, held in memory at most `max_images` at a time.
    """
    names = artifacts.load_labels(examples_uri)
    heap: list[tuple[bytes, int, Record]] = []  # max-heap on the hash, by negation
    total = 0
    for split in splits:
        for path in sorted(fileio.glob(artifacts.split_shard_pattern(examples_uri, split))):
            options = tf.io.TFRecordOptions(compression_type=artifacts.shard_compression(path))
            with staging.local_copy(path, "imgpipe-audit-") as readable:
                for serialized in tf.compat.v1.io.tf_record_iterator(readable, options):
                    name, label, _ = _parse(serialized, names)
                    rank = bytes(255 - b for b in hashlib.sha256(name.encode()).digest())
                    item = (rank, -total, Record(split, name, label, serialized))
                    total += 1
                    if len(heap) < max_images:
                        heapq.heappush(heap, item)
                    elif item[:2] > heap[0][:2]:
                        heapq.heapreplace(heap, item)
    kept = sorted(heap, key=lambda item: -item[1])
    return [record for _, _, record in kept], total


def _loaded_scorer(model_dir: str) -> ExamplesScorer:
    signature = tf.saved_model.load(model_dir).signatures[SERVING_EXAMPLES]
    return lambda examples: signature(**{EXAMPLES_INPUT: examples})  # keywords only


def score(
    model_dir: str, records: Sequence[Record], score_examples: ExamplesScorer | None = None
) -> np.ndarray:
    """The model's probabilities [N, C] from its serving_examples signature: loaded from
    `model_dir`, unless the exporting process passes the function it exported."""
    score_examples = score_examples or _loaded_scorer(model_dir)
    batches = tf.data.Dataset.from_tensor_slices(
        tf.constant([r.serialized for r in records], tf.string)
    ).batch(BATCH_SIZE)
    probabilities = [score_examples(batch)[PROBABILITIES].numpy() for batch in batches]
    return np.concatenate(probabilities) if probabilities else np.zeros((0, 0), np.float32)


def _thumbnail(serialized: bytes) -> bytes:
    """A small JPEG of the Example's image for the report; b"" when it does not decode."""
    _, _, encoded = _parse(serialized, ())
    pixels = cv2.imdecode(np.frombuffer(encoded, np.uint8), cv2.IMREAD_COLOR)
    if pixels is None:
        return b""
    small = cv2.resize(pixels, (THUMBNAIL_SIZE, THUMBNAIL_SIZE), interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, 80])
    return data.tobytes() if ok else b""


def agreement(suggested: Sequence[str], given: Sequence[str]) -> float | None:
    """The share of images of known classes whose given label is the model's top class."""
    known = [(s, g) for s, g in zip(suggested, given, strict=True) if s]
    return round(sum(s == g for s, g in known) / len(known), 6) if known else None


def run(
    model_dir: str,
    model_classes: Sequence[str],
    examples_uri: str,
    splits: Sequence[str],
    max_images: int,
    model_version: int | None = None,
    score_examples: ExamplesScorer | None = None,
) -> Audited:
    """The audit of `splits` by the model in `model_dir` (scored by `score_examples`
    when given: score()), without a gate."""
    try:
        records, total = read_records(examples_uri, splits, max_images)
    except READ_ERRORS as e:
        return skipped(f"the Examples of {list(splits)} could not be read: {e}")
    if not records:
        return skipped(f"no image in the splits {list(splits)} to audit")
    given = [r.label for r in records]
    reason = label_audit.too_few(model_classes, given)
    if reason:  # decided by the labels alone: no model is loaded (a SavedModel, 5-7 s)
        classes = set(model_classes)
        known = sum(name in classes for name in given)
        if total > len(records):
            reason += f"; a sample of {len(records)} of {total} images (label_audit_max_images)"
        return Audited(
            schema.LabelAudit(
                checked=False,
                reason=reason,
                model=model_dir,
                model_version=model_version,
                images=total,
                audited=known,
                not_sampled=total - len(records),
                unknown_class=len(given) - known,
                flagged=0,
                flagged_fraction=0.0,
            )
        )
    try:
        probabilities = score(model_dir, records, score_examples)
    except READ_ERRORS as e:
        return skipped(f"the model {model_dir} could not score the images: {e}")
    if probabilities.shape[1] != len(model_classes):
        return skipped(
            f"the model {model_dir} gives {probabilities.shape[1]} probabilities per image but "
            f"its label map names {len(model_classes)} classes"
        )
    try:
        found = label_audit.audit(model_classes, [r.label for r in records], probabilities)
    except (ValueError, AssertionError) as e:  # cleanlab's checks of its inputs
        return skipped(f"confident learning could not audit the model's probabilities: {e}")
    notes = [found.reason] if found.reason else []
    if total > len(records):
        notes.append(f"a sample of {len(records)} of {total} images (label_audit_max_images)")
    listed = label_audit.issues(
        found, [r.split for r in records], [r.path for r in records], [r.label for r in records]
    )
    result = schema.LabelAudit(
        checked=not found.reason,
        reason="; ".join(notes),
        model=model_dir,
        model_version=model_version,
        images=total,
        audited=found.audited,
        not_sampled=total - len(records),
        unknown_class=found.unknown_class,
        flagged=len(found.flagged),
        flagged_fraction=round(found.flagged_fraction, 6),
        agreement=agreement(found.suggested, [r.label for r in records]),
        issues=listed,
    )
    thumbnails = tuple(
        (records[i].path, _thumbnail(records[i].serialized)) for i in found.flagged[: len(listed)]
    )
    return Audited(result, thumbnails)


def read_reference(model: served_models.ServedModel) -> Reference | None:
    """The rate recorded in a push, or None (an older push, or an unreadable file)."""
    path = model.asset(REFERENCE_FILE)
    try:
        if not fileio.exists(path):
            return None
        text = fileio.read_bytes(path).decode()
        return config_loader.from_document(Reference, text, path, REFERENCE_VERSION)
    except READ_ERRORS:
        return None


def write_reference(model_dir: str, audited: schema.LabelAudit, split: str) -> None:
    """Records a checked audit of the model's own held-out split in its assets.extra/."""
    reference = Reference(
        audited.flagged_fraction, audited.flagged, audited.audited, split, audited.agreement
    )
    fileio.write_text(
        posixpath.join(model_dir, served_models.ASSETS_EXTRA_DIR, REFERENCE_FILE),
        config_loader.to_document(reference),
    )
