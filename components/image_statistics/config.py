"""ImageStatistics' settings: what the report shows, and when the data gate stops a run."""

from __future__ import annotations

import dataclasses

from imgpipe.components.common.images.label_audit import DEFAULT_MAX_IMAGES


@dataclasses.dataclass(frozen=True)
class StatisticsConfig:
    """Everything ImageStatistics can be told, besides the model's input geometry.

    The image size and crop fraction the pixels are computed at are the Trainer's
    (TrainerConfig.image_size and crop_fraction), so they are not settings here.

    Attributes:
      sample_thumbnails: thumbnails per class in the report (0 for none).
      native_resolution: also compute pixel statistics at the stored size (a second
        decode of every image).
      leakage_threshold: the largest tolerated fraction of a non-train split's images
        that have an exact copy in another split.
      min_supported_fraction: the smallest tolerated fraction of usable images.
      fail_on_anomalies: stop the run (after writing the statistics and the report)
        when any anomaly is found; False only warns. Drift has its own switch.
      fail_on_drift: stop the run when the data drifted from the served model's
        training data beyond a threshold below, or gained or lost a class; False only
        warns. On by default: an unattended retrain would otherwise train and push on
        data that no longer looks like what the served model learned from (a camera
        gone grayscale, a broken resize), and every later run is compared with the same
        served model, so the stop holds until someone looks. To accept the drift of
        one span, set accept_drift_span; leave this on.
      drift_mean_shift: the largest tolerated move of a channel's mean over all images,
        in units of that channel's std in the baseline.
      drift_class_mean_shift: the same for each class's channel means (classes on both
        sides), still in units of the baseline's overall std of the channel. A colour
        change can leave the overall means in place while every class's moves.
      drift_false_alarm: the chance that sampling alone stops a clean span at the two
        mean checks (each, over all its channels and classes): a shift must also exceed
        what so few images reach by chance (drift.noise_limit), so a clean span of 15
        photos a class is not stopped, and a large span is held to the thresholds.
      drift_std_ratio: the largest tolerated ratio between a channel's std now and in
        the baseline, either way up (>= 1).
      drift_label_distance: the largest tolerated change of a class's share of the
        images (L-infinity distance of the label distributions, as TFDV's drift
        comparator measures categorical features).
      drift_size_distance: the largest tolerated change of the share of images in one
        bin of the width, height or aspect-ratio histogram (L-infinity distance).
      accept_label_issues_span: the one span whose label audit above the gate is
        accepted (`imgpipe run local --accept-label-issues SPAN`, or the
        accept_label_issues_span pipeline parameter on Kubeflow): accepted apart from
        drift, since accepting one gate never turns another off.
      accept_drift_span: the one span whose drift is accepted (`imgpipe run local
        --accept-drift SPAN`, or the accept_drift_span pipeline parameter on
        Kubeflow): its drift is recorded as accepted and does not stop the run; any
        other span is gated as usual. The Evaluator still compares the candidate with
        the champion on the champion's reference set, so an accepted span pushes only
        a model not worse on the data the champion was blessed on. None for none.
      verify_images: decode every JPEG strictly (libjpeg's warnings about corrupt
        data, which TensorFlow passes over, count; the same pixels, from the same one
        decode), and make any image that is corrupt or undecodable an anomaly that
        names it. False skips the check, and leaves undecodable images to
        min_supported_fraction.
      label_audit: before training, let the served model (the champion) score this
        span's images and flag likely label errors by confident learning
        (label_gate.py, docs/label-audit.md); skipped when nothing is served yet.
      label_audit_max_images: the most images the audit scores, a deterministic sample
        (by a hash of each file's name) when the span has more: the champion's
        inference is the audit's cost.
      max_label_issue_fraction: the gate's floor: the run stops (under
        fail_on_anomalies) when the fraction of audited images flagged is above
        max(this, label_issue_reference_factor x the champion's own rate). 0.1 from
        benchmarks/label_audit_bench.py: clean and 5%-noisy spans pass, 20% and 40%
        of labels moved stop.
      label_issue_reference_factor: how many times the champion's own flagged rate (the
        same audit on its held-out data, recorded in its push) a span may reach.
      label_audit_min_judge_accuracy: the audit gates a span only when the champion
        agreed with at least this share of its own held-out labels: a judge right on 16%
        of its eval images flags most of a clean span, since it cannot tell a mislabelled
        image from one it does not know (reported, not gated, below it).
    """

    sample_thumbnails: int = 8
    native_resolution: bool = False
    leakage_threshold: float = 0.0
    min_supported_fraction: float = 0.99
    fail_on_anomalies: bool = True
    fail_on_drift: bool = True
    drift_mean_shift: float = 0.5
    drift_class_mean_shift: float = 0.5
    drift_false_alarm: float = 0.05
    drift_std_ratio: float = 1.5
    drift_label_distance: float = 0.1
    drift_size_distance: float = 0.25
    verify_images: bool = True
    label_audit: bool = True
    label_audit_max_images: int = DEFAULT_MAX_IMAGES
    max_label_issue_fraction: float = 0.1
    label_issue_reference_factor: float = 1.5
    label_audit_min_judge_accuracy: float = 0.5
    accept_drift_span: int | None = None
    accept_label_issues_span: int | None = None

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        for name in ("accept_drift_span", "accept_label_issues_span"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be a span number (>= 0), got {value}")
        if self.sample_thumbnails < 0:
            raise ValueError(f"sample_thumbnails must be >= 0, got {self.sample_thumbnails}")
        if not 0.0 <= self.leakage_threshold < 1.0:
            raise ValueError(f"leakage_threshold must be in [0, 1), got {self.leakage_threshold}")
        if not 0.0 <= self.min_supported_fraction <= 1.0:
            raise ValueError(
                f"min_supported_fraction must be in [0, 1], got {self.min_supported_fraction}"
            )
        for name in ("drift_mean_shift", "drift_class_mean_shift"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"{name} must be > 0 (baseline std), got {getattr(self, name)}")
        if not 0.0 < self.drift_false_alarm < 1.0:
            raise ValueError(f"drift_false_alarm must be in (0, 1), got {self.drift_false_alarm}")
        if self.drift_std_ratio <= 1.0:
            raise ValueError(f"drift_std_ratio must be > 1, got {self.drift_std_ratio}")
        if self.label_audit_max_images < 1:
            raise ValueError(
                f"label_audit_max_images must be >= 1, got {self.label_audit_max_images}"
            )
        if not 0.0 < self.max_label_issue_fraction < 1.0:
            raise ValueError(
                f"max_label_issue_fraction must be in (0, 1), got {self.max_label_issue_fraction}"
            )
        if self.label_issue_reference_factor < 1.0:
            raise ValueError(
                "label_issue_reference_factor must be >= 1, got "
                f"{self.label_issue_reference_factor}"
            )
        if not 0.0 <= self.label_audit_min_judge_accuracy <= 1.0:
            raise ValueError(
                "label_audit_min_judge_accuracy must be in [0, 1], got "
                f"{self.label_audit_min_judge_accuracy}"
            )
        for name in ("drift_label_distance", "drift_size_distance"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
