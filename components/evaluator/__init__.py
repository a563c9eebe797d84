"""ImageEvaluator: blesses a candidate model against the served champion.

The public names, loaded on first use (the component class loads TFX):
  from imgpipe.components.evaluator import ImageEvaluator, EvaluatorConfig
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.evaluator.component import ImageEvaluator
    from imgpipe.components.evaluator.config import EvaluatorConfig

__all__ = ["EvaluatorConfig", "ImageEvaluator"]
__getattr__ = front_door.lazy(
    __name__, {"ImageEvaluator": "component", "EvaluatorConfig": "config"}
)
