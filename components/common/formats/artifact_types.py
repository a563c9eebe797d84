"""The project's own TFX artifact types, each declared once.

Component specs type-check channels against these classes, so wiring another
artifact (for example StatisticsGen's `ExampleStatistics`) where an
`ImageStatistics` is expected fails when the pipeline is built.
"""

from __future__ import annotations

from tfx.types import artifact


class ImageStatisticsArtifact(artifact.Artifact):
    """Output of the ImageStatistics component: image_stats.json (schema in
    components/common/formats/image_stats.py) and report.html."""

    TYPE_NAME = "ImageStatistics"


class ChampionArtifact(artifact.Artifact):
    """Output of the ChampionResolver: champion.json, the served model a run is judged
    against, resolved once (components/common/formats/champion.py)."""

    TYPE_NAME = "ServedChampion"
