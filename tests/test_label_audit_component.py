"""The label audit in ImageStatistics' executor, with a champion trained on photos: a span
with 40% of its labels moved stops before training, with one line naming the fix; a
clean span passes. And the Trainer's audit of a held-out split records its rate."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from tfx.types import artifact_utils, standard_artifacts

from benchmarks import label_audit_bench as bench
from imgpipe.components.common.formats import champion, layout, served_models
from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.formats.artifact_types import ImageStatisticsArtifact
from imgpipe.components.common.images import label_audit_scoring as scoring
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.image_statistics import anomalies as anomaly_lib
from imgpipe.components.image_statistics import label_gate, spec
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.executor import Executor
from imgpipe.components.trainer import candidate_audit
from imgpipe.pipelines import run_summary
from tests import trainer_helpers as th

pytestmark = pytest.mark.component

PER_CLASS = 20
SPLITS = ["train", "eval"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A champion pushed to serving/, trained on clean crops; a span of other crops."""
    root = tmp_path_factory.mktemp("label-audit")
    clean = bench.photo_folder(str(root / "champion-data"), PER_CLASS, seed=0)
    held_out = bench.photo_folder(str(root / "champion-eval"), 8, seed=7)
    serving = str(root / "serving")
    push, accuracy = bench.train_champion(clean, held_out, serving, epochs=15)
    assert accuracy > 0.8, accuracy  # the audit needs a champion that knows the classes
    span = bench.photo_folder(str(root / "span-photos"), PER_CLASS, seed=1)
    examples = bench.convert(str(root / "span-photos"), str(root / "span-examples"))
    return {"root": root, "serving": serving, "push": push, "span": span, "examples": examples}


def run_statistics(world, name: str, rate: float, serving: str | None = None):
    """ImageStatistics' executor on a copy of the span with `rate` of its labels moved."""
    root = world["root"]
    moved = bench.moved_copy(world["span"], str(root / name), rate, seed=3)
    examples = standard_artifacts.Examples()
    examples.uri = bench.convert(str(root / name), str(root / f"{name}-examples"))
    examples.split_names = artifact_utils.encode_split_names(SPLITS)
    output = ImageStatisticsArtifact()
    output.uri = str(root / f"{name}-statistics")
    properties = {
        spec.IMAGE_SIZE_KEY: bench.IMAGE_SIZE,
        spec.CROP_FRACTION_KEY: 1.0,
        spec.STATISTICS_CONFIG_KEY: config_loader.to_json(StatisticsConfig(sample_thumbnails=0)),
    }
    executor = Executor(
        Executor.Context(beam_pipeline_args=["--direct_num_workers=1"], tmp_dir=str(root))
    )
    th.run_image_statistics(
        executor,
        examples,
        output,
        properties,
        str(root / f"{name}-run"),
        world["serving"] if serving is None else serving,
    )
    return output.uri, moved, examples.uri


def test_a_clean_span_passes_and_its_audit_is_reported(world):
    uri, _, _ = run_statistics(world, "clean", 0.0)
    stats = schema.read(uri)
    audited = stats.label_audit
    assert audited.checked and not audited.exceeded and not stats.anomalies
    assert audited.model == world["push"] and audited.model_version == bench.CHAMPION_VERSION
    assert audited.audited == audited.images == PER_CLASS * len(bench.CLASSES)
    assert audited.flagged_fraction < 0.1 and audited.reference_fraction is not None
    report = open(os.path.join(uri, layout.REPORT_FILE)).read()
    assert 'class="label-audit" data-checked="true"' in report and 'data-exceeded="false"' in report
    (line,) = run_summary.label_audit_lines(uri)
    assert line.startswith("label audit") and line.endswith(": pass")
    assert f"gate {audited.threshold:.1%}" in line


def test_a_span_with_40_percent_of_labels_moved_stops_before_training(world):
    with pytest.raises(anomaly_lib.AnomaliesFoundError) as stopped:
        run_statistics(world, "shuffled", 0.4)
    message = str(stopped.value)
    (line,) = [x for x in message.splitlines() if x.startswith(f"  - [{anomaly_lib.LABEL_ISSUES}]")]
    assert "look mislabelled to the served model" in line and "above the gate" in line
    assert "fix the labels of the images listed in report.html (Label audit)" in line
    assert "fail_on_anomalies: false" not in message  # never the advice for this gate
    rejected = str(world["root"] / "shuffled-statistics") + layout.REJECTED_SUFFIX
    audited = schema.read(rejected).label_audit
    assert audited.exceeded and audited.flagged_fraction > 0.25
    moved = bench.moved_copy(world["span"], str(world["root"] / "again"), 0.4, seed=3)
    flagged = {issue.path for issue in audited.issues}
    assert len(flagged & moved) >= 0.8 * len(flagged)  # precision
    assert len(flagged & moved) >= 0.6 * len(moved)  # recall
    issue = audited.issues[0]
    assert issue.given != issue.suggested and issue.confidence > issue.given_confidence
    report = open(os.path.join(rejected, layout.REPORT_FILE)).read()
    assert 'data-exceeded="true"' in report
    assert report.count('class="label-issue"') == len(audited.issues)
    assert report.count("data:image/jpeg;base64,") >= len(audited.issues)
    assert run_summary.label_audit_lines(rejected)[0].endswith(": stop")


