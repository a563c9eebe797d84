"""One seam for file access: tf.io.gfile for every URI, Python's own io for local paths.

GFile handles gs://, s3:// and every filesystem TensorFlow knows. On local paths its
per-call overhead dominates small reads and seeks (GFile.seek validates its arguments
through a deprecation wrapper that inspects the call: ~0.3 ms a call, measured), so
local paths take the direct route. Behaviour is the same either way.
"""

from __future__ import annotations

import os
import shutil
from typing import IO

import tensorflow as tf

# What write_atomic writes before renaming it into place.
ATOMIC_TEMP_SUFFIX = ".tmp"


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def open_file(path: str, mode: str = "rb") -> IO:
    """Opens `path` for reading or writing, locally or through tf.io.gfile."""
    if is_local(path):
        return open(_local(path), mode)  # noqa: SIM115 - returned to the caller
    return tf.io.gfile.GFile(path, mode)


def read_bytes(path: str) -> bytes:
    with open_file(path, "rb") as f:
        return f.read()


def makedirs(path: str) -> None:
    """Makes a folder and its parents; an existing one is fine."""
    if is_local(path):
        os.makedirs(_local(path), exist_ok=True)
    else:
        tf.io.gfile.makedirs(path)


def write_text(path: str, text: str) -> None:
    with open_file(path, "w") as f:
        f.write(text)


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(_local(path))
    return tf.io.gfile.exists(path)


def size(path: str) -> int:
    """The size of a file in bytes."""
    if is_local(path):
        return os.path.getsize(_local(path))
    return tf.io.gfile.stat(path).length


def list_dir(path: str) -> list[str]:
    """The names in a folder, sorted; [] for a folder that does not exist."""
    if is_local(path):
        return sorted(os.listdir(_local(path))) if os.path.isdir(_local(path)) else []
    if not tf.io.gfile.isdir(path):
        return []
    # Object stores list sub-folders with a trailing "/".
    return sorted({name.rstrip("/") for name in tf.io.gfile.listdir(path)})


def list_files(folder: str) -> list[str]:
    """Every file below a folder, as sorted posix paths relative to it; [] for a folder
    that does not exist."""
    root = _local(folder) if is_local(folder) else folder
    walk = os.walk(root) if is_local(folder) else tf.io.gfile.walk(folder)
    found: list[str] = []
    for dirpath, _, filenames in walk:
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        found.extend(prefix + name for name in filenames)
    return sorted(found)


def remove(path: str) -> None:
    """Removes a file or a folder with everything in it; a missing path is fine."""
    if is_local(path):
        local = _local(path)
        if os.path.isdir(local) and not os.path.islink(local):
            shutil.rmtree(local)
        elif os.path.lexists(local):
            os.remove(local)
    elif tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
    elif tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


def rename(source: str, target: str) -> None:
    """Moves a file or a folder to a path that does not exist yet.

    Locally this is one atomic rename. Object stores have no folders to rename, so a
    folder's files are moved one by one there.
    """
    if is_local(source) and is_local(target):
        os.rename(_local(source), _local(target))
    elif not tf.io.gfile.isdir(source):
        tf.io.gfile.rename(source, target, overwrite=False)
    else:
        for relpath in list_files(source):
            tf.io.gfile.makedirs(os.path.dirname(os.path.join(target, relpath)))
            tf.io.gfile.rename(
                os.path.join(source, relpath), os.path.join(target, relpath), overwrite=False
            )
        tf.io.gfile.rmtree(source)


def write_atomic(path: str, data: bytes) -> None:
    """Writes a file that readers see either whole or not at all.

    Locally the bytes go to a temporary name beside it, which is then renamed; on
    object stores a single object write is atomic already.
    """
    if not is_local(path):
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(data)
        return
    local = _local(path)
    temporary = local + ATOMIC_TEMP_SUFFIX
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, local)


def free_bytes(path: str) -> int | None:
    """Free bytes on the local filesystem that holds (or would hold) path; None for
    object stores, whose space is not measured."""
    if not is_local(path):
        return None
    folder = os.path.abspath(_local(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return shutil.disk_usage(folder).free
