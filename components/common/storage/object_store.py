"""s3:// and gs:// for the file seam, and for TFX's own file I/O, through the stores' own
Python clients.

TensorFlow 2.21 has no s3:// filesystem, tensorflow-io (which had one) publishes no
wheel for Python 3.13, and TensorFlow's gs:// client has its endpoint compiled in, so it
cannot be pointed at an emulator or at a GCS-compatible store. The seam therefore talks
to both stores through boto3 and google-cloud-storage, the clients Beam's own S3 and GCS
filesystems use, configured the same way:

- s3:// (AWS, MinIO, any S3-compatible store): boto3's settings, e.g.
  AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  AWS_DEFAULT_REGION.
- gs://: Application Default Credentials; with STORAGE_EMULATOR_HOST set, that endpoint,
  anonymously.

Object stores have no folders: a folder is a key prefix, and makedirs writes an empty
`folder/` marker object (as TensorFlow's gs:// does), so an empty folder exists. An
object is written on close, in one request: readers see it whole or not at all.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from tfx.dsl.io import filesystem, filesystem_registry

from imgpipe.components.common.storage.object_store_clients import (
    GCS,
    S3,
    SCHEMES,
    ObjectStoreError,
    Stat,
    calling,
    is_object_store,
    store_for_path,
)

__all__ = ["GCS", "S3", "SCHEMES", "ObjectStoreError", "Stat", "is_object_store"]

# Objects up to this size are written from memory, larger ones from a temporary file.
_SPOOL_BYTES = 64 << 20
# Ranged reads fetch at least this much: records are read in offset order.
_READ_BUFFER_BYTES = 4 << 20


def _folder_key(key: str) -> str:
    return key.rstrip("/") + "/" if key.strip("/") else ""


class _RangedReader(io.RawIOBase):
    """A seekable read-only object: each read is one ranged request."""

    def __init__(self, path: str, length: int) -> None:
        self._path = path
        self._store, self._bucket, self._key = store_for_path(path)
        self._length = length
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._length}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        end = min(self._length, self._position + len(buffer))
        if end <= self._position:
            return 0
        data = calling(
            self._path, self._store.read_range, self._bucket, self._key, self._position, end
        )
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


class _Writer(io.BufferedIOBase):
    """Collects the bytes, and writes the object on close; nothing on an error."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._spool.write(data)

    def close(self) -> None:
        if self.closed:
            return
        try:
            store, bucket, key = store_for_path(self._path)
            self._spool.seek(0)
            calling(self._path, store.upload, bucket, key, self._spool)
        finally:
            self._spool.close()
            super().close()

    def abort(self) -> None:
        self._spool.close()
        super().close()

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is not None:
            self.abort()
        else:
            self.close()


def open_file(path: str, mode: str = "rb") -> IO:
    """Opens an object for reading (ranged requests) or writing (one upload on close)."""
    if "r" in mode:
        store, bucket, key = store_for_path(path)
        info = calling(path, store.info, bucket, key) if key else None
        if info is None:
            raise FileNotFoundError(f"{path}: no such object")
        raw = _RangedReader(path, info.length)
        binary: IO = io.BufferedReader(raw, _READ_BUFFER_BYTES)
    elif "w" in mode:
        binary = _Writer(path)  # type: ignore[assignment]
    else:
        raise ValueError(f"{path}: mode {mode!r} is not supported on object stores (r or w)")
    return binary if "b" in mode else io.TextIOWrapper(binary, encoding="utf-8")


def read_bytes(path: str) -> bytes:
    """The whole object, read in one request: a reader never mixes two versions of an
    object that another writer replaces meanwhile (a lock, a config), as a stat then
    ranged reads could, or fails because its length changed."""
    store, bucket, key = store_for_path(path)
    data = calling(path, store.read, bucket, key) if key else None
    if data is None:
        raise FileNotFoundError(f"{path}: no such object")
    return data


def _objects(path: str) -> list[tuple[str, int]]:
    """(relative path, size) of every object below a folder, folder markers left out."""
    store, bucket, key = store_for_path(path)
    prefix = _folder_key(key)
    found = calling(path, lambda: list(store.keys(bucket, prefix)))
    return [(name[len(prefix) :], size) for name, size in found if name != prefix]


def exists(path: str) -> bool:
    return is_file(path) or isdir(path)


def is_file(path: str) -> bool:
    store, bucket, key = store_for_path(path)
    return (
        bool(key) and not key.endswith("/") and calling(path, store.info, bucket, key) is not None
    )


def isdir(path: str) -> bool:
    store, bucket, key = store_for_path(path)
    prefix = _folder_key(key)
    return calling(path, lambda: next(iter(store.keys(bucket, prefix)), None)) is not None


def stat(path: str) -> Stat:
    store, bucket, key = store_for_path(path)
    info = calling(path, store.info, bucket, key) if key else None
    if info is not None:
        return info
    if isdir(path):
        return Stat(0, True)
    raise FileNotFoundError(f"{path}: no such object")


def listdir(path: str) -> list[str]:
    """The names directly in a folder (sub-folders without a trailing slash), sorted."""
    names = {relpath.split("/", 1)[0] for relpath, _ in _objects(path)}
    return sorted(name for name in names if name)


