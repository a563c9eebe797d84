"""Drift between retrains, on typed statistics built from real pixels without a Beam run:
the comparison, its anomalies and gate, the baseline's sources, the report section and
the settings. The executor run on a fabricated served model is in
test_image_statistics.py."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import cv2
import numpy as np
import pytest

from imgpipe.components.common.formats import image_stats, layout, served_models
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.image_statistics import anomalies as anomaly_lib
from imgpipe.components.image_statistics import baseline, drift, report, summary
from imgpipe.components.image_statistics.accumulator import SplitAccumulator
from imgpipe.components.image_statistics.analyze import AnalysisOptions
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.pixel_summaries import channel_histograms
from tests import imagegen

pytestmark = pytest.mark.unit

RGB = sorted(imagegen.COLOUR_CLASSES)
CONFIG = StatisticsConfig()
# A class the generator has no colour for takes another's pictures.
PAINTED_AS = {"violet": "blue"}


def grey(rgb: np.ndarray) -> np.ndarray:
    """What the model sees of a grey JPEG: one channel, repeated."""
    return cv2.cvtColor(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)


def accumulate(images_by_label: dict[str, list[np.ndarray]], names, side: int) -> SplitAccumulator:
    accumulator = SplitAccumulator()
    for label, images in images_by_label.items():
        n = len(images)
        accumulator.add_images(
            labels=[names.index(label)] * n,
            formats=["jpeg"] * n,
            widths=[side] * n,
            heights=[side] * n,
            channels=[3] * n,
            modes=["RGB"] * n,
            num_bytes=[2000] * n,
            hists=np.stack([channel_histograms(image) for image in images]),
        )
    return accumulator


def typed_stats(
    per_class: dict[str, int] | int,
    colour=lambda rgb: rgb,
    side: int = 64,
    splits: tuple[str, ...] = ("train",),
) -> image_stats.ImageStats:
    """ImageStats of colour-class images (image i of each class in split i % len(splits)),
    built by the same accumulator and summary as the component's."""
    counts = per_class if isinstance(per_class, dict) else dict.fromkeys(RGB, per_class)
    names = sorted(counts)
    accumulators = {}
    for s, split in enumerate(splits):
        accumulators[split] = accumulate(
            {
                label: [
                    colour(imagegen.colour_class_image(PAINTED_AS.get(label, label), i))
                    for i in range(n)
                    if i % len(splits) == s
                ]
                for label, n in counts.items()
            },
            names,
            side,
        )
    return build(accumulators, names)


def build(accumulators: dict[str, SplitAccumulator], names: list[str]) -> image_stats.ImageStats:
    return summary.build_stats(
        splits=list(accumulators),
        accumulators=accumulators,
        groups=[],
        labels=names,
        options=AnalysisOptions(32, 1.0),
        examples_uri="test",
        skipped=0,
        leakage_threshold=0.0,
    )


def checks(result: image_stats.Drift) -> dict[str, image_stats.DriftCheck]:
    return {c.metric: c for c in result.checks}


def test_more_images_of_the_same_classes_do_not_drift():
    result = drift.compare(typed_stats(20), typed_stats(60), CONFIG, "champion.json")
    assert result.checked and not result.reason
    assert [c.metric for c in result.checks] == list(drift.METRICS)
    assert not [c for c in result.checks if c.drifted]
    assert (result.classes_added, result.classes_removed) == ((), ())
    assert drift.anomalies(result) == []
    # The images did change: the metrics measured something, well inside the thresholds.
    assert 0 < checks(result)[drift.CLASS_MEAN_SHIFT].distance < CONFIG.drift_class_mean_shift / 4


