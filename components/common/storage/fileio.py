"""One seam for file access: Python's own io for local paths, the object stores' clients
for s3:// and gs:// (object_store), tf.io.gfile for every other URI TensorFlow knows.

TensorFlow 2.21 cannot open s3://, nor point gs:// at another endpoint; object_store
says why, and how each store is configured. On local paths its
per-call overhead dominates small reads and seeks (GFile.seek validates its arguments
through a deprecation wrapper that inspects the call: ~0.3 ms a call, measured), so
local paths take the direct route. Behaviour is the same either way.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import stat as stat_module
import threading
from collections.abc import Iterable
from typing import IO, Any

import tensorflow as tf

from imgpipe.components.common.storage import object_store

# What write_atomic writes before renaming it into place.
ATOMIC_TEMP_SUFFIX = ".tmp"


# KFP's launcher scheme for MinIO: its steps see artifacts at local paths, and a path the
# user gives for MinIO is s3:// with AWS_ENDPOINT_URL_S3.
_MINIO = "minio://"


def _tensorflow_path(path: str) -> str:
    """`path`, for tf.io.gfile; minio:// refused with the fix."""
    if path.startswith(_MINIO):
        raise ValueError(
            f"{path}: minio:// is KFP's own scheme, which this project does not open; give "
            f"s3://{path[len(_MINIO) :]} and set AWS_ENDPOINT_URL_S3 to the MinIO endpoint"
        )
    return path


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    """A local path or file:// URI as a plain path."""
    return path[len("file://") :] if path.startswith("file://") else path


def open_file(path: str, mode: str = "rb") -> IO:
    """Opens `path` for reading or writing, locally or through tf.io.gfile."""
    if is_local(path):
        return open(local_path(path), mode)  # noqa: SIM115 - returned to the caller
    if object_store.is_object_store(path):
        return object_store.open_file(path, mode)
    return tf.io.gfile.GFile(_tensorflow_path(path), mode)


def read_bytes(path: str) -> bytes:
    """The whole file; on an object store one version of it, read in one request."""
    if object_store.is_object_store(path):
        return object_store.read_bytes(path)
    with open_file(path, "rb") as f:
        return f.read()


class NotAnImageFileError(OSError):
    """The path is not a regular file, or is too large to be read; nothing was opened
    (or read, for a file that became special after it was listed)."""


