"""manifest.json: what a complete output holds. Typed, and read and written here only.

ImageExampleGen's Examples, ImageStatistics' artifact and the Trainer's model each end
with a manifest: every other file below the folder, with its size, its CRC-32C and, for
TFRecord shards, its record count. It is written last and atomically, so an output is
complete exactly when its manifest exists. A run that was killed or failed, or one
still writing, leaves none, and readers refuse the folder.

Readers call `verify`: the manifest exists, no file it lists is missing, no other file
is there, and every file has its size. Files up to CHECKSUMMED_ON_READ_BYTES (the label
map, the summary, the statistics) are checksummed as well. Larger ones (shards, model
weights) are checksummed only with `checksums=True`, since that reads every byte: a
torn or replaced shard changes its size, and the readers count the records they read.

CRC-32C is the checksum that frames every TFRecord and the one object stores keep
(GCS's crc32c). At about 10 GB/s (google-crc32c) the shard writer computes it while
writing.

Example:
  manifest.write(folder, {"a.json": manifest.entry_of(data)})
  manifest.verify(folder)  # raises IncompleteOutputError naming the file and why
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from collections.abc import Iterable, Mapping

import google_crc32c

from imgpipe.components.common.formats.layout import MANIFEST_FILE
from imgpipe.components.common.runtime import config_loader, stop_request
from imgpipe.components.common.storage import fileio

SCHEMA_VERSION = 1
# Files up to this size are checksummed by every reader.
CHECKSUMMED_ON_READ_BYTES = 1024 * 1024
_READ_CHUNK_BYTES = 4 * 1024 * 1024
# Size queries in flight at once on object stores, where each one is a request.
_PARALLEL_STATS = 16


class IncompleteOutputError(ValueError):
    """An output without its manifest, or whose files differ from it; the message names
    the file and why."""


@dataclasses.dataclass(frozen=True)
class FileEntry:
    size: int  # bytes
    crc32c: str  # CRC-32C of the file's bytes, 8 hex digits
    records: int | None = None  # TFRecord shards: the records in the file

    def validate(self) -> None:
        if self.size < 0:
            raise ValueError(f"size must be >= 0, got {self.size}")
        if len(self.crc32c) != 8 or any(c not in "0123456789abcdef" for c in self.crc32c):
            raise ValueError(f"crc32c must be 8 lowercase hex digits, got {self.crc32c!r}")
        if self.records is not None and self.records < 0:
            raise ValueError(f"records must be >= 0, got {self.records}")


@dataclasses.dataclass(frozen=True)
class Manifest:
    version: int
    files: dict[str, FileEntry]  # posix path relative to the folder -> entry

    def validate(self) -> None:
        for relpath in self.files:
            parts = relpath.split("/")
            if relpath.startswith("/") or ".." in parts or "" in parts or relpath == MANIFEST_FILE:
                raise ValueError(f"files holds {relpath!r}, which is not a file inside the folder")


class Checksum:
    """The size and CRC-32C of a file written piece by piece."""

    def __init__(self) -> None:
        self._crc = google_crc32c.Checksum()
        self.size = 0

    def update(self, data: bytes) -> None:
        self._crc.update(data)
        self.size += len(data)

    def entry(self, records: int | None = None) -> FileEntry:
        return FileEntry(self.size, self._crc.hexdigest().decode(), records)


def entry_of(data: bytes, records: int | None = None) -> FileEntry:
    """The entry of a file holding `data`."""
    checksum = Checksum()
    checksum.update(data)
    return checksum.entry(records)


def describe(folder: str, relpaths: Iterable[str]) -> dict[str, FileEntry]:
    """Entries of files already written below `folder`, by reading them."""
    entries = {}
    for relpath in relpaths:
        checksum = Checksum()
        with fileio.open_file(os.path.join(folder, relpath), "rb") as f:
            while chunk := f.read(_READ_CHUNK_BYTES):
                checksum.update(chunk)
        entries[relpath] = checksum.entry()
    return entries


def write(folder: str, files: Mapping[str, FileEntry]) -> str:
    """Writes folder/manifest.json atomically, the last file of an output; returns its path.

    Raises:
      stop_request.StopRequested: a stop signal came first; the output stays incomplete.
    """
    stop_request.refuse_commit(folder)
    manifest = Manifest(SCHEMA_VERSION, dict(sorted(files.items())))
    manifest.validate()
    path = os.path.join(folder, MANIFEST_FILE)
    fileio.write_atomic(path, config_loader.to_document(manifest).encode())
    return path


def read(folder: str) -> Manifest:
    """The manifest of a complete output.

    Raises:
      IncompleteOutputError: there is none: the run that wrote the folder did not finish.
      ValueError: the file does not fit the schema.
    """
    path = os.path.join(folder, MANIFEST_FILE)
    if not fileio.exists(path):
        raise IncompleteOutputError(
            f"{folder} is incomplete: it has no {MANIFEST_FILE}, which is written last, so "
            "the run that wrote it was killed or failed; run that step again into it"
        )
    with fileio.open_file(path, "r") as f:
        return config_loader.from_document(Manifest, f.read(), path, SCHEMA_VERSION)


def verify(folder: str, checksums: bool = False) -> Manifest:
    """Checks that `folder` holds exactly what its manifest lists; returns the manifest.

    Args:
      folder: an output folder (local, gs:// or s3://).
      checksums: checksum every file, not only those up to CHECKSUMMED_ON_READ_BYTES;
        this reads every byte.

    Raises:
      IncompleteOutputError: no manifest, a missing or extra file, or a file whose size
        or checksum differs; the message names the file.
    """
    manifest = read(folder)
    listed = os.path.join(folder, MANIFEST_FILE)
    found = set(fileio.list_files(folder)) - {MANIFEST_FILE}
    missing = sorted(set(manifest.files) - found)
    if missing:
        raise IncompleteOutputError(
            f"{os.path.join(folder, missing[0])} is missing"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + f", though {listed} lists it: the output was changed after it was written; "
            "run the step that wrote it again"
        )
    extra = sorted(found - set(manifest.files))
    if extra:
        raise IncompleteOutputError(
            f"{os.path.join(folder, extra[0])} is not in {listed}"
            + (f" (nor are {len(extra) - 1} more files)" if len(extra) > 1 else "")
            + ": it was left by another run or added later; run the step that wrote the "
            "output again"
        )
    paths = [os.path.join(folder, relpath) for relpath in manifest.files]
    if fileio.is_local(folder):
        sizes = [fileio.size(path) for path in paths]
    else:
        with concurrent.futures.ThreadPoolExecutor(_PARALLEL_STATS) as pool:
            sizes = list(pool.map(fileio.size, paths))
    for (relpath, entry), path, size in zip(manifest.files.items(), paths, sizes, strict=True):
        if size != entry.size:
            raise IncompleteOutputError(
                f"{path} has {size} bytes, but {listed} says {entry.size}: it was truncated "
                "or replaced after it was written; run the step that wrote it again"
            )
        if checksums or entry.size <= CHECKSUMMED_ON_READ_BYTES:
            found_crc = describe(folder, [relpath])[relpath].crc32c
            if found_crc != entry.crc32c:
                raise IncompleteOutputError(
                    f"{path} has CRC-32C {found_crc}, but {listed} says {entry.crc32c}: it "
                    "was changed after it was written; run the step that wrote it again"
                )
    return manifest
