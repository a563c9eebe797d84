"""Spans admitted to training: the window of spans a retrain trains on.

A span's data is converted once, by the run that first reads it (ImageExampleGen's
Examples in the pipeline root). When ImageStatistics lets a span through its gates, it
records the span here, beside the champion in the serving directory, which every run
of the schedule reads:

  <serving_dir>/.spans/span-<N>.json   {"span": N, "examples_uri": ..., "labels": [...],
                                        "input_fingerprint": ...}

The Trainer then reads the train splits of the newest `trainer.spans` admitted spans,
its own included (window.py). A span stopped at a gate is never recorded (and a rerun of
a span that stops withdraws it), so a bad span never enters a later window. The folder
starts with a dot: model servers and served_models.complete_versions never see it.
"""

from __future__ import annotations

import dataclasses
import posixpath

from imgpipe.components.common.formats import record_folders
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio, launcher_mounts

SPANS_DIR = ".spans"
VERSION = 1


@dataclasses.dataclass(frozen=True)
class AdmittedSpan:
    """One span that passed the gates.

    Attributes:
      span: its number.
      examples_uri: its ImageExampleGen Examples.
      labels: its classes in id order.
      accepted: it passed only by an acceptance (drift or the label audit): a later
        window reads it only once a model trained on it has been pushed, so data whose
        model was refused (grey photos a colour service never sees) does not spread.
      input_fingerprint: the span folder as the run read it (ImageExampleGen's driver:
        every file's path, size and mtime); "" when unknown. A later run that finds the
        folder changed reads the span again (pipelines/cli/catch_up.py).
    """

    span: int
    examples_uri: str
    labels: tuple[str, ...]
    accepted: bool = False
    version: int = VERSION
    input_fingerprint: str = ""


def record_path(serving_dir: str, span: int) -> str:
    """Where span `span`'s admission is recorded."""
    return posixpath.join(serving_dir, SPANS_DIR, f"span-{span}.json")


def admit(
    serving_dir: str,
    span: int,
    examples_uri: str,
    labels: tuple[str, ...],
    accepted: bool = False,
    input_fingerprint: str = "",
) -> str:
    """Records the span (a rerun of it replaces the record); returns the file. A path
    below a KFP launcher mount is recorded as its store's URI: later runs read it from
    other pods."""
    fileio.makedirs(posixpath.join(serving_dir, SPANS_DIR))
    path = record_path(serving_dir, span)
    record = AdmittedSpan(
        span,
        launcher_mounts.store_uri(examples_uri),
        tuple(labels),
        accepted,
        input_fingerprint=input_fingerprint,
    )
    fileio.write_atomic(path, config_loader.to_document(record).encode())
    return path


def withdraw(serving_dir: str, span: int) -> None:
    """A rerun of the span stopped at a gate: it is no longer admitted."""
    path = record_path(serving_dir, span)
    if fileio.exists(path):
        fileio.remove(path)


def admitted(serving_dir: str, problems: list[str] | None = None) -> list[AdmittedSpan]:
    """Every admitted span, newest first; unreadable records are passed over, and named
    in `problems` when it is given."""
    if not serving_dir:
        return []
    found = record_folders.read_records(
        posixpath.join(serving_dir, SPANS_DIR), AdmittedSpan, VERSION, "span-", problems
    )
    return sorted(found, key=lambda s: s.span, reverse=True)