def test_grayscale_drifts_on_std_and_class_means_while_the_overall_mean_stays():
    before = typed_stats(30)
    result = drift.compare(before, typed_stats(30, colour=grey), CONFIG, "champion.json")
    by_metric = checks(result)
    # Three saturated classes average to about the same grey: the overall means barely
    # move, which is why the spread and the per-class means are compared too.
    assert by_metric[drift.MEAN_SHIFT].distance < 0.1
    assert by_metric[drift.STD_RATIO].drifted and by_metric[drift.STD_RATIO].distance > 2
    class_shift = by_metric[drift.CLASS_MEAN_SHIFT]
    assert class_shift.drifted and class_shift.distance > 1
    # Largest in a class's own colour channel, which went from ~210 to a grey.
    assert re.fullmatch(r"class '(\w+)', channel \1", class_shift.subject)
    assert class_shift.baseline > 200 and class_shift.current < 150
    found = drift.anomalies(result)
    assert {a.code for a in found} == {anomaly_lib.DRIFT}
    assert len(found) == 2
    for anomaly, check in zip(
        found, [by_metric[drift.CLASS_MEAN_SHIFT], by_metric[drift.STD_RATIO]], strict=True
    ):
        assert "\n" not in anomaly.message
        assert anomaly.message.startswith(f"{check.metric}: ")
        assert f"{check.baseline:.4g}" in anomaly.message
        assert f"{check.current:.4g}" in anomaly.message
        assert f"threshold {check.threshold:g}" in anomaly.message


