"""Comparing output folders in tests."""

from __future__ import annotations

import os


def tree(folder: str) -> dict[str, bytes]:
    """Every file below `folder`, by posix path relative to it, with its bytes."""
    found = {}
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder).replace(os.sep, "/")] = f.read()
    return found
