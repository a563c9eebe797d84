"""Folders of small JSON records kept beside the champion in the serving folder (the
admitted spans, the accepted drift): one reader, so a record that cannot be read is passed
over the same way everywhere (it admits or accepts nothing). No TensorFlow here beyond the
file seam."""

from __future__ import annotations

import posixpath
from typing import TypeVar

from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio

T = TypeVar("T")


def read_records(
    folder: str, cls: type[T], version: int, prefix: str, problems: list[str] | None = None
) -> list[T]:
    """Every `<prefix>*.json` record in `folder` that reads as `cls` at `version`, in
    name order; none when the folder does not exist. Each record that cannot be read is
    named in `problems` ("<path>: <why>"), when given."""
    if not folder or not fileio.isdir(folder):
        return []
    found = []
    for name in sorted(fileio.list_dir(folder)):
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        path = posixpath.join(folder, name)
        try:
            text = fileio.read_bytes(path).decode()
            found.append(config_loader.from_document(cls, text, path, version))
        except (OSError, ValueError) as e:
            if problems is not None:
                problems.append(f"{path}: {' '.join(str(e).split())[:200]}")
            continue
    return found
