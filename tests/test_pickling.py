"""Every DoFn and CombineFn that `imgpipe convert` and `imgpipe stats` build pickles with
Beam's pickler, as a distributed runner ships them to its workers. The functions are
found from the graphs of the real pipelines (each run's graph is visited before it runs),
not from a list."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.internal import pickler

from imgpipe.pipelines import cli
from tests import imagegen

pytestmark = pytest.mark.component


class _FunctionsOf(beam.pipeline.PipelineVisitor):
    def __init__(self) -> None:
        self.found: list[object] = []

    def visit_transform(self, node) -> None:
        self._collect(node)

    def enter_composite_transform(self, node) -> None:
        self._collect(node)

    def _collect(self, node) -> None:
        fn = getattr(node.transform, "fn", None)
        if isinstance(fn, beam.DoFn | beam.CombineFn):
            self.found.append(fn)


@pytest.fixture
def functions(monkeypatch) -> list[object]:
    visitor = _FunctionsOf()
    run = beam.Pipeline.run

    def visit_then_run(pipeline, *args, **kwargs):
        pipeline.visit(visitor)
        return run(pipeline, *args, **kwargs)

    monkeypatch.setattr(beam.Pipeline, "run", visit_then_run)
    return visitor.found


def test_every_function_of_the_convert_and_stats_pipelines_pickles(tmp_path, functions):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    imagegen.make_image_folder(src, {"cat": 4, "dog": 4})
    assert cli.main(["convert", src, out, "--resize", "16", "--no-progress"]) == 0
    report = ["--json", str(tmp_path / "stats.json"), "--html", str(tmp_path / "stats.html")]
    assert cli.main(["stats", out, *report]) == 0

    ours = {type(fn).__name__ for fn in functions if type(fn).__module__.startswith("imgpipe.")}
    # The graphs were found: the conversion's and the statistics' own functions are there.
    assert {"ConvertImageFn", "WriteShardFn", "ImageStatsCombineFn"} <= ours, ours
    failures = []
    for fn in functions:
        try:
            copy = pickler.loads(pickler.dumps(fn))
        except Exception as e:  # a report entry per function that does not travel
            failures.append(f"{type(fn).__module__}.{type(fn).__name__}: {e}")
            continue
        assert type(copy) is type(fn)
    assert failures == []
