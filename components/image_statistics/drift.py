"""Drift: this run's data compared with the data the served model was trained on.

Pure functions over the typed statistics (components/common/formats/image_stats.py); finding
and reading the baseline is baseline.py's. Each side is summarized with every split
pooled, so the comparison does not depend on how either run divided its data. Each
metric is reported where it is largest, as a `DriftCheck` named after its threshold in
StatisticsConfig; one beyond its threshold, or a class gained or lost, is a drift
anomaly, and `StatisticsConfig.fail_on_drift` decides whether it stops the run.

Example:
  result = compare(baseline_stats, current_stats, config, baseline_uri)
  found = anomalies(result)  # one line each: the metric, both values, the threshold
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.image_statistics.accumulator import CHANNEL_NAMES, exact_moments
from imgpipe.components.image_statistics.anomalies import DRIFT
from imgpipe.components.image_statistics.config import StatisticsConfig

# The metrics, each spelled as its threshold's field in StatisticsConfig.
MEAN_SHIFT = "drift_mean_shift"
CLASS_MEAN_SHIFT = "drift_class_mean_shift"
STD_RATIO = "drift_std_ratio"
LABEL_DISTANCE = "drift_label_distance"
SIZE_DISTANCE = "drift_size_distance"
METRICS = (MEAN_SHIFT, CLASS_MEAN_SHIFT, STD_RATIO, LABEL_DISTANCE, SIZE_DISTANCE)

# Stds below one grey level count as one: a flat channel (a plain background) must not
# turn a tiny change into an infinite shift or ratio.
MIN_STD = 1.0
SIZE_HISTOGRAMS = ("width", "height", "aspect_ratio")  # the fields of image_stats.Sizes


def skipped(reason: str) -> schema.Drift:
    """No comparison, and why."""
    return schema.Drift(checked=False, reason=reason)


def summarize(stats: schema.ImageStats) -> schema.DataSummary | None:
    """Every split of `stats` pooled into one side of a comparison; None without pixels.

    The pixel mean and std are exact (from the summed histograms); class means are
    weighted by their pixels.
    """
    histograms = [s.pixels.histogram for s in stats.splits.values() if s.pixels is not None]
    if not histograms:
        return None
    histogram = np.sum([np.asarray(h, np.int64) for h in histograms], axis=0)
    moments = exact_moments(histogram)
    assert moments is not None  # every split here has pixels
    _, mean, std = moments
    labels: dict[str, int] = {}
    class_sums: dict[str, np.ndarray] = {}
    for s in stats.splits.values():
        for name, count in s.labels.counts.items():
            labels[name] = labels.get(name, 0) + count
        for name, class_mean in s.class_means.items():
            weighted = np.asarray(class_mean.mean) * class_mean.pixels_per_channel
            row = np.concatenate([[class_mean.pixels_per_channel], weighted])
            class_sums[name] = class_sums.get(name, 0) + row
    return schema.DataSummary(
        images=sum(s.images for s in stats.splits.values()),
        mean=tuple(mean),
        std=tuple(std),
        labels=dict(sorted(labels.items())),
        class_means={
            name: tuple(float(v) for v in row[1:] / row[0])
            for name, row in sorted(class_sums.items())
            if row[0]
        },
        sizes=schema.Sizes(
            **{
                name: _pooled_histogram([getattr(s.sizes, name) for s in stats.splits.values()])
                for name in SIZE_HISTOGRAMS
            }
        ),
    )


def _pooled_histogram(histograms: Sequence[schema.Histogram]) -> schema.Histogram:
    lows = [h.min for h in histograms if h.min is not None]
    highs = [h.max for h in histograms if h.max is not None]
    return schema.Histogram(
        edges=histograms[0].edges,
        counts=tuple(int(c) for c in np.sum([h.counts for h in histograms], axis=0)),
        min=min(lows) if lows else None,
        max=max(highs) if highs else None,
    )


def compare(
    baseline: schema.ImageStats,
    current: schema.ImageStats,
    config: StatisticsConfig,
    baseline_uri: str,
) -> schema.Drift:
    """`current` compared with `baseline` on every metric of METRICS.

    Args:
      baseline: the served model's training data's statistics (any readable version).
      current: this run's statistics.
      config: the thresholds.
      baseline_uri: where the baseline was read, for the record.
    """
    base, now = summarize(baseline), summarize(current)
    if base is None or now is None:
        side = "the baseline" if base is None else "this data"
        return schema.Drift(
            checked=False,
            reason=f"{side} has no decodable image, so nothing to compare",
            baseline_uri=baseline_uri,
            baseline=base,
            current=now,
        )
    notes = []
    checks = [_mean_shift(base, now, config), _std_ratio(base, now, config)]
    common = sorted(set(base.class_means) & set(now.class_means))
    if common:
        checks.insert(1, _class_mean_shift(base, now, common, config))
    else:
        notes.append(
            f"{CLASS_MEAN_SHIFT} not checked: "
            + (
                f"the baseline (version {baseline.version}) has no class means"
                if not base.class_means
                else "no class has images on both sides"
            )
        )
    checks += [_label_distance(base, now, config), _size_distance(base, now, config)]
    base_prep, now_prep = baseline.preprocessing, current.preprocessing
    if (base_prep.image_size, base_prep.crop_fraction) != (
        now_prep.image_size,
        now_prep.crop_fraction,
    ):
        notes.append(
            f"the baseline's pixels are at image_size {base_prep.image_size}, crop "
            f"{base_prep.crop_fraction}; these at {now_prep.image_size}, crop "
            f"{now_prep.crop_fraction}: the pixel metrics compare two resamplings"
        )
    before = {name for name, n in base.labels.items() if n}
    after = {name for name, n in now.labels.items() if n}
    return schema.Drift(
        checked=True,
        reason="; ".join(notes),
        baseline_uri=baseline_uri,
        baseline=base,
        current=now,
        checks=tuple(checks),
        classes_added=tuple(sorted(after - before)),
        classes_removed=tuple(sorted(before - after)),
    )


def _check(
    metric: str,
    config: StatisticsConfig,
    candidates: Sequence[tuple[str, float, float, float]],
    noise: Sequence[float] | None = None,
) -> schema.DriftCheck:
    """The candidate (subject, baseline, current, distance) furthest beyond its limit: the
    metric's threshold, or the candidate's `noise` bound (what sampling alone reaches on
    so few images) where that is higher; of equal ones the first, so ties resolve in
    the candidates' fixed order. The check records that limit as its threshold."""
    threshold = float(getattr(config, metric))
    limits = [max(threshold, n) for n in noise] if noise else [threshold] * len(candidates)
    index = max(range(len(candidates)), key=lambda i: candidates[i][3] / limits[i])
    subject, baseline, current, distance = candidates[index]
    return schema.DriftCheck(
        metric=metric,
        subject=subject,
        baseline=float(baseline),
        current=float(current),
        distance=float(distance),
        threshold=limits[index],
        drifted=bool(distance > limits[index]),
    )


