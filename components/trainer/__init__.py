"""ImageTrainer: a Keras classifier trained on ImageExampleGen's shards, served on bytes.

The public names, loaded on first use (the component class loads TFX); the rest of the
package is private to it, but for the front door of its sub-package several_workers/
(the names a compiled Kubeflow package and the Trainer's pod agree on):
  from imgpipe.components.trainer import ImageTrainer, TrainerConfig
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.trainer.component import ImageTrainer
    from imgpipe.components.trainer.config import TrainerConfig
    from imgpipe.components.trainer.summary import RESUMED as TRAINING_RESUMED
    from imgpipe.components.trainer.summary import read_if_present as read_training_summary
    from imgpipe.components.trainer.warm_start import BACKBONE_ONLY as WARM_START_BACKBONE_ONLY
    from imgpipe.components.trainer.warm_start import FULL as WARM_START_FULL

__all__ = [
    "TRAINING_RESUMED",
    "WARM_START_BACKBONE_ONLY",
    "WARM_START_FULL",
    "ImageTrainer",
    "TrainerConfig",
    "read_training_summary",
]
# mypy reads the names above; a misspelt one fails the type check.
if not TYPE_CHECKING:
    __getattr__ = front_door.lazy(__name__)
