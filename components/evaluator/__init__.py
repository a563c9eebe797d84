"""ImageEvaluator: blesses a candidate model against the served champion.

The public names, loaded on first use (the component class loads TFX); the rest of the
package is private to it:
  from imgpipe.components.evaluator import ImageEvaluator, EvaluatorConfig
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.evaluator.component import ImageEvaluator
    from imgpipe.components.evaluator.config import EvaluatorConfig
    from imgpipe.components.evaluator.evaluation import read_if_present as read_evaluation
    from imgpipe.components.evaluator.paired import POWER

__all__ = ["POWER", "EvaluatorConfig", "ImageEvaluator", "read_evaluation"]
# mypy reads the names above; a misspelt one fails the type check.
if not TYPE_CHECKING:
    __getattr__ = front_door.lazy(__name__)
