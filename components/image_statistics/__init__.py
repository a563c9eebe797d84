"""ImageStatistics: exact pixel statistics, distributions, duplicates and leakage of
an `Examples` artifact, a report with pictures, and a gate before training.

The public names, loaded on first use (the component class loads TFX):
  from imgpipe.components.image_statistics import ImageStatistics, StatisticsConfig
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.image_statistics.component import ImageStatistics
    from imgpipe.components.image_statistics.config import StatisticsConfig

__all__ = ["ImageStatistics", "StatisticsConfig"]
__getattr__ = front_door.lazy(
    __name__, {"ImageStatistics": "component", "StatisticsConfig": "config"}
)
