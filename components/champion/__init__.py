"""ChampionResolver: the served champion, read once at the head of a run (executor.py).

The public names, loaded on first use (the component class loads TFX):
  from imgpipe.components.champion import ChampionResolver
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.champion.component import ChampionResolver

__all__ = ["ChampionResolver"]
# mypy reads the names above; a misspelt one fails the type check.
if not TYPE_CHECKING:
    __getattr__ = front_door.lazy(__name__)