def noise_limit(images_now: int, images_before: int, tests: int, false_alarm: float) -> float:
    """The mean shift, in baseline std, that sampling alone exceeds on a clean span with
    probability `false_alarm` over `tests` such shifts (Bonferroni, two-sided):
    z * sqrt(1/n_now + 1/n_before). The spread of an image's mean is taken as the
    pixels' std, which bounds it from above: on small spans the gate errs toward fewer
    false alarms (15 images a class on each side, 5 classes: 1.07 std), and on large
    ones the threshold governs."""
    if images_now <= 0 or images_before <= 0:
        return math.inf
    z = statistics.NormalDist().inv_cdf(1.0 - false_alarm / (2 * max(tests, 1)))
    return z * math.sqrt(1.0 / images_now + 1.0 / images_before)


def _shift(before: float, after: float, std: float) -> float:
    return abs(after - before) / max(std, MIN_STD)


def _mean_shift(
    base: schema.DataSummary, now: schema.DataSummary, config: StatisticsConfig
) -> schema.DriftCheck:
    return _check(
        MEAN_SHIFT,
        config,
        [
            (
                f"channel {name}",
                base.mean[c],
                now.mean[c],
                _shift(base.mean[c], now.mean[c], base.std[c]),
            )
            for c, name in enumerate(CHANNEL_NAMES)
        ],
        [
            noise_limit(now.images, base.images, len(CHANNEL_NAMES), config.drift_false_alarm)
            for _ in CHANNEL_NAMES
        ],
    )


