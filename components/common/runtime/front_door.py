"""A package's public names, loaded when first used.

Each component package re-exports its component class and its config, so a user writes
`from imgpipe.components.trainer import ImageTrainer, TrainerConfig` and never learns the
file layout. The component class pulls in TFX (seconds); the configs do not, and the CLI
reads them: so each name loads its own module on first use (PEP 562).

What a package exports is what other rooms may use: tests/import_graph.py fails on an
import of a component's module from outside its package. A name that reads well only
beside its module is exported under a longer one, `"module:name"`.

Example (a package's __init__.py):
  __getattr__ = front_door.lazy(
      __name__,
      {"ImageTrainer": "component", "read_training_summary": "summary:read_if_present"},
  )
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that returns, for `name`, the attribute `name` of the
    submodule `exports[name]` names (or `attribute` of `exports[name]`'s
    `"submodule:attribute"`), imported on first use."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        submodule, _, attribute = exports[name].partition(":")
        return getattr(importlib.import_module(f"{package}.{submodule}"), attribute or name)

    return __getattr__
