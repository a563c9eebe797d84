"""ImageStatistics: exact pixel statistics, distributions, duplicates and leakage of
an `Examples` artifact, a report with pictures, and a gate before training.

The public names, loaded on first use (the component class loads TFX); the rest of the
package is private to it:
  from imgpipe.components.image_statistics import ImageStatistics, StatisticsConfig
  from imgpipe.components.image_statistics import produce_statistics  # `imgpipe stats`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.image_statistics.anomalies import (
        DRIFT,
        LABEL_ISSUES,
        LEAKAGE,
        AnomaliesFoundError,
        drift_fix,
        label_issues_fix,
    )
    from imgpipe.components.image_statistics.anomalies import blocking as blocking_anomalies
    from imgpipe.components.image_statistics.baseline import from_path as read_baseline
    from imgpipe.components.image_statistics.component import ImageStatistics
    from imgpipe.components.image_statistics.config import StatisticsConfig
    from imgpipe.components.image_statistics.executor import analysis_options
    from imgpipe.components.image_statistics.produce import Produced as ProducedStatistics
    from imgpipe.components.image_statistics.produce import produce as produce_statistics
    from imgpipe.components.image_statistics.spec import validate_geometry
    from imgpipe.components.image_statistics.tfdv_options import image_stats_options

__all__ = [
    "DRIFT",
    "LABEL_ISSUES",
    "LEAKAGE",
    "AnomaliesFoundError",
    "ImageStatistics",
    "ProducedStatistics",
    "StatisticsConfig",
    "analysis_options",
    "blocking_anomalies",
    "drift_fix",
    "image_stats_options",
    "label_issues_fix",
    "produce_statistics",
    "read_baseline",
    "validate_geometry",
]
# mypy reads the names above; a misspelt one fails the type check.
if not TYPE_CHECKING:
    __getattr__ = front_door.lazy(__name__)
