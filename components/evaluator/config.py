"""The Evaluator's settings: the rules that bless a model for the Pusher."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
    """Everything the Evaluator can be told.

    Attributes:
      accuracy_threshold: the lowest overall eval accuracy (0..1) that blesses a model.
    """

    accuracy_threshold: float = 0.0

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if not 0.0 <= self.accuracy_threshold <= 1.0:
            raise ValueError(f"accuracy_threshold must be in [0, 1], got {self.accuracy_threshold}")
