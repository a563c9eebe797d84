"""The `ImageStatistics` artifact type: image_stats.json and report.html in one folder."""

from __future__ import annotations

from tfx.types import artifact

TYPE_NAME = "ImageStatistics"


class ImageStatisticsArtifact(artifact.Artifact):
    """Output of the ImageStatistics component.

    Files: image_stats.json (schema in components/image_statistics/summary.py; the
    Trainer reads it with components.common.artifacts.load_normalization) and
    report.html.
    """

    TYPE_NAME = TYPE_NAME
