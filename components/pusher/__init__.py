"""ImagePusher: TFX's Pusher, publishing each push whole (see executor.py).

The public names, loaded on first use (the component class loads TFX):
  from imgpipe.components.pusher import ImagePusher
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.pusher.component import ImagePusher

__all__ = ["ImagePusher"]
__getattr__ = front_door.lazy(__name__, {"ImagePusher": "component"})
