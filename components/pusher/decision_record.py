"""The Pusher's entry in the serving folder's history (serving_history.py): what this run
decided, after the push or the refusal.

The Pusher runs after every Evaluator, blessed or not, locally and on Kubeflow, so it
records both outcomes: PUSHED, or REFUSED when the Evaluator did not bless the model or
the compare-and-swap found a newer push or a rollback. The figures come from the Evaluator's
evaluation.json beside the blessing (read as plain JSON: the Evaluator's own reader is
its room's), the span from the blessing (artifact_types.SPAN_PROPERTY).
"""

from __future__ import annotations

import json
import posixpath
import time
from typing import Any

from absl import logging
from tfx import types

from imgpipe.components.common.formats import (
    layout,
    model_config,
    reference_sets,
    served_models,
)
from imgpipe.components.common.formats import serving_history as history
from imgpipe.components.common.formats.artifact_types import span_of
from imgpipe.components.common.storage import fileio, serving_lock

# The sets whose accuracy the history shows, in order of preference: the set every
# model is judged on again, else the run's own eval split.
_REFERENCE_ORDER = (reference_sets.CHAMPION_REFERENCE, reference_sets.NEW_SPLIT)
CANDIDATE = "candidate"
CHAMPION = "champion"


def decision(
    serving_dir: str,
    blessing: types.Artifact,
    pushed_version: int | None,
    refused: str,
    run_id: str,
    now: float | None = None,
) -> history.Decision:
    """The run's decision.

    Args:
      serving_dir: the serving folder.
      blessing: the Evaluator's blessing (its evaluation.json beside it, if any).
      pushed_version: the version pushed; None when nothing was.
      refused: the compare-and-swap's one line when it refused ("" otherwise).
      run_id: the pipeline run ("" when unknown).
      now: the decision's time (tests); default the time.
    """
    evaluation = _evaluation(blessing.uri)
    reason = str(evaluation.get("decision", {}).get("reason", ""))
    when, span = time.time() if now is None else now, span_of(blessing)
    if pushed_version is not None:
        return history.Decision(
            kind=history.PUSHED,
            model_version=pushed_version,
            served_version=pushed_version,
            reference_accuracy=reference_accuracy(evaluation, CANDIDATE),
            reason=history.brief(reason or "blessed"),
            run_id=run_id,
            time=when,
            span=span,
        )
    if refused:
        # What came first serves (a push, a rollback); this run did not measure it.
        return history.Decision(
            kind=history.REFUSED,
            served_version=_served(serving_dir),
            reason=history.brief(refused),
            run_id=run_id,
            time=when,
            span=span,
        )
    champion = evaluation.get(CHAMPION) or {}
    return history.Decision(
        kind=history.REFUSED,
        served_version=champion.get("version"),
        reference_accuracy=reference_accuracy(evaluation, CHAMPION),
        reason=history.brief(reason or "not blessed"),
        run_id=run_id,
        time=when,
        span=span,
    )


def write(
    serving_dir: str,
    blessing: types.Artifact,
    model_push: types.Artifact,
    run_id: str,
) -> None:
    """Records the run's decision, read from the PushedModel the Pusher marked; a
    failed write is one logged line, never a failed push."""
    pushed_version = None
    if model_push.has_custom_property("pushed_version"):  # TFX's _MarkPushed sets it
        pushed_version = int(model_push.get_string_custom_property("pushed_version"))
    refused = ""
    if model_push.has_custom_property(serving_lock.REFUSED_PROPERTY):
        refused = model_push.get_string_custom_property(serving_lock.REFUSED_PROPERTY)
    try:
        made = decision(serving_dir, blessing, pushed_version, refused, run_id)
        history.record(serving_dir, made)
    except (OSError, ValueError, KeyError, TypeError) as e:  # a damaged evaluation.json too
        logging.warning("ImagePusher: the history record was not written: %s", e)


def reference_accuracy(evaluation: dict[str, Any], side: str) -> float | None:
    """`side`'s (CANDIDATE or CHAMPION) accuracy on the champion's reference set, else on
    the new eval split; None when the evaluation has neither."""
    comparisons = {c.get("name"): c for c in evaluation.get("comparisons", [])}
    for name in _REFERENCE_ORDER:
        metrics = (comparisons.get(name) or {}).get(side)
        if metrics:
            return float(metrics["accuracy"])
    on_split = (
        evaluation.get(CANDIDATE)
        if side == CANDIDATE
        else (evaluation.get(CHAMPION) or {}).get("metrics")
    )
    return float(on_split["accuracy"]) if on_split else None


def _evaluation(blessing_uri: str) -> dict[str, Any]:
    """The evaluation.json the Evaluator wrote beside its blessing; {} when there is none
    or it cannot be read (the record then lacks its figures, and says what it knows)."""
    path = posixpath.join(blessing_uri, layout.EVALUATION_FILE)
    try:
        found = json.loads(fileio.read_bytes(path)) if fileio.exists(path) else {}
    except (OSError, ValueError) as e:
        logging.warning("ImagePusher: %s unreadable for the history record: %s", path, e)
        return {}
    return found if isinstance(found, dict) else {}


def _served(serving_dir: str) -> int | None:
    """The version that serves after a refused compare-and-swap: the one models.config
    names (a newer push, or a rollback's), else the newest complete push."""
    try:
        served = model_config.served_version(serving_dir)
    except (OSError, ValueError):
        served = None
    if served is not None:
        return served
    versions = served_models.complete_versions(serving_dir)
    return versions[0] if versions else None
