"""ImagePusher: TFX's Pusher, publishing each push whole (see executor.py).

The public names, loaded on first use (the component class loads TFX); the rest of the
package is private to it:
  from imgpipe.components.pusher import ImagePusher, ServingConfig
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.pusher.component import ImagePusher
    from imgpipe.components.pusher.serving_files import SERVING_CONFIG_KEY, ServingConfig

__all__ = ["SERVING_CONFIG_KEY", "ImagePusher", "ServingConfig"]
# mypy reads the names above; a misspelt one fails the type check.
if not TYPE_CHECKING:
    __getattr__ = front_door.lazy(__name__)
