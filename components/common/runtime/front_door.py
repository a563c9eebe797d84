"""A package's public names, loaded when first used.

Each component package re-exports its component class and its config, so a user writes
`from imgpipe.components.trainer import ImageTrainer, TrainerConfig` and never learns the
file layout. The component class pulls in TFX (seconds); the configs do not, and the CLI
reads them: so each name loads its own module on first use (PEP 562).

What a package exports is what other rooms may use: tests/import_graph.py fails on an
import of a component's module from outside its package. A name that reads well only
beside its module is exported under a longer one (`import ... as`).

Each name is written twice: imported under `if TYPE_CHECKING:`, where mypy reads it (a
misspelt name fails the type check), and listed in `__all__`. The loader reads where each
name lives from those same imports, parsed from the package's source on first use.

Example (a package's __init__.py):
  if TYPE_CHECKING:
      from imgpipe.components.trainer.component import ImageTrainer
      from imgpipe.components.trainer.summary import read_if_present as read_training_summary

  __all__ = ["ImageTrainer", "read_training_summary"]
  if not TYPE_CHECKING:
      __getattr__ = front_door.lazy(__name__)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy(package: str) -> Callable[[str], Any]:
    """A module `__getattr__` that returns, for a name the package imports under
    `if TYPE_CHECKING:`, that import's attribute of its module, imported on first use."""
    exports: dict[str, tuple[str, str]] = {}

    def __getattr__(name: str) -> Any:
        if not exports:
            exports.update(_type_checking_imports(package))
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = exports[name]
        return getattr(importlib.import_module(module), attribute)

    return __getattr__


def _type_checking_imports(package: str) -> dict[str, tuple[str, str]]:
    """Each name `package`'s __init__ imports under `if TYPE_CHECKING:`, with the module
    and the attribute it is imported from; each from a module of the package itself."""
    import ast  # loaded on first use, not with the door

    get_source = getattr(sys.modules[package].__loader__, "get_source", None)
    source = get_source(package) if get_source else None
    if not isinstance(source, str):
        raise ImportError(f"{package}: its front door reads its own source, which is missing")
    imports: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if not (
                    isinstance(statement, ast.ImportFrom)
                    and statement.module
                    and statement.module.startswith(f"{package}.")
                ):
                    raise ImportError(
                        f"{package}: a front door imports only its own modules under"
                        f" TYPE_CHECKING, not {ast.unparse(statement)!r}"
                    )
                for alias in statement.names:
                    imports[alias.asname or alias.name] = (statement.module, alias.name)
    return imports
