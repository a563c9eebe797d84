"""The Evaluator's output, typed: evaluation.json in the `evaluation` artifact.

The candidate's metrics on the new eval split, the champion's status, one Comparison
per evaluation set the two models were scored on side by side (the new split, the
champion's reference set, the eval splits of the earlier spans the candidate was trained
on, the golden set: each restricted to the classes both models know), and the decision
with its reason and every check. This module is its only
reader and writer; the run summary and `imgpipe` read it through `read`.
"""

from __future__ import annotations

import dataclasses
import posixpath

from imgpipe.components.common.formats import layout
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio
from imgpipe.components.evaluator.paired import ClassPaired, Paired

EVALUATION_FILE = layout.EVALUATION_FILE
VERSION = 5
# 1: before comparisons were recorded; 2: before they were paired image by image; 3:
# before the record holder; 4: before the earlier spans' set and each set's level.
READABLE_VERSIONS = (1, 2, 3, 4, 5)

# Champion statuses.
NO_CHAMPION = "none"  # nothing pushed yet: the floor alone
COMPARED = "compared"  # on the classes both models know, when they differ
LABELS_DIFFER = "labels_differ"  # no class in common: the floor alone
NOT_COMPARED = "not_compared"  # evaluator.compare_with_champion is false
UNREADABLE = "unreadable"  # the champion could not be loaded: the floor alone


@dataclasses.dataclass(frozen=True)
class ClassMetrics:
    label: str
    examples: int
    correct: int
    predicted: int  # eval images predicted as this class

    @property
    def recall(self) -> float | None:
        return self.correct / self.examples if self.examples else None


@dataclasses.dataclass(frozen=True)
class ModelMetrics:
    examples: int
    correct: int
    accuracy: float
    per_class: tuple[ClassMetrics, ...]

    @classmethod
    def of(cls, per_class: tuple[ClassMetrics, ...]) -> ModelMetrics:
        examples = sum(c.examples for c in per_class)
        correct = sum(c.correct for c in per_class)
        return cls(examples, correct, correct / examples if examples else 0.0, per_class)

    @property
    def predicted_classes(self) -> int:
        """How many classes the model predicts for at least one eval image."""
        return sum(1 for c in self.per_class if c.predicted)

    def by_label(self) -> dict[str, ClassMetrics]:
        return {c.label: c for c in self.per_class}


@dataclasses.dataclass(frozen=True)
class Champion:
    """The served model compared with, or why there is none.

    Attributes:
      metrics: its metrics on the new eval split, on the classes both models know.
      classes_added, classes_removed: the candidate's classes the champion lacks, and
        the champion's the candidate lacks.
      same_training: the candidate was trained on the same spans' data with the same
        settings as the champion (served_models.TRAINING_DIGEST_FILE): nothing new.
    """

    status: str
    note: str
    path: str | None = None
    version: int | None = None
    metrics: ModelMetrics | None = None
    classes_added: tuple[str, ...] = ()
    classes_removed: tuple[str, ...] = ()
    same_training: bool = False


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Both models scored on one evaluation set, or why they were not.

    Attributes:
      name: reference_sets.NEW_SPLIT, CHAMPION_REFERENCE, EARLIER_SPANS or GOLDEN; a
        set partly read (an earlier span whose Examples are gone) has one compared entry
        and a skipped one per part that could not be read.
      uri: where the set was read ("" when there was none; the earlier spans' Examples,
        comma-separated).
      compared: both models were scored and the rules applied.
      note: why the comparison was skipped, or which classes were left out.
      classes: the classes scored: those the set and both models have.
      candidate, champion: the metrics on those classes; a prediction of a class
        outside them counts as wrong.
      paired: both models image by image on those images (paired.py); None in
        documents of version 2 and earlier.
      paired_by_class: the same, class by class.
      test, p_value, margin: the paired test on all those images, its p-value that the
        candidate is worse, and the practical margin it was judged with.
      level: the significance that test refused at: paired_significance shared among
        the decision's comparisons (blessing.set_levels; version 5). The smallest drop
        the set could have seen is stated at it (paired.Paired.smallest_visible_drop).
    """

    name: str
    uri: str
    compared: bool
    note: str
    classes: tuple[str, ...] = ()
    candidate: ModelMetrics | None = None
    champion: ModelMetrics | None = None
    paired: Paired | None = None
    paired_by_class: tuple[ClassPaired, ...] = ()
    test: str = ""
    p_value: float | None = None
    margin: float | None = None
    level: float | None = None


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class Decision:
    blessed: bool
    reason: str
    checks: tuple[Check, ...]


@dataclasses.dataclass(frozen=True)
class Evaluation:
    eval_split: str
    majority_label: str | None
    majority_rate: float
    required_accuracy: float
    candidate: ModelMetrics
    champion: Champion
    decision: Decision
    comparisons: tuple[Comparison, ...] = ()
    # The record holder (components/common/formats/record_holder.py) when it is another
    # model than the champion, and the candidate against it on each set (version 4).
    record: Champion | None = None
    record_comparisons: tuple[Comparison, ...] = ()
    becomes_record: bool = False
    record_reason: str = ""
    version: int = VERSION


def to_json(evaluation: Evaluation) -> str:
    return config_loader.to_document(evaluation)


def from_json(text: str, where: str = EVALUATION_FILE) -> Evaluation:
    """Raises ValueError naming the field when the document has another shape."""
    return config_loader.from_document(Evaluation, text, where, READABLE_VERSIONS)


def write(uri: str, evaluation: Evaluation) -> None:
    fileio.makedirs(uri)
    fileio.write_text(posixpath.join(uri, EVALUATION_FILE), to_json(evaluation))


def read(uri: str) -> Evaluation:
    path = posixpath.join(uri, EVALUATION_FILE)
    return from_json(fileio.read_bytes(path).decode(), where=path)


def read_if_present(uri: str | None) -> Evaluation | None:
    if not uri or not fileio.exists(posixpath.join(uri, EVALUATION_FILE)):
        return None
    return read(uri)
