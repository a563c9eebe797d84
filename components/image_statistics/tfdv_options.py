"""TFDV options for the StatisticsGen that runs beside ImageStatistics."""

from __future__ import annotations

import tensorflow_data_validation as tfdv


def image_stats_options() -> tfdv.StatsOptions:
    """StatsOptions with TFDV's semantic-domain statistics on.

    TFDV's ImageStatsGenerator then recognises the image bytes feature by its magic
    bytes, and SchemaGen types it with `image_domain {}` instead of treating it as an
    unbounded string. TFDV only does so from 100 values on, and when at least 80% of
    them are images.

    Example:
      StatisticsGen(examples=gen.outputs["examples"], stats_options=image_stats_options())
    """
    return tfdv.StatsOptions(enable_semantic_domain_stats=True)