def _class_mean_shift(
    base: schema.DataSummary,
    now: schema.DataSummary,
    classes: Sequence[str],
    config: StatisticsConfig,
) -> schema.DriftCheck:
    return _check(
        CLASS_MEAN_SHIFT,
        config,
        [
            (
                f"class {label!r}, channel {name}",
                base.class_means[label][c],
                now.class_means[label][c],
                _shift(base.class_means[label][c], now.class_means[label][c], base.std[c]),
            )
            for label in classes
            for c, name in enumerate(CHANNEL_NAMES)
        ],
        [
            noise_limit(
                now.labels.get(label, 0),
                base.labels.get(label, 0),
                len(classes) * len(CHANNEL_NAMES),
                config.drift_false_alarm,
            )
            for label in classes
            for _ in CHANNEL_NAMES
        ],
    )


def _std_ratio(
    base: schema.DataSummary, now: schema.DataSummary, config: StatisticsConfig
) -> schema.DriftCheck:
    def ratio(before: float, after: float) -> float:
        before, after = max(before, MIN_STD), max(after, MIN_STD)
        return max(before / after, after / before)

    return _check(
        STD_RATIO,
        config,
        [
            (f"channel {name}", base.std[c], now.std[c], ratio(base.std[c], now.std[c]))
            for c, name in enumerate(CHANNEL_NAMES)
        ],
    )


def _shares(counts: Sequence[int]) -> list[float]:
    total = sum(counts)
    return [n / total if total else 0.0 for n in counts]


def _linf(
    subjects: Sequence[str], before: Sequence[int], after: Sequence[int]
) -> list[tuple[str, float, float, float]]:
    """(subject, share before, share after, |difference|) for each subject."""
    return [
        (subject, b, a, abs(a - b))
        for subject, b, a in zip(subjects, _shares(before), _shares(after), strict=True)
    ]


def _label_distance(
    base: schema.DataSummary, now: schema.DataSummary, config: StatisticsConfig
) -> schema.DriftCheck:
    labels = sorted(set(base.labels) | set(now.labels))
    return _check(
        LABEL_DISTANCE,
        config,
        _linf(
            [f"label {label!r}" for label in labels],
            [base.labels.get(label, 0) for label in labels],
            [now.labels.get(label, 0) for label in labels],
        ),
    )


def _size_distance(
    base: schema.DataSummary, now: schema.DataSummary, config: StatisticsConfig
) -> schema.DriftCheck:
    candidates = []
    for name in SIZE_HISTOGRAMS:
        before, after = getattr(base.sizes, name), getattr(now.sizes, name)
        candidates += _linf(
            [f"{name} >={edge:g}" for edge in before.edges], before.counts, after.counts
        )
    return _check(SIZE_DISTANCE, config, candidates)


# How each metric's values read in a message: (what the values are, the distance).
_WORDING: dict[str, tuple[str, Callable[[float], str], Callable[[float], str]]] = {
    MEAN_SHIFT: ("mean of", "{:.4g}".format, "a shift of {:.3g} baseline std".format),
    CLASS_MEAN_SHIFT: ("mean of", "{:.4g}".format, "a shift of {:.3g} baseline std".format),
    STD_RATIO: ("std of", "{:.4g}".format, "a ratio of {:.3g}".format),
    LABEL_DISTANCE: ("share of", "{:.1%}".format, "an L-infinity distance of {:.3g}".format),
    SIZE_DISTANCE: (
        "share of images with",
        "{:.1%}".format,
        "an L-infinity distance of {:.3g}".format,
    ),
}


def value_text(check: schema.DriftCheck, value: float) -> str:
    """A baseline or current value of the check, as its metric reads (a share in %)."""
    return _WORDING[check.metric][1](value)


def describe(check: schema.DriftCheck) -> str:
    """One line: the metric, where, both values, the distance and the threshold."""
    what, value, distance = _WORDING[check.metric]
    relation = "above" if check.drifted else "within"
    return (
        f"{check.metric}: the {what} {check.subject} went from {value(check.baseline)} in "
        f"the served model's data to {value(check.current)}, {distance(check.distance)}, "
        f"{relation} the threshold {check.threshold:g}"
    )


def anomalies(drift: schema.Drift | None) -> list[schema.Anomaly]:
    """A drift anomaly for each check beyond its threshold and for classes gained or
    lost; none when nothing was compared."""
    if drift is None or not drift.checked:
        return []
    found = [schema.Anomaly(DRIFT, None, describe(c)) for c in drift.checks if c.drifted]
    if drift.classes_added or drift.classes_removed:
        found.append(
            schema.Anomaly(
                DRIFT,
                None,
                "classes changed since the served model's data: added "
                f"{list(drift.classes_added) or 'none'}, removed "
                f"{list(drift.classes_removed) or 'none'}",
            )
        )
    return found
