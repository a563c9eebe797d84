"""ImageStatistics' settings: what the report shows, and when the data gate stops a run."""

from __future__ import annotations

import dataclasses


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
        when any anomaly is found; False only warns.
      verify_images: check every JPEG strictly as well as decoding it (libjpeg's
        warnings about corrupt data, which TensorFlow passes over, count), and make
        any image that is corrupt or undecodable an anomaly that names it. False
        skips the check, and leaves undecodable images to min_supported_fraction.
    """

    sample_thumbnails: int = 8
    native_resolution: bool = False
    leakage_threshold: float = 0.0
    min_supported_fraction: float = 0.99
    fail_on_anomalies: bool = True
    verify_images: bool = True

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if self.sample_thumbnails < 0:
            raise ValueError(f"sample_thumbnails must be >= 0, got {self.sample_thumbnails}")
        if not 0.0 <= self.leakage_threshold < 1.0:
            raise ValueError(f"leakage_threshold must be in [0, 1), got {self.leakage_threshold}")
        if not 0.0 <= self.min_supported_fraction <= 1.0:
            raise ValueError(
                f"min_supported_fraction must be in [0, 1], got {self.min_supported_fraction}"
            )
