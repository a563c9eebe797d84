"""Checks of the local paths a command names, made before TensorFlow and Beam load.

Loading them takes seconds; a mistyped folder should not. Paths with a scheme (gs://,
s3://) are left to the command, which checks them through the file seam once it has it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from imgpipe.pipelines.cli.errors import UserError


def is_local(path: str) -> bool:
    return "://" not in path


def require_local_folder(path: str, message: str) -> None:
    """Raises UserError(message) when `path` is local and not a folder."""
    if is_local(path) and not os.path.isdir(path):
        raise UserError(message)


def require_local_path(path: str, message: str) -> None:
    """Raises UserError(message) when `path` is local and does not exist."""
    if is_local(path) and not os.path.exists(path):
        raise UserError(message)


def refuse_local_file_on_the_way(out: str) -> None:
    """Raises UserError when a local output folder, or the nearest of its folders that
    exists, is a file, so the folder cannot be made."""
    if is_local(out):
        refuse_file_on_the_way(out, os.path.exists, os.path.isdir)


def refuse_file_on_the_way(
    out: str, exists: Callable[[str], bool], isdir: Callable[[str], bool]
) -> None:
    """`refuse_local_file_on_the_way` through the given `exists` and `isdir` (the file
    seam's, for object stores)."""
    path = out.rstrip("/")
    while path and not exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent
    if path and not isdir(path):
        where = "" if path == out.rstrip("/") else f", so {out} cannot be made"
        raise UserError(f"{path} is a file{where}; give a new or empty folder as the output")
