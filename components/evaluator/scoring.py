"""Scoring models on an evaluation set: confusion counts, and metrics by class name.

Each model predicts ids of its own classes, and each set's label ids are its own
classes' ids, so models with different classes are compared by name: on the classes
the set and both models share, a prediction of any other class counting as wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from imgpipe.components.common.formats import artifacts
from imgpipe.components.common.formats.features import DEFAULT_KEY_MAP, REFERENCE_SPAN_KEY
from imgpipe.components.common.formats.serving import (
    EXAMPLES_INPUT,
    PROBABILITIES,
    SERVING_EXAMPLES,
)
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.evaluator.paired import ClassPaired, Paired

EVAL_BATCH_SIZE = 64
# A record's span when it does not say (every set but a reference set written since
# reference sets kept spans).
NO_SPAN = -1

Predict = Callable[[tf.Tensor], np.ndarray]


def predictor(model_dir: str) -> Predict:
    """The class ids a serving model's `serving_examples` signature predicts."""
    signature = tf.saved_model.load(model_dir).signatures[SERVING_EXAMPLES]

    def predict(serialized: tf.Tensor) -> np.ndarray:
        return np.argmax(signature(**{EXAMPLES_INPUT: serialized})[PROBABILITIES].numpy(), -1)

    return predict


@dataclasses.dataclass(frozen=True)
class Scored:
    """Every model's prediction of every record of a set, in record order.

    Attributes:
      labels: the set's label id of each record.
      predictions: one array of predicted ids per model (each in its own classes).
      spans: the span each record came from (a reference set's REFERENCE_SPAN_KEY),
        NO_SPAN where the record does not say; None: no record says.
    """

    labels: np.ndarray
    predictions: tuple[np.ndarray, ...]
    spans: np.ndarray | None = None

    def matrix(self, model: int, num_labels: int, classes: int) -> np.ndarray:
        """The [true, predicted] count matrix of one model."""
        matrix: np.ndarray = np.zeros((num_labels, classes), np.int64)
        np.add.at(matrix, (self.labels, self.predictions[model]), 1)
        return matrix


def pair(scored: Scored, first: int, second: int) -> Scored:
    """Two of the models scored, as models 0 and 1 (the candidate against another)."""
    return Scored(
        scored.labels, (scored.predictions[first], scored.predictions[second]), scored.spans
    )


def without_spans(scored: Scored, spans: Sequence[int]) -> tuple[Scored, dict[int, int]]:
    """The records of every span but `spans`, and how many were left out of each of
    those spans that had any."""
    if scored.spans is None or not spans:
        return scored, {}
    left_out = np.isin(scored.spans, list(spans))
    counts = {int(s): int(np.sum(scored.spans == s)) for s in spans}
    kept = ~left_out
    return (
        Scored(
            scored.labels[kept],
            tuple(found[kept] for found in scored.predictions),
            scored.spans[kept],
        ),
        {s: n for s, n in counts.items() if n},
    )


def score(shards: Sequence[str], num_labels: int, predictors: Sequence[Predict]) -> Scored:
    """Every predictor's prediction of every record of the shards.

    Raises:
      ValueError: a label id outside the set's num_labels classes.
      tf.errors.OpError: a shard is unreadable or corrupt.
    """
    features = {
        DEFAULT_KEY_MAP.label: tf.io.FixedLenFeature([], tf.int64),
        REFERENCE_SPAN_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=NO_SPAN),
    }
    by_compression: dict[str, list[str]] = {}
    for shard in shards:
        by_compression.setdefault(artifacts.shard_compression(shard), []).append(shard)
    labels: list[np.ndarray] = []
    spans: list[np.ndarray] = []
    predictions: list[list[np.ndarray]] = [[] for _ in predictors]
    for compression, group in sorted(by_compression.items()):
        for serialized in tf.data.TFRecordDataset(group, compression).batch(EVAL_BATCH_SIZE):
            parsed = tf.io.parse_example(serialized, features)
            batch = parsed[DEFAULT_KEY_MAP.label].numpy()
            spans.append(parsed[REFERENCE_SPAN_KEY].numpy())
            if batch.size and (batch.min() < 0 or batch.max() >= num_labels):
                raise ValueError(
                    f"label ids {sorted(set(batch.tolist()))} do not fit {num_labels} classes"
                )
            labels.append(batch)
            for found, predict in zip(predictions, predictors, strict=True):
                found.append(predict(serialized))
    empty: np.ndarray = np.zeros((0,), np.int64)
    record_spans = np.concatenate(spans) if spans else empty
    return Scored(
        np.concatenate(labels) if labels else empty,
        tuple(np.concatenate(found) if found else empty for found in predictions),
        record_spans if np.any(record_spans != NO_SPAN) else None,
    )


def paired_by_class(
    scored: Scored,
    set_labels: Sequence[str],
    model_labels: Sequence[Sequence[str]],
    shared: Sequence[str],
) -> tuple[ClassPaired, ...]:
    """Candidate (model 0) against champion (model 1) image by image, on the images of
    each shared class: a prediction is right when it names the image's class."""
    found = []
    for name in shared:
        rows = scored.labels == set_labels.index(name)
        right = [
            scored.predictions[i][rows] == list(labels).index(name)
            for i, labels in enumerate(model_labels[:2])
        ]
        found.append(
            ClassPaired(
                name,
                Paired(
                    int(rows.sum()),
                    int(np.sum(right[0] & ~right[1])),
                    int(np.sum(right[1] & ~right[0])),
                ),
            )
        )
    return tuple(found)


def metrics_from_confusion(labels: Sequence[str], matrix: np.ndarray) -> ev.ModelMetrics:
    """Metrics of a model whose classes are the set's, in the same order."""
    return shared_metrics(labels, labels, matrix, labels)


def shared_classes(set_labels: Sequence[str], *model_labels: Sequence[str]) -> tuple[str, ...]:
    """The set's classes that every model knows, in the set's order."""
    return tuple(name for name in set_labels if all(name in m for m in model_labels))


def shared_metrics(
    set_labels: Sequence[str],
    model_labels: Sequence[str],
    matrix: np.ndarray,
    shared: Sequence[str],
) -> ev.ModelMetrics:
    """A model's metrics on the images of the `shared` classes only, by class name.

    Args:
      set_labels: the set's class names in id order (matrix rows).
      model_labels: the model's class names in id order (matrix columns).
      matrix: counts of [true id, predicted id].
      shared: classes both the set and the model have.
    """
    rows = [set_labels.index(name) for name in shared]
    columns = {name: i for i, name in enumerate(model_labels)}
    return ev.ModelMetrics.of(
        tuple(
            ev.ClassMetrics(
                label=name,
                examples=int(matrix[row].sum()),
                correct=int(matrix[row, columns[name]]),
                predicted=int(matrix[rows, columns[name]].sum()),
            )
            for name, row in zip(shared, rows, strict=True)
        )
    )
