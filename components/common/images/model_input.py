"""The model's input geometry, shared by ImageStatistics, the Trainer and serving.

Kept apart from preprocessing.py (which imports TensorFlow) so that configuration types
and the CLI can name these defaults without loading TensorFlow.
"""

from __future__ import annotations

import dataclasses

from absl import logging

# The square side, in pixels, the model takes.
DEFAULT_IMAGE_SIZE = 224
# Center crop keeps this fraction of the shorter side (the ImageNet convention 224/256).
DEFAULT_CROP_FRACTION = 0.875
# A channel whose pixels barely vary (a constant one has std 0) is divided by this
# instead, in 0..255 units: one grey level, so no pixel is scaled up more than 255 times.
MIN_STD = 1.0


@dataclasses.dataclass(frozen=True)
class ModelInput:
    """The model's input, as one value from the statistics to serving: the square side it
    takes, the center crop that eval and serving cut, and the per-channel normalization,
    done by the model's first layer on uint8 pixels, or on the host (float32 input).

    The Trainer resolves it once (trainer/task.py: the statistics' values unless the
    config overrides them); the model, the input pipelines, the export and the warm start
    all take it.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]
    image_size: int = DEFAULT_IMAGE_SIZE
    crop_fraction: float = DEFAULT_CROP_FRACTION
    normalize_on_host: bool = False

    def __post_init__(self) -> None:
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError(f"mean and std need 3 channels, got {self.mean} and {self.std}")
        if min(self.std) <= 0:
            raise ValueError(f"std must be positive, got {self.std}")
        if self.image_size < 1 or not 0.0 < self.crop_fraction <= 1.0:
            raise ValueError(
                f"image_size {self.image_size} and crop_fraction {self.crop_fraction}: "
                "need a side of at least 1 and a fraction in (0, 1]"
            )

    @classmethod
    def from_statistics(
        cls, mean: tuple[float, ...], std: tuple[float, ...], image_size: int, crop_fraction: float
    ) -> ModelInput:
        """Measured moments as a model input, each std floored at MIN_STD (logged)."""
        floored = tuple(max(float(s), MIN_STD) for s in std)
        if min(std) < MIN_STD:
            logging.warning(
                "a channel's pixels barely vary (std %s): normalizing with std %s instead "
                "(at least %.1f); set trainer std to choose",
                [round(float(s), 4) for s in std],
                list(floored),
                MIN_STD,
            )
        return cls(tuple(float(v) for v in mean), floored, image_size, crop_fraction)

    @property
    def host_normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """(mean, std) for the input pipeline and the serving signature to apply; None
        when the model's first layer does."""
        return (self.mean, self.std) if self.normalize_on_host else None

    @property
    def model_normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """(mean, std) for the model's first layer (it then takes uint8); None when the
        input pipeline normalizes (it then takes float32)."""
        return None if self.normalize_on_host else (self.mean, self.std)

    @property
    def decoded_image_bytes(self) -> int:
        """One image as the model takes it: uint8, or float32 when normalized on the host."""
        return self.image_size * self.image_size * 3 * (4 if self.normalize_on_host else 1)
