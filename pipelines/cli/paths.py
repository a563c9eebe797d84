"""Checks of the local paths a command names, made before TensorFlow and Beam load.

Loading them takes seconds; a mistyped folder should not. Paths with a scheme (gs://,
s3://) are left to the command, which checks them through the file seam once it has it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from imgpipe.components.common.runtime.printable import short
from imgpipe.pipelines.cli.errors import UserError

# How much of a path a message quotes (printable.short cuts it there).
_NAME_CHARS = 200


def is_local(path: str) -> bool:
    return "://" not in path


def require_local_folder(path: str, name: str, fix: str) -> None:
    """Raises UserError when `path` is local and not a folder: `{name}: no such folder;
    {fix}`, or `{name} is a file, not a folder; {fix}` when it is a file.

    Args:
      path: the path to check.
      name: the path as the user gave it, with its flag (`--data DIR`).
      fix: what to give instead.
    """
    if is_local(path) and not os.path.isdir(path):
        if os.path.exists(path):
            raise UserError(f"{short(name, _NAME_CHARS)} is a file, not a folder; {fix}")
        raise UserError(f"{short(name, _NAME_CHARS)}: no such folder; {fix}")


def require_writable_folder(path: str, name: str, fix: str) -> None:
    """Raises UserError naming `name` and `fix` when the local folder `path` cannot be
    made or written by this user: a temporary folder is made, and removed at once, in
    `path` or in the nearest of its folders that exists. Object stores are left to the
    command.
    """
    if not is_local(path):
        return
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(
            f"{short(name, _NAME_CHARS)}: {short(existing, _NAME_CHARS)} is a file; {fix}"
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".imgpipe-check-", dir=existing))
    except OSError as e:
        raise UserError(
            f"{short(name, _NAME_CHARS)}: this user cannot write in {short(existing, _NAME_CHARS)} "
            f"({e.strerror}); {fix}"
        ) from None


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