def test_no_champion_or_a_champion_without_a_model_skips_the_audit_with_why(world, tmp_path):
    config = StatisticsConfig()
    empty = tmp_path / "empty-serving"
    empty.mkdir()
    audited = label_gate.before_training(
        champion.resolve(str(empty)), world["examples"], SPLITS, config
    )
    assert not audited.result.checked and "no model has been pushed" in audited.result.reason
    assert label_gate.before_training(
        champion.resolve(""), world["examples"], SPLITS, config
    ).result.reason == ("no serving_dir is set, so there is no served model to audit with")
    assert (
        label_gate.before_training(
            champion.resolve(""), "x", SPLITS, StatisticsConfig(label_audit=False)
        )
        is None
    )
    # A push with its assets but no SavedModel (as the drift tests make): skipped, named.
    broken = empty / "1700000001"
    shutil.copytree(
        os.path.join(world["push"], served_models.ASSETS_EXTRA_DIR),
        broken / served_models.ASSETS_EXTRA_DIR,
    )
    (broken / served_models.PUSH_COMPLETE_FILE).touch()
    audited = label_gate.before_training(
        champion.resolve(str(empty)), world["examples"], SPLITS, config
    )
    assert not audited.result.checked and "could not score the images" in audited.result.reason
    assert label_gate.anomalies(audited.result, "report.html", config) == []


def test_the_trainers_audit_of_its_eval_split_records_the_reference(world, tmp_path):
    examples = world["examples"]
    # The cap: the same sample whatever the call, in the shards' order.
    sample, total = scoring.read_records(examples, SPLITS, 10)
    again, _ = scoring.read_records(examples, SPLITS, 10)
    assert total == PER_CLASS * len(bench.CLASSES) and len(sample) == 10
    assert [r.path for r in sample] == [r.path for r in again]
    everything, _ = scoring.read_records(examples, SPLITS, total)
    assert {r.path for r in sample} < {r.path for r in everything}
    candidate = str(tmp_path / "candidate")
    shutil.copytree(world["push"], candidate)
    os.remove(os.path.join(candidate, served_models.ASSETS_EXTRA_DIR, scoring.REFERENCE_FILE))
    result = candidate_audit.audit_candidate(candidate, bench.CLASSES, examples, "eval")
    assert result.checked and result.model_version is None
    assert result.images == result.audited < PER_CLASS * len(bench.CLASSES)
    path = os.path.join(candidate, served_models.ASSETS_EXTRA_DIR, scoring.REFERENCE_FILE)
    recorded = json.load(open(path))
    assert recorded["flagged_fraction"] == result.flagged_fraction
    assert (recorded["audited"], recorded["split"]) == (result.audited, "eval")
    assert recorded["agreement"] == result.agreement and result.agreement > 0.8


def test_a_champion_too_weak_to_judge_labels_reports_and_does_not_gate(world, tmp_path):
    """A champion that agreed with few of its own held-out labels flags what it does not
    know: its audit is reported, not gated (statistics.label_audit_min_judge_accuracy)."""
    serving = tmp_path / "serving"
    weak = serving / os.path.basename(world["push"])
    shutil.copytree(world["push"], weak)
    path = weak / served_models.ASSETS_EXTRA_DIR / scoring.REFERENCE_FILE
    recorded = json.load(open(path))
    recorded["agreement"] = 0.16
    path.write_text(json.dumps(recorded))
    if (weak / served_models.MANIFEST_FILE).exists():  # hand-edited: now a legacy push
        os.remove(weak / served_models.MANIFEST_FILE)
    output, _, _ = run_statistics(world, "weak-judge", 0.4, serving=str(serving))
    audited = schema.read(output).label_audit
    assert audited.checked and not audited.exceeded
    assert "not gated: the champion agreed with 16.0% of its own held-out labels" in (
        audited.reason
    )


def test_too_few_images_to_audit_is_decided_before_any_model_loads(world, tmp_path):
    """The audit's minimum depends on the labels alone, so a split too small (a small
    span's eval split) is skipped without loading a SavedModel (5-7 s): here there is no
    model at all, and the reason is the minimum, not a model that could not score."""
    absent = str(tmp_path / "no-model")
    result = scoring.run(absent, bench.CLASSES, world["examples"], SPLITS, max_images=5).result
    assert not result.checked
    assert "the audit needs at least" in result.reason and "a sample of 5 of" in result.reason
    assert (result.audited, result.unknown_class, result.flagged) == (5, 0, 0)
    assert result.images == PER_CLASS * len(bench.CLASSES) and result.model == absent
    unknown = scoring.run(absent, ["x", "y"], world["examples"], SPLITS, max_images=50).result
    assert (unknown.checked, unknown.audited, unknown.unknown_class) == (False, 0, 50)
