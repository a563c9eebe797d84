"""Retraining unattended, span after span, into one pipeline root and one serving
directory: on LocalDagRunner and on the compiled package under kfp.local.

span 1 is trained and pushed; span 2 adds images and is pushed only if not worse than
span 1's model; span 3 has shuffled labels: the champion's label audit stops it before
training (LocalDagRunner), and, let through by a higher max_label_issue_fraction, the
Evaluator refuses it, the champion unchanged (its class means drift too: that run only
warns, to reach the Evaluator); span 4 turns every image grey, and the drift check stops
the run (LocalDagRunner, the default). The compiled package runs spans 1 and 3, built with
fail_on_drift false: its drift is warned about.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from imgpipe.components.common.formats import conversion_summary, image_stats, layout, served_models
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.image_statistics import drift
from imgpipe.components.image_statistics.anomalies import AnomaliesFoundError
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines import local_runner, run_summary
from tests import retraining_data
from tests.test_kubeflow_local import subprocess_runner_for_tfx_steps

PER_CLASS = {1: 40, 2: 60, 3: 60, 4: 60}

# Small and fast, but the rules are the defaults: significance 0.01, tolerance 0.01.
SETTINGS = {
    "pipeline_name": "retraining-test",
    "trainer": {
        "image_size": 32,
        "batch_size": 16,
        "epochs": 2,
        "min_train_steps": 60,
        "warm_start": True,
        "tensorboard_images": 0,
    },
    "example_gen": {"output": {"num_shards": 1}},
    "beam_args": ["--direct_num_workers=1", "--direct_running_mode=in_memory"],
}


def _make_spans(root: str) -> dict[int, str]:
    return {
        1: retraining_data.span_folder(root, 1, PER_CLASS[1]),
        2: retraining_data.span_folder(root, 2, PER_CLASS[2]),
        3: retraining_data.span_folder(root, 3, PER_CLASS[3], shuffle_labels=True),
        4: retraining_data.span_folder(root, 4, PER_CLASS[4], greyscale=True),
    }


def _drifted(stats: image_stats.ImageStats) -> set[str]:
    assert stats.drift.checked, stats.drift.reason
    return {check.metric for check in stats.drift.checks if check.drifted}


def _assert_compared_with(evaluation: ev.Evaluation, champion) -> None:
    assert evaluation.champion.status == ev.COMPARED
    assert evaluation.champion.version == champion.version
    assert evaluation.champion.metrics is not None


def _not_worse(evaluation: ev.Evaluation, tolerance: float) -> bool:
    compared = [c for c in evaluation.comparisons if c.compared]
    assert {c.name for c in compared} == {"new_split", "champion_reference"}
    return all(c.candidate.accuracy >= c.champion.accuracy - tolerance for c in compared)


@pytest.mark.pipeline
def test_retraining_on_local_dag_runner(tmp_path):
    images = str(tmp_path / "images")
    serving = str(tmp_path / "serving")
    settings = {
        **SETTINGS,
        "data_root": os.path.join(images, "span-{SPAN}"),
        "pipeline_root": str(tmp_path / "root"),
        "serving_dir": serving,
    }
    config = cfg.from_dict(settings)
    spans = _make_spans(str(tmp_path / "staged"))

    def run_span(
        span: int, fail_on_drift: bool = True, **statistics_settings
    ) -> tuple[local_runner.RunResult, ev.Evaluation, list[str]]:
        if os.path.exists(spans[span]):
            os.rename(spans[span], os.path.join(images, f"span-{span}"))  # new data lands
        statistics = {"fail_on_drift": fail_on_drift, **statistics_settings}
        result = local_runner.run(cfg.from_dict({**settings, "statistics": statistics}))
        examples = result.artifact(ids.EXAMPLE_GEN, "examples")
        assert examples is not None and examples.properties["span"] == span
        summary = run_summary.summary_lines(result, config)
        evaluation = ev.read(result.uri(ids.EVALUATOR, "evaluation"))
        return result, evaluation, summary

    os.makedirs(images)
    _, first, summary = run_span(1)
    assert first.decision.blessed, first.decision.reason
    assert first.champion.status == ev.NO_CHAMPION
    champion_1 = served_models.latest(serving)
    assert champion_1 is not None
    assert retraining_data.served_accuracy(champion_1.path) > 0.9
    assert any(line.startswith("data") and "(span 1)" in line for line in summary)
    assert any(line.startswith("warm start           fresh: no champion") for line in summary)

    result, second, summary = run_span(2)
    _assert_compared_with(second, champion_1)
    assert not _drifted(image_stats.read(result.uri(ids.IMAGE_STATISTICS, "statistics")))
    champion_2 = served_models.latest(serving)
    # Pushed exactly when not worse than span 1's model, by the tolerance, on every set
    # compared: span 2's eval split and span 1's reference set.
    not_worse = _not_worse(second, 0.01)
    assert second.decision.blessed == not_worse
    assert (champion_2 != champion_1) == not_worse
    assert any(
        line.startswith(f"warm start           full: from champion {champion_1.path}")
        for line in summary
    )
    assert any(
        line.startswith("eval accuracy") and f"champion {champion_1.version}" in line
        for line in summary
    )

    # The champion's label audit stops the shuffled span before training.
    with pytest.raises(AnomaliesFoundError) as stopped:
        run_span(3, fail_on_drift=False)
    assert "label_issues" in {a.code for a in stopped.value.anomalies}
    assert "look mislabelled to the served model" in str(stopped.value)
    # Let through for this span by the fix the stop names, it reaches the Evaluator.
    result, third, summary = run_span(3, fail_on_drift=False, max_label_issue_fraction=0.99)
    assert any(line.startswith("label audit ") and line.endswith(": pass") for line in summary)
    assert not third.decision.blessed
    assert third.decision.reason.startswith("not blessed: ")
    assert served_models.latest(serving) == champion_2
    assert any(line.startswith("model (served)       not pushed") for line in summary)
    assert any(line.startswith("drift") and drift.CLASS_MEAN_SHIFT in line for line in summary)
    stats = image_stats.read(result.uri(ids.IMAGE_STATISTICS, "statistics"))
    assert drift.CLASS_MEAN_SHIFT in _drifted(stats)

    with pytest.raises(AnomaliesFoundError) as stopped:
        run_span(4)
    assert "statistics.fail_on_drift: true" in str(stopped.value)
    # The champion cannot tell grey images apart: its label audit may stop them too.
    assert "drift" in {a.code for a in stopped.value.anomalies}
    assert served_models.latest(serving) == champion_2


@pytest.mark.pipeline
def test_retraining_with_the_compiled_package_under_kfp_local(tmp_path):
    """One compiled package, two runs, each with its own data_root parameter."""
    from kfp import components, local

    from imgpipe.pipelines.kubeflow import compiler

    spans = _make_spans(str(tmp_path / "images"))
    serving = str(tmp_path / "serving")
    config = cfg.from_dict(
        {
            **SETTINGS,
            "data_root": spans[1],
            "pipeline_root": str(tmp_path / "unused-root"),
            "serving_dir": serving,
            # Warn only, so every run reaches the Evaluator: drift, and the label audit
            # (whose stop the LocalDagRunner test checks) only reports.
            "statistics": {"fail_on_drift": False, "max_label_issue_fraction": 0.99},
        }
    )
    package = compiler.compile_to_file(config, str(tmp_path / "pipeline.yaml"))
    pipeline_root = tmp_path / "kfp-root"
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(pipeline_root),
        raise_on_error=True,
    )
    pipeline = components.load_component_from_file(package)

    pushed: list[int] = []  # each run's `pushed` output (docs/retraining.md)

    def run(
        **arguments,
    ) -> tuple[ev.Evaluation, conversion_summary.ConversionSummary, image_stats.ImageStats]:
        before = set(os.listdir(pipeline_root)) if pipeline_root.exists() else set()
        with subprocess_runner_for_tfx_steps():
            task = pipeline(**arguments)
        pushed.append(int(task.outputs[compiler.PUSHED_OUTPUT].metadata["pushed"]))
        (run_dir,) = set(os.listdir(pipeline_root)) - before
        # Every step left an executor output naming its artifacts.
        outputs = glob.glob(str(pipeline_root / run_dir / "*" / "executor_output.json"))
        assert len(outputs) == len(ids.COMPONENT_IDS)
        for path in outputs:
            with open(path) as f:
                assert json.load(f)["artifacts"], path
        # kfp.local names task folders its own way: find each file under the run.
        (evaluation,) = (
            path
            for path in glob.glob(
                str(pipeline_root / run_dir / "**" / ev.EVALUATION_FILE), recursive=True
            )
            if "blessing" not in os.path.relpath(path, pipeline_root)  # the Pusher's copy
        )
        (summary,) = glob.glob(
            str(pipeline_root / run_dir / "**" / layout.SUMMARY_FILE), recursive=True
        )
        (statistics,) = (
            path
            for path in glob.glob(
                str(pipeline_root / run_dir / "**" / layout.IMAGE_STATS_FILE), recursive=True
            )
            if served_models.ASSETS_EXTRA_DIR not in path  # the model's copy
        )
        return (
            ev.read(os.path.dirname(evaluation)),
            conversion_summary.read(os.path.dirname(summary)),
            image_stats.read(os.path.dirname(statistics)),
        )

    first, data_1, _ = run()  # the compiled defaults: span 1
    assert first.decision.blessed, first.decision.reason
    assert pushed == [1]
    champion_1 = served_models.latest(serving)
    assert champion_1 is not None

    # Spans 2 and 4 are the LocalDagRunner test's: here, the package's parameters carry
    # another data root and epochs to the second run, which meets span 1's champion.
    third, data_3, stats_3 = run(data_root=spans[3], epochs=3)
    assert data_1.written == 3 * PER_CLASS[1]
    assert data_3.written == 3 * PER_CLASS[3]
    _assert_compared_with(third, champion_1)
    assert stats_3.label_audit.checked and stats_3.label_audit.flagged_fraction > 0.3
    assert not third.decision.blessed
    assert pushed == [1, 0]
    assert served_models.latest(serving) == champion_1
    # Compiled with fail_on_drift false: the drift is warned about, and the run goes on.
    assert drift.CLASS_MEAN_SHIFT in _drifted(stats_3)
    assert "drift" in {anomaly.code for anomaly in stats_3.anomalies}