def read_regular_file(path: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`.

    A local FIFO, socket or device is refused from its stat, before it is opened
    (opening a FIFO blocks until a writer comes); the open is non-blocking and checked
    again, in case the file was replaced in between. Object stores hold only regular
    files; their sizes are not checked, which would cost a request per file.

    Raises:
      NotAnImageFileError: not a regular file, or larger than max_bytes.
      OSError, tf.errors.OpError: the file cannot be read.
    """
    if not is_local(path):
        return read_bytes(path)
    local = local_path(path)
    info = os.stat(local)
    _check_regular(info.st_mode, info.st_size, max_bytes)
    fd = os.open(local, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        _check_regular(info.st_mode, info.st_size, max_bytes)
        # One read of the known size, and a byte more to see a file that grew: about
        # 15 us a photo, against 17-25 us through a buffered file object (measured).
        data = os.read(fd, info.st_size + 1)
        if len(data) <= info.st_size:
            return data
        chunks, total = [data], len(data)
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            _check_regular(info.st_mode, total, max_bytes)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_regular(mode: int, size: int, max_bytes: int) -> None:
    if not stat_module.S_ISREG(mode):
        raise NotAnImageFileError(
            f"not a regular file (mode {stat_module.filemode(mode)}): not read"
        )
    if size > max_bytes:
        raise NotAnImageFileError(
            f"file too large: {size} bytes, more than any image within the limits "
            f"({max_bytes} bytes): not read"
        )


def makedirs(path: str) -> None:
    """Makes a folder and its parents; an existing one is fine."""
    if is_local(path):
        os.makedirs(local_path(path), exist_ok=True)
    elif object_store.is_object_store(path):
        object_store.makedirs(path)
    else:
        tf.io.gfile.makedirs(_tensorflow_path(path))


def write_text(path: str, text: str) -> None:
    with open_file(path, "w") as f:
        f.write(text)


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    if object_store.is_object_store(path):
        return object_store.exists(path)
    return tf.io.gfile.exists(_tensorflow_path(path))


def size(path: str) -> int:
    """The size of a file in bytes."""
    if is_local(path):
        return os.path.getsize(local_path(path))
    return stat(path).length


def stat(path: str) -> object_store.Stat:
    """The size of a file, its modification time, and whether it is a folder."""
    if is_local(path):
        info = os.stat(local_path(path))
        return object_store.Stat(info.st_size, stat_module.S_ISDIR(info.st_mode), info.st_mtime_ns)
    if object_store.is_object_store(path):
        return object_store.stat(path)
    info = tf.io.gfile.stat(path)
    return object_store.Stat(info.length, info.is_directory, info.mtime_nsec)


def isdir(path: str) -> bool:
    if is_local(path):
        return os.path.isdir(local_path(path))
    if object_store.is_object_store(path):
        return object_store.isdir(path)
    return tf.io.gfile.isdir(_tensorflow_path(path))


def glob(pattern: str) -> list[str]:
    """The paths matching a pattern (* ? [..] within a path segment), sorted."""
    if object_store.is_object_store(pattern):
        return object_store.glob(pattern)
    return sorted(tf.io.gfile.glob(pattern))


def copy(source: str, target: str, overwrite: bool = False) -> None:
    """Copies one file, between any two places the seam reaches."""
    if object_store.is_object_store(source) or object_store.is_object_store(target):
        object_store.copy(
            local_path(source) if is_local(source) else source,
            local_path(target) if is_local(target) else target,
            overwrite,
        )
    else:
        tf.io.gfile.copy(source, target, overwrite=overwrite)


def list_dir(path: str) -> list[str]:
    """The names in a folder, sorted; [] for a folder that does not exist."""
    if is_local(path):
        return sorted(os.listdir(local_path(path))) if os.path.isdir(local_path(path)) else []
    if object_store.is_object_store(path):
        return object_store.listdir(path)
    if not tf.io.gfile.isdir(path):
        return []
    # Object stores list sub-folders with a trailing "/".
    return sorted({name.rstrip("/") for name in tf.io.gfile.listdir(path)})


def list_files(folder: str) -> list[str]:
    """Every file below a folder, as sorted posix paths relative to it; [] for a folder
    that does not exist."""
    root = local_path(folder) if is_local(folder) else folder
    if is_local(folder):
        walk: Iterable[tuple[str, Any, list[str]]] = os.walk(root)
    elif object_store.is_object_store(folder):
        walk = object_store.walk(folder) if object_store.isdir(folder) else []
    else:
        walk = tf.io.gfile.walk(folder)
    found: list[str] = []
    for dirpath, _, filenames in walk:
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        found.extend(prefix + name for name in filenames)
    return sorted(found)


def remove(path: str) -> None:
    """Removes a file or a folder with everything in it; a missing path is fine."""
    if is_local(path):
        local = local_path(path)
        if os.path.isdir(local) and not os.path.islink(local):
            shutil.rmtree(local)
        elif os.path.lexists(local):
            os.remove(local)
    elif object_store.is_object_store(path):
        if object_store.isdir(path):
            object_store.rmtree(path)
        if object_store.is_file(path):
            object_store.remove(path)
    elif tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
    elif tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


def rename(source: str, target: str) -> None:
    """Moves a file or a folder to a path that does not exist yet.

    Locally this is one atomic rename. Object stores have no folders to rename, so a
    folder's files are moved one by one there, each a copy and a delete.
    """
    if is_local(source) and is_local(target):
        os.rename(local_path(source), local_path(target))
    elif object_store.is_object_store(source):
        if not object_store.isdir(source):
            object_store.rename(source, target)
            return
        for relpath in list_files(source):
            object_store.rename(f"{source}/{relpath}", f"{target}/{relpath}")
        object_store.rmtree(source)
    elif not tf.io.gfile.isdir(source):
        tf.io.gfile.rename(source, target, overwrite=False)
    else:
        for relpath in list_files(source):
            tf.io.gfile.makedirs(os.path.dirname(os.path.join(target, relpath)))
            tf.io.gfile.rename(
                os.path.join(source, relpath), os.path.join(target, relpath), overwrite=False
            )
        tf.io.gfile.rmtree(source)


def copy_tree(source: str, target: str) -> None:
    """Copies every file below `source` to the same relative path below `target`."""
    for relpath in list_files(source):
        destination = posixpath.join(target, relpath)
        if is_local(destination):
            os.makedirs(os.path.dirname(local_path(destination)), exist_ok=True)
        copy(posixpath.join(source, relpath), destination, overwrite=True)


def write_atomic(path: str, data: bytes) -> None:
    """Writes a file that readers see either whole or not at all.

    Locally the bytes go to a temporary name beside it, which is then renamed; on
    object stores a single object write is atomic already.
    """
    if not is_local(path):
        with open_file(path, "wb") as f:
            f.write(data)
        return
    local = local_path(path)
    temporary = local + ATOMIC_TEMP_SUFFIX
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, local)
    except OSError as e:
        # Nothing half-written stays behind, and the error names the file it was for.
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise OSError(e.errno, e.strerror, path) from e


def create_new(path: str, data: bytes) -> bool:
    """Writes a file only if there is none at `path`, atomically: of two writers racing
    for one path exactly one gets True; the other writes nothing and gets False.

    Locally the bytes go to a temporary file that is then hard-linked into place (a link
    fails when the name exists); on object stores a conditional write does it.
    """
    if object_store.is_object_store(path):
        return object_store.create_new(path, data)
    if not is_local(path):
        raise ValueError(f"{path}: only local paths, s3:// and gs:// can be created exclusively")
    local = local_path(path)
    temporary = f"{local}.{os.getpid()}.{threading.get_ident()}{ATOMIC_TEMP_SUFFIX}"
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(temporary, local)
    except FileExistsError:
        return False
    finally:
        os.remove(temporary)
    return True


def free_bytes(path: str) -> int | None:
    """Free bytes on the local filesystem that holds (or would hold) path; None for
    object stores, whose space is not measured."""
    if not is_local(path):
        return None
    folder = os.path.abspath(local_path(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return shutil.disk_usage(folder).free
