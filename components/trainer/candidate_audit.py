"""After training: the label audit of the eval split by the trained model, out of sample.

The same audit ImageStatistics runs with the champion before training
(components/common/images/label_audit.py). Its rate goes into training_summary.json, and into
the exported model's assets.extra/ (label_audit_scoring.REFERENCE_FILE): once the model
is pushed and becomes the champion, the next span's audit is gated relative to it.
"""

from __future__ import annotations

from collections.abc import Sequence

from absl import logging

from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.formats.features import DEFAULT_KEY_MAP, FeatureKeyMap
from imgpipe.components.common.formats.serving import ExamplesScorer
from imgpipe.components.common.images import label_audit
from imgpipe.components.common.images import label_audit_scoring as scoring


def audit_candidate(
    export_dir: str,
    labels: Sequence[str],
    examples_uri: str,
    eval_split: str,
    key_map: FeatureKeyMap = DEFAULT_KEY_MAP,
    max_images: int = label_audit.DEFAULT_MAX_IMAGES,
    score_examples: ExamplesScorer | None = None,
) -> schema.LabelAudit:
    """Audits `eval_split` with the model exported to `export_dir` and records its rate
    there; never raises for the data or the model (the result says why it did not run).
    `score_examples`: the export's serving_examples as the exporting process holds it
    (export.export_serving_model returns it); None loads it from `export_dir`."""
    if key_map != DEFAULT_KEY_MAP:
        return schema.LabelAudit(
            checked=False,
            reason="the audit reads Examples in ImageExampleGen's feature layout only",
        )
    result = scoring.run(
        export_dir, labels, examples_uri, [eval_split], max_images, score_examples=score_examples
    ).result
    if result.checked:
        scoring.write_reference(export_dir, result, eval_split)
    logging.info("Label audit of split %r: %s", eval_split, label_audit.describe(result))
    return result