def test_shuffled_labels_drift_on_the_class_means_alone():
    """The same images under shuffled labels: every pooled figure stays, and each
    class's mean moves toward the grey average."""
    pictures = [imagegen.colour_class_image(label, i) for label in RGB for i in range(30)]
    order = np.random.default_rng(0).permutation(len(pictures))
    names = [RGB[i // 30] for i in range(len(pictures))]
    shuffled: dict[str, list[np.ndarray]] = {label: [] for label in RGB}
    for name, j in zip(names, order, strict=True):
        shuffled[name].append(pictures[j])
    after = build({"train": accumulate(shuffled, RGB, 64)}, RGB)
    result = drift.compare(typed_stats(30), after, CONFIG, "champion.json")
    assert [c.metric for c in result.checks if c.drifted] == [drift.CLASS_MEAN_SHIFT]
    assert checks(result)[drift.MEAN_SHIFT].distance == pytest.approx(0, abs=1e-9)
    assert checks(result)[drift.STD_RATIO].distance == pytest.approx(1)


def test_classes_added_and_removed_and_the_label_shares():
    before = typed_stats({"blue": 10, "green": 10, "red": 10})
    after = typed_stats({"green": 10, "red": 20, "violet": 10}, side=64)
    result = drift.compare(before, after, CONFIG, "champion.json")
    assert (result.classes_added, result.classes_removed) == (("violet",), ("blue",))
    labels = checks(result)[drift.LABEL_DISTANCE]
    # Shares over the union: blue 1/3 -> 0 and red 1/3 -> 1/2; the largest is blue's.
    assert labels.subject == "label 'blue'"
    assert (labels.baseline, labels.current) == (pytest.approx(1 / 3), 0.0)
    assert labels.distance == pytest.approx(1 / 3) and labels.drifted
    messages = [a.message for a in drift.anomalies(result)]
    assert "classes changed since the served model's data: added ['violet'], removed ['blue']" in (
        messages
    )
    # Class means are compared on the classes both sides have.
    assert "blue" not in checks(result)[drift.CLASS_MEAN_SHIFT].subject


def test_a_size_change_drifts_and_the_label_distance_is_exact():
    before = typed_stats({"blue": 10, "green": 10, "red": 10}, side=64)
    after = typed_stats({"blue": 5, "green": 5, "red": 20}, side=512)
    by_metric = checks(drift.compare(before, after, CONFIG, "champion.json"))
    sizes = by_metric[drift.SIZE_DISTANCE]
    assert sizes.subject == "width >=64" and (sizes.baseline, sizes.current) == (1.0, 0.0)
    assert sizes.distance == 1.0 and sizes.drifted
    labels = by_metric[drift.LABEL_DISTANCE]
    assert labels.subject == "label 'red'" and labels.distance == pytest.approx(2 / 3 - 1 / 3)
    # A looser threshold lets the same comparison pass.
    loose = dataclasses.replace(CONFIG, drift_size_distance=1.0, drift_label_distance=0.5)
    by_metric = checks(drift.compare(before, after, loose, "champion.json"))
    assert not by_metric[drift.SIZE_DISTANCE].drifted
    assert not by_metric[drift.LABEL_DISTANCE].drifted


def test_each_side_pools_its_splits_exactly():
    one = drift.summarize(typed_stats(12))
    two = drift.summarize(typed_stats(12, splits=("train", "eval")))
    assert one is not None and two is not None
    assert (one.images, one.mean, one.std, one.labels, one.sizes) == (
        two.images,
        two.mean,
        two.std,
        two.labels,
        two.sizes,
    )
    for label in RGB:
        np.testing.assert_allclose(one.class_means[label], two.class_means[label], rtol=1e-12)


def _as_version_1(stats: image_stats.ImageStats) -> str:
    """The file an older release wrote: version 1, without class means or drift."""
    document = json.loads(image_stats.to_json_text(stats))
    document["version"] = 1
    del document["drift"]
    for split in document["splits"].values():
        del split["class_means"]
    return json.dumps(document)


def test_a_version_1_baseline_is_compared_without_class_means(tmp_path):
    path = tmp_path / layout.IMAGE_STATS_FILE
    path.write_text(_as_version_1(typed_stats(20)))
    old = baseline.read_file(str(path))
    assert old.stats is not None and old.stats.version == 1 and old.uri == str(path)
    result = drift.compare(old.stats, typed_stats(20, colour=grey), CONFIG, old.uri)
    assert result.checked
    assert drift.CLASS_MEAN_SHIFT not in checks(result)
    assert "drift_class_mean_shift not checked: the baseline (version 1) has no class means" in (
        result.reason
    )
    assert checks(result)[drift.STD_RATIO].drifted  # the rest still compares

    path.write_text(json.dumps({**json.loads(_as_version_1(typed_stats(3))), "version": 9}))
    unknown = baseline.read_file(str(path))
    assert unknown.stats is None
    assert "schema version 9; this release reads version 1 or 2 or 3" in unknown.reason


def push(serving: str, version: int, stats: image_stats.ImageStats | None, complete=True) -> str:
    """A fabricated push: <serving>/<version>/assets.extra/{labels.txt, image_stats.json}."""
    extra = os.path.join(serving, str(version), served_models.ASSETS_EXTRA_DIR)
    os.makedirs(extra)
    with open(os.path.join(extra, layout.LABELS_TXT_FILE), "w") as f:
        f.write("\n".join(RGB) + "\n")
    if stats is not None:
        image_stats.write(extra, stats)
    if complete:
        open(os.path.join(serving, str(version), served_models.PUSH_COMPLETE_FILE), "w").close()
    return os.path.join(extra, layout.IMAGE_STATS_FILE)


def test_the_baseline_is_the_newest_complete_push_or_a_stated_reason(tmp_path):
    serving = str(tmp_path / "serving")
    assert "no serving_dir is set" in baseline.from_serving_dir("").reason
    assert "no model has been pushed to" in baseline.from_serving_dir(serving).reason
    push(serving, 100, None)
    reason = baseline.from_serving_dir(serving).reason
    assert f"the served model {serving}/100 (version 100) carries no " in reason
    assert "assets.extra/image_stats.json" in reason
    stats = typed_stats(4)
    champion = push(serving, 200, stats)
    push(serving, 300, typed_stats(5), complete=False)  # interrupted: never read
    found = baseline.from_serving_dir(serving)
    assert (found.stats, found.uri, found.reason) == (stats, champion, "")
    # imgpipe stats --baseline takes the file, its folder or the serving directory.
    for path in (champion, os.path.dirname(champion), serving):
        assert baseline.from_path(path).stats == stats


def test_the_gate_stops_on_drift_only_with_fail_on_drift():
    data = image_stats.Anomaly(anomaly_lib.LEAKAGE, "eval", "leak")
    moved = image_stats.Anomaly(anomaly_lib.DRIFT, None, "drift_std_ratio: the std of ...")
    for fail_on_anomalies, fail_on_drift, expected in (
        (True, True, [data, moved]),
        (True, False, [data]),
        (False, True, [moved]),
        (False, False, []),
    ):
        config = StatisticsConfig(fail_on_anomalies=fail_on_anomalies, fail_on_drift=fail_on_drift)
        assert anomaly_lib.blocking([data, moved], config) == expected
    stopping = anomaly_lib.gate_message([moved], "/out", StatisticsConfig(), span=6)
    assert "the run stops before training (statistics.fail_on_drift: true)" in stopping
    # The advice accepts this one span; it never turns a gate off.
    assert "imgpipe run local --accept-drift 6" in stopping.splitlines()[-1]
    assert "statistics.accept_drift_span: 6" in stopping.splitlines()[-1]
    assert ": false" not in stopping
    # Accepted for this span: drift does not stop the run, and the message says so.
    accepted = StatisticsConfig(accept_drift_span=6)
    assert anomaly_lib.blocking([data, moved], accepted, drift_accepted=True) == [data]
    warning = anomaly_lib.gate_message([moved], "/out", accepted, span=6, drift_accepted=True)
    assert "The drift of span 6 is accepted" in warning
    assert "--accept-drift" not in warning
    # Accepting another span than this one: still stopped, and told which span this is.
    elsewhere = anomaly_lib.gate_message([moved], "/out", StatisticsConfig(accept_drift_span=5), 6)
    assert "accept_drift_span is 5, this is span 6" in elsewhere
    # Other anomalies: fix the data; no gate is switched off.
    leak = anomaly_lib.gate_message([data], "/out", StatisticsConfig())
    assert "fix the data" in leak and ": false" not in leak.splitlines()[-1]
    warning = anomaly_lib.gate_message(
        [data, moved], "/out", StatisticsConfig(fail_on_anomalies=False, fail_on_drift=False)
    )
    assert (
        "training goes on (statistics.fail_on_anomalies and statistics.fail_on_drift: false)"
        in warning
    )


def test_the_report_shows_both_sides_or_why_not():
    before, after = typed_stats(10), typed_stats(10, colour=grey)
    result = drift.compare(before, after, CONFIG, "/serving/7/assets.extra/image_stats.json")
    page = report.render(dataclasses.replace(after, drift=result), {}, [])
    section = page[page.index('<section class="drift"') :]
    section = section[: section.index("</section>")]
    assert 'data-checked="true"' in section
    assert "/serving/7/assets.extra/image_stats.json" in section
    for check in result.checks:
        row = f'<tr data-metric="{check.metric}" data-drifted="{str(check.drifted).lower()}"'
        assert row in section
        assert f'data-threshold="{check.threshold!r}"' in section
    assert 'data-metric="drift_std_ratio" data-drifted="true"' in section
    assert "served model&#x27;s data (baseline)" in section and "this data" in section
    assert f"<td>{result.baseline.std[0]:.4g}</td><td>{result.current.std[0]:.4g}</td>" in section

    skipped = drift.skipped("no model has been pushed to /serving yet: nothing to compare with")
    page = report.render(dataclasses.replace(after, drift=skipped), {}, [])
    assert (
        '<p class="drift-reason">Not checked: no model has been pushed to /serving yet: '
        "nothing to compare with</p>" in page
    )


def test_drift_results_round_trip_through_image_stats_json():
    before, after = typed_stats(6), typed_stats(6, colour=grey)
    stats = dataclasses.replace(after, drift=drift.compare(before, after, CONFIG, "b.json"))
    assert image_stats.from_json_text(image_stats.to_json_text(stats)) == stats
    assert json.loads(image_stats.to_json_text(stats))["version"] == image_stats.SCHEMA_VERSION


def test_drift_settings_come_from_the_pipeline_config_and_the_cli(capsys, tmp_path):
    from imgpipe.pipelines import cli
    from imgpipe.pipelines import config as cfg

    loaded = cfg.from_dict(
        {"data_root": "/d", "statistics": {"fail_on_drift": False, "drift_std_ratio": 2}}
    )
    assert loaded.statistics.fail_on_drift is False
    assert loaded.statistics.drift_std_ratio == 2.0
    for bad, field in (
        ({"drift_std_ratio": 1.0}, "drift_std_ratio must be > 1"),
        ({"drift_label_distance": 0}, "drift_label_distance must be in (0, 1]"),
        ({"drift_mean_shift": -1}, "drift_mean_shift must be > 0"),
    ):
        with pytest.raises(ValueError, match=rf"statistics\.{field.replace('(', '[(]')}"):
            cfg.from_dict({"data_root": "/d", "statistics": bad})

    args = cli.build_parser().parse_args(
        ["stats", "ex", "--baseline", "/serving", "--no-fail-on-drift", "--drift-std-ratio", "3"]
    )
    assert (args.baseline, args.fail_on_drift, args.drift_std_ratio) == ("/serving", False, 3.0)
    defaults = cli.build_parser().parse_args(["stats", "ex"])
    for metric in drift.METRICS:
        assert getattr(defaults, metric) == config_loader.field_default(StatisticsConfig, metric)
    assert defaults.fail_on_drift is True and defaults.baseline is None
    missing = "/nonexistent/serving"
    # An existing examples folder, so that the baseline is what the error is about.
    assert cli.main(["stats", str(tmp_path), "--baseline", missing]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"imgpipe: error: --baseline {missing} does not exist") and (
        "\n" not in error
    )


def test_the_span_is_read_where_tfxs_driver_records_it():
    from tfx.types import standard_artifacts

    from imgpipe.components.image_statistics.executor import span_of

    examples = standard_artifacts.Examples()
    assert span_of(examples) is None
    examples.span = 3  # an executor's own
    assert span_of(examples) == 3
    examples.set_int_custom_property("span", 6)  # TFX's ExampleGen driver's
    assert span_of(examples) == 6


def exposures(seed: int):
    """Each image at its own exposure (x0.3 to x1.7), as a real camera's photos vary."""
    rng = np.random.default_rng(seed)

    def colour(rgb: np.ndarray) -> np.ndarray:
        return np.clip(rgb.astype(np.float32) * rng.uniform(0.3, 1.7), 0, 255).astype(np.uint8)

    return colour


def test_a_clean_span_of_15_photos_a_class_is_not_stopped_by_chance_and_a_grey_one_is():
    """The mean checks know how many images they saw (drift.noise_limit): over 30 pairs
    of clean spans of 15 photos a class, the fixed 0.5-std limit alone stopped 3 (10%),
    the gate none (its false alarms are held at drift_false_alarm, 5%); a grey span of
    the same size still stops."""
    by_fixed_limit = stopped = 0
    for pair in range(30):
        before = typed_stats(15, colour=exposures(2 * pair))
        now = typed_stats(15, colour=exposures(2 * pair + 1))
        check = checks(drift.compare(before, now, CONFIG, "champion.json"))[drift.CLASS_MEAN_SHIFT]
        stopped += check.drifted
        by_fixed_limit += check.distance > CONFIG.drift_class_mean_shift
        assert check.threshold == pytest.approx(drift.noise_limit(15, 15, 9, 0.05))
    assert by_fixed_limit >= 2 and stopped <= 1
    grey_span = typed_stats(15, colour=lambda rgb: grey(exposures(101)(rgb)))
    result = drift.compare(typed_stats(15, colour=exposures(100)), grey_span, CONFIG, "c")
    assert checks(result)[drift.CLASS_MEAN_SHIFT].drifted
    # On large spans the threshold governs: sampling noise is far below it.
    assert drift.noise_limit(2000, 2000, 9, 0.05) < CONFIG.drift_class_mean_shift / 4
