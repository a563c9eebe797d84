"""The one way the Beam stages' results come back (common/storage/stage_results.py):
written from a real pipeline, read back typed and in key order, a retried key
overwriting its own record, a write cut short leaving nothing to read, and a record of
another kind or type refused."""

from __future__ import annotations

import dataclasses
import os

import apache_beam as beam
import pytest

from imgpipe.components.common.storage import fileio, stage_results

pytestmark = pytest.mark.component


@dataclasses.dataclass(frozen=True)
class _Row:
    name: str
    count: int


ROWS: stage_results.ResultKind[_Row] = stage_results.ResultKind("rows", _Row)
COUNTS: stage_results.ResultKind[int] = stage_results.ResultKind("counts", int)


def test_results_written_by_a_pipeline_come_back_typed_in_key_order(tmp_path):
    results_dir = str(tmp_path)
    with beam.Pipeline() as pipeline:
        rows = pipeline | "Rows" >> beam.Create([("b", _Row("b", 2)), ("a", _Row("a", 1))])
        _ = rows | "WriteRows" >> stage_results.WriteResults(results_dir, ROWS)
        counts = pipeline | "Counts" >> beam.Create([(12, 5), (3, 7)])
        _ = counts | "WriteCounts" >> stage_results.WriteResults(results_dir, COUNTS)

    assert list(stage_results.read_results(results_dir, ROWS).items()) == [
        ("a", _Row("a", 1)),
        ("b", _Row("b", 2)),
    ]
    # Numeric keys are zero-padded, so they sort as numbers.
    assert list(stage_results.read_results(results_dir, COUNTS).items()) == [
        ("00003", 7),
        ("00012", 5),
    ]
    assert sorted(os.listdir(results_dir)) == [
        "counts-00003.result",
        "counts-00012.result",
        "rows-a.result",
        "rows-b.result",
    ]


def test_a_retried_key_overwrites_its_record(tmp_path):
    stage_results.write_result(str(tmp_path), ROWS, "a", _Row("a", 1))
    stage_results.write_result(str(tmp_path), ROWS, "a", _Row("a", 9))
    assert stage_results.read_results(str(tmp_path), ROWS) == {"a": _Row("a", 9)}
    assert os.listdir(tmp_path) == ["rows-a.result"]


def test_a_write_cut_short_leaves_no_record_a_reader_accepts(tmp_path):
    with pytest.raises(Exception):  # noqa: B017 - pickle's error type varies by value
        stage_results.write_result(str(tmp_path), ROWS, "a", lambda: None)
    assert os.listdir(tmp_path) == []
    # What a task killed while writing leaves: its temporary file, never read.
    torn = stage_results.result_path(str(tmp_path), ROWS, "b") + fileio.ATOMIC_TEMP_SUFFIX
    with open(torn, "wb") as f:
        f.write(b"\x80\x05torn")
    assert stage_results.read_results(str(tmp_path), ROWS) == {}


def test_a_record_of_another_type_is_refused_naming_its_file(tmp_path):
    same_name = stage_results.ResultKind("rows", int)
    stage_results.write_result(str(tmp_path), same_name, "a", 3)
    with pytest.raises(TypeError, match=r"rows-a\.result: not a rows result of type _Row"):
        stage_results.read_results(str(tmp_path), ROWS)


def test_an_empty_folder_reads_as_no_results(tmp_path):
    assert stage_results.read_results(str(tmp_path), ROWS) == {}
