"""The project's own TFX artifact types, each declared once.

Component specs type-check channels against these classes, so wiring another
artifact (for example StatisticsGen's `ExampleStatistics`) where an
`ImageStatistics` is expected fails when the pipeline is built.
"""

from __future__ import annotations

from tfx.types import artifact

# The span of an Examples artifact, as TFX's ExampleGen driver records it; the Evaluator
# carries it on the blessing, for the Pusher's history record.
SPAN_PROPERTY = "span"
# Set on an ImageStatistics artifact (1) whose span passed the gates only by an
# acceptance; the Trainer records such spans with the model (components/trainer/window.py).
ADMITTED_BY_ACCEPTANCE_PROPERTY = "admitted_by_acceptance"


class ImageStatisticsArtifact(artifact.Artifact):
    """Output of the ImageStatistics component: image_stats.json (schema in
    components/common/formats/image_stats.py) and report.html."""

    TYPE_NAME = "ImageStatistics"


class ChampionArtifact(artifact.Artifact):
    """Output of the ChampionResolver: champion.json, the served model a run is judged
    against, resolved once (components/common/formats/champion.py)."""

    TYPE_NAME = "ServedChampion"


def span_of(examples: artifact.Artifact) -> int | None:
    """The span of an artifact: TFX's ExampleGen driver records it as a custom property
    (and the Evaluator on its blessing); an executor may set the type's own property.
    None when neither is set."""
    if examples.has_custom_property(SPAN_PROPERTY):
        return int(examples.get_int_custom_property(SPAN_PROPERTY))
    if examples.has_property(SPAN_PROPERTY):
        return int(getattr(examples, SPAN_PROPERTY))
    return None
