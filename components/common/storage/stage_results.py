"""The one way a Beam stage's results come back to the code that launched it: typed
records, one file each in a results folder, written by the last step of the stage and
read back once the pipeline finished.

The conversion's shard rows and label conflicts and the statistics' per-split
accumulators and duplicate groups all come back this way. Results are few and small (a
record per shard, per split or per bucket), so none goes through a sink (a WriteToText
measured about 0.25 s of a local run's fixed cost). A DoFn that produces a result writes
it itself with `write_result`, which adds no step to the pipeline (the conversion's three
writing steps measured about 30 ms of its fixed cost); where a result is the output of a
transform, such as a CombinePerKey, `WriteResults` writes it in a step that fuses with
that transform. A record's file is named after its kind and key and written atomically,
so a retried task replaces its own whole, a killed one leaves no partial record, and the
reader gets each key once, in key order. All I/O goes through the file seam, so the
folder may be in an object store.

Example:
    SPLIT_STATS: ResultKind[SplitAccumulator] = ResultKind("stats", SplitAccumulator)
    _ = combined | "WriteStats" >> WriteResults(results_dir, SPLIT_STATS)
    # or, in the DoFn that computes it:
    write_result(results_dir, SPLIT_STATS, split, accumulator)
    ...
    pipeline.run().wait_until_finish()
    by_split = read_results(results_dir, SPLIT_STATS)
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from typing import Any, Generic, TypeVar, cast

import apache_beam as beam

from imgpipe.components.common.storage import fileio

T = TypeVar("T")

RESULT_SUFFIX = ".result"


@dataclasses.dataclass(frozen=True)
class ResultKind(Generic[T]):
    """One kind of result: the name its files start with and the type of its values
    (checked when read back)."""

    name: str
    value_type: type


@dataclasses.dataclass(frozen=True)
class ResultRecord(Generic[T]):
    """One result as stored: its kind's name, its key and its value."""

    kind: str
    key: str
    value: T


def key_text(key: str | int) -> str:
    """A record's key as its file names it: a number zero-padded, so keys sort."""
    return f"{key:05d}" if isinstance(key, int) else key


def result_path(results_dir: str, kind: ResultKind[Any], key: str | int) -> str:
    return os.path.join(results_dir, f"{kind.name}-{key_text(key)}{RESULT_SUFFIX}")


def write_result(results_dir: str, kind: ResultKind[T], key: str | int, value: T) -> None:
    """Writes `value` as the record of `kind` under `key` into `results_dir` (which must
    exist), replacing any earlier one whole; read them back with `read_results`."""
    record = ResultRecord(kind.name, key_text(key), value)
    data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    fileio.write_atomic(result_path(results_dir, kind, key), data)


@beam.ptransform_fn
def WriteResults(  # noqa: N802 - Beam transforms are named like classes
    keyed: beam.PCollection, results_dir: str, kind: ResultKind[Any]
) -> beam.PCollection:
    """Writes each (key, value) of `keyed` as a record of `kind` into `results_dir`
    (which must exist); read them back with `read_results`."""
    return keyed | "Write" >> beam.MapTuple(
        lambda key, value: write_result(results_dir, kind, key, value)
    )


def read_results(results_dir: str, kind: ResultKind[T]) -> dict[str, T]:
    """{key: value} of the records of `kind` in `results_dir`, in key order.

    Raises:
      TypeError: a record is not of `kind` or its value not of `kind`'s type.
    """
    values: dict[str, T] = {}
    pattern = os.path.join(results_dir, f"{kind.name}-*{RESULT_SUFFIX}")
    for path in sorted(fileio.glob(pattern)):
        with fileio.open_file(path, "rb") as f:
            record = pickle.loads(f.read())
        if (
            not isinstance(record, ResultRecord)
            or record.kind != kind.name
            or not isinstance(record.value, kind.value_type)
        ):
            raise TypeError(f"{path}: not a {kind.name} result of type {kind.value_type.__name__}")
        values[record.key] = cast(T, record.value)
    return dict(sorted(values.items()))
