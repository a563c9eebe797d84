"""ImageTrainer: a Keras classifier trained on ImageExampleGen's shards, served on bytes.

The public names, loaded on first use (the component class loads TFX):
  from imgpipe.components.trainer import ImageTrainer, TrainerConfig
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.trainer.component import ImageTrainer
    from imgpipe.components.trainer.config import TrainerConfig

__all__ = ["ImageTrainer", "TrainerConfig"]
__getattr__ = front_door.lazy(__name__, {"ImageTrainer": "component", "TrainerConfig": "config"})
