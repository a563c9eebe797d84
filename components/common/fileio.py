"""One seam for file access: tf.io.gfile for every URI, Python's own io for local paths.

GFile handles gs://, s3:// and every filesystem TensorFlow knows. On local paths its
per-call overhead dominates small reads and seeks (GFile.seek validates its arguments
through a deprecation wrapper that inspects the call: ~0.3 ms a call, measured), so
local paths take the direct route. Behaviour is the same either way.
"""

from __future__ import annotations

import os
import stat
from typing import IO

import tensorflow as tf


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    """A local path or file:// URI as a plain path."""
    return path[len("file://") :] if path.startswith("file://") else path


def open_file(path: str, mode: str = "rb") -> IO:
    """Opens `path` for reading or writing, locally or through tf.io.gfile."""
    if is_local(path):
        return open(local_path(path), mode)  # noqa: SIM115 - returned to the caller
    return tf.io.gfile.GFile(path, mode)


def read_bytes(path: str) -> bytes:
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
    if not stat.S_ISREG(mode):
        raise NotAnImageFileError(f"not a regular file (mode {stat.filemode(mode)}): not read")
    if size > max_bytes:
        raise NotAnImageFileError(
            f"file too large: {size} bytes, more than any image within the limits "
            f"({max_bytes} bytes): not read"
        )


def makedirs(path: str) -> None:
    """Makes a folder and its parents; an existing one is fine."""
    if is_local(path):
        os.makedirs(local_path(path), exist_ok=True)
    else:
        tf.io.gfile.makedirs(path)


def write_text(path: str, text: str) -> None:
    with open_file(path, "w") as f:
        f.write(text)


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    return tf.io.gfile.exists(path)