def walk(top: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk's (folder, sub-folders, files), top-down, from one listing."""
    folders: dict[str, tuple[set[str], list[str]]] = {"": (set(), [])}
    for relpath, _ in _objects(top):
        parts = relpath.split("/")
        for depth in range(len(parts)):
            parent = "/".join(parts[:depth])
            entry = folders.setdefault(parent, (set(), []))
            if depth == len(parts) - 1:
                if parts[-1]:  # a folder marker ends in "/"
                    entry[1].append(parts[-1])
            else:
                entry[0].add(parts[depth])
                folders.setdefault("/".join(parts[: depth + 1]), (set(), []))
    root = top.rstrip("/")
    for relative in sorted(folders):
        subfolders, files = folders[relative]
        yield (f"{root}/{relative}" if relative else root), sorted(subfolders), sorted(files)


def glob(pattern: str) -> list[str]:
    """The objects matching a pattern whose wildcards (* ? [..]) stay within a path
    segment, as tf.io.gfile.glob's."""
    wildcard = re.search(r"[*?\[]", pattern)
    if wildcard is None:
        return [pattern] if exists(pattern) else []
    folder = pattern[: wildcard.start()].rsplit("/", 1)[0]
    matches = _pattern_regex(pattern).fullmatch
    found = {f"{folder}/{relpath}" for relpath, _ in _objects(folder)}
    for relpath in list(found):  # folders match too
        parts = relpath[len(folder) + 1 :].split("/")
        found.update(f"{folder}/" + "/".join(parts[:n]) for n in range(1, len(parts)))
    return sorted(path for path in found if matches(path))


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    for token in re.split(r"(\*|\?|\[[^\]]*\])", pattern):
        if token == "*":
            parts.append("[^/]*")
        elif token == "?":
            parts.append("[^/]")
        elif token.startswith("[") and token.endswith("]") and len(token) > 2:
            parts.append("[^" + token[2:] if token[1] == "!" else token)
        else:
            parts.append(re.escape(token))
    return re.compile("".join(parts))


def makedirs(path: str) -> None:
    store, bucket, key = store_for_path(path)
    if key.strip("/") and not isdir(path):
        calling(path, store.upload, bucket, _folder_key(key), io.BytesIO(b""))


def remove(path: str) -> None:
    store, bucket, key = store_for_path(path)
    if calling(path, store.info, bucket, key) is None:
        raise FileNotFoundError(f"{path}: no such object")
    calling(path, store.delete, bucket, [key])


def create_new(path: str, data: bytes) -> bool:
    """Writes an object only if there is none at `path` (one conditional request);
    returns False, writing nothing, when there is one."""
    store, bucket, key = store_for_path(path)
    return bool(calling(path, store.create, bucket, key, data))


def rmtree(path: str) -> None:
    store, bucket, key = store_for_path(path)
    prefix = _folder_key(key)
    if not prefix:
        raise ValueError(f"{path}: refusing to delete a whole bucket")
    keys = calling(path, lambda: [name for name, _ in store.keys(bucket, prefix)])
    calling(path, store.delete, bucket, keys)


def copy(source: str, target: str, overwrite: bool = False) -> None:
    """Copies one file; both ends may be local or on a store (the same store's copy
    stays on the server)."""
    if not overwrite and _exists_anywhere(target):
        raise FileExistsError(f"{target}: exists already")
    if is_object_store(source) and source[:5] == target[:5]:
        store, bucket, key = store_for_path(source)
        _, target_bucket, target_key = store_for_path(target)
        calling(source, store.copy, bucket, key, target_bucket, target_key)
        return
    with _open_anywhere(source, "rb") as reader, _open_anywhere(target, "wb") as writer:
        while chunk := reader.read(_READ_BUFFER_BYTES):
            writer.write(chunk)


def rename(source: str, target: str, overwrite: bool = False) -> None:
    """Moves one file (a copy, then a delete: object stores cannot rename)."""
    copy(source, target, overwrite)
    remove(source)


def _exists_anywhere(path: str) -> bool:
    return exists(path) if is_object_store(path) else os.path.exists(path)


def _open_anywhere(path: str, mode: str) -> IO:
    if is_object_store(path):
        return open_file(path, mode)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return open(path, mode)  # noqa: SIM115 - returned to the caller


class ObjectStoreFilesystem(filesystem.Filesystem):
    """The same operations for TFX's file I/O (artifact folders, executor outputs),
    registered ahead of TensorFlow's for s3:// and gs://."""

    SUPPORTED_SCHEMES = list(SCHEMES)

    @staticmethod
    def open(name: Any, mode: str = "r") -> Any:
        return open_file(name, mode)

    @staticmethod
    def copy(src: Any, dst: Any, overwrite: bool = False) -> None:
        copy(src, dst, overwrite)

    @staticmethod
    def exists(path: Any) -> bool:
        return exists(path)

    @staticmethod
    def glob(pattern: Any) -> list[Any]:
        return glob(pattern)

    @staticmethod
    def isdir(path: Any) -> bool:
        return isdir(path)

    @staticmethod
    def listdir(path: Any) -> list[Any]:
        return listdir(path)

    @staticmethod
    def makedirs(path: Any) -> None:
        makedirs(path)

    @staticmethod
    def mkdir(path: Any) -> None:
        makedirs(path)

    @staticmethod
    def remove(path: Any) -> None:
        remove(path)

    @staticmethod
    def rename(src: Any, dst: Any, overwrite: bool = False) -> None:
        rename(src, dst, overwrite)

    @staticmethod
    def rmtree(path: Any) -> None:
        rmtree(path)

    @staticmethod
    def stat(path: Any) -> Any:
        return stat(path)

    @staticmethod
    def walk(top: Any, topdown: bool = True, onerror: Any = None) -> Any:
        return walk(top)


# Ahead of TensorFlow's plugin (priority 10), which cannot open s3:// here.
filesystem_registry.DEFAULT_FILESYSTEM_REGISTRY.register(ObjectStoreFilesystem, priority=5)
