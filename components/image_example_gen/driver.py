"""Resolves {SPAN}/{VERSION} in the input path and fingerprints the image tree.

The span folder is found by span_folders.resolve_span_folder, here (the driver, and the
executor where no driver runs) and in the command line's check alike: a name the pattern
does not take is ignored with a warning, and a zero-padded folder is read as it is named.

TFX's FileBasedDriver fingerprints the files a glob matches; an image folder nests
files below label folders, so this driver fingerprints the whole tree (every file's
path, size and mtime), walked as the listing walks it. A new, changed or removed
image changes the fingerprint, and with it TFX's cache key, so the component re-runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterable

import tensorflow as tf
from absl import logging
from tfx.components.example_gen import driver as tfx_driver
from tfx.components.example_gen import input_processor
from tfx.proto import example_gen_pb2, range_config_pb2

from imgpipe.components.common.storage import fileio
from imgpipe.components.image_example_gen import span_folders
from imgpipe.components.image_example_gen.walk import walk_tree


def split_input_base(input_base: str) -> tuple[str, str]:
    """Splits a path into the fixed base and the last part(s) the driver resolves.

    `/data/imgs/span-{SPAN}/v{VERSION}` -> (`/data/imgs`, `span-{SPAN}/v{VERSION}`);
    a path without patterns -> (parent, folder name).
    """
    path = input_base.rstrip("/")
    cut = path.find("{")
    head = path if cut < 0 else path[:cut]
    slash = head.rfind("/")
    if slash < 0:
        raise ValueError(f"input_base {input_base!r} must be a path with at least one folder")
    return path[:slash] or "/", path[slash + 1 :]


@dataclasses.dataclass(frozen=True)
class InputRoot:
    """The folder a run reads, and the warnings of its resolution (names ignored beside
    the span folders), each one line that starts with the input path."""

    path: str
    warnings: tuple[str, ...] = ()


def resolve_input_root(input_base: str) -> InputRoot:
    """The folder a run reads: `input_base` with {SPAN}/{VERSION} resolved to the latest
    span (and its latest version), by span_folders.resolve_span_folder, as the driver
    resolves them; a path without patterns is returned as given.

    Raises:
      FileNotFoundError: the folder, or the patterns' parent, does not exist, or no
        folder matches the patterns. The message is one line that names the path and
        what the parent holds.
      ValueError: the patterns are invalid, or two folders are the same span.
    """
    base, pattern = split_input_base(input_base)
    if not span_folders.has_specs(pattern):
        if not fileio.isdir(input_base):
            raise FileNotFoundError(
                f"{input_base}: no such folder; give the image folder "
                "(root/<label>/... or root/<split>/<label>/...)"
            )
        return InputRoot(input_base)
    try:
        folder = span_folders.resolve_span_folder(base, pattern)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{input_base}: {e}") from None
    except ValueError as e:
        raise ValueError(f"{input_base}: {e}") from None
    warning = folder.warning(base)
    return InputRoot(
        os.path.join(base, folder.path), (f"{input_base}: {warning}",) if warning else ()
    )


def tree_fingerprint(root: str) -> str:
    """A digest of every entry below root: each file's relative path, size and mtime,
    and each entry the listing reports (link, special file, bad name) with its reason.

    The tree is walked as the listing walks it (walk.py), following the links that
    stay inside the root: that covers what either follow_links setting reads, and
    never leaves the root, loops or opens a special file.
    """
    digest = hashlib.sha256()
    tree = walk_tree(root, follow_links=True)
    total = 0
    for relpath in tree.files:
        try:
            size, mtime = _size_and_mtime(os.path.join(root, relpath))
        except (OSError, tf.errors.OpError):  # gone since the walk: still part of the input
            size, mtime = -1, 0
        digest.update(f"{relpath}\0{size}\0{mtime}\n".encode())
        total += max(size, 0)
    for entry in tree.unlisted:
        digest.update(f"{entry.relpath}\0{entry.reason}\n".encode())
    count = len(tree.files) + len(tree.unlisted)
    return f"images:{root},num_files:{count},total_bytes:{total},sha256:{digest.hexdigest()}"


def span_fingerprint(base: str, pattern: str, span: int) -> str:
    """The fingerprint the driver would give span `span` of `pattern` below `base` now.

    Raises:
      FileNotFoundError: no folder holds the span any more.
    """
    folder = span_folders.resolve_span_folder(base, pattern, span=span)
    return tree_fingerprint(os.path.join(base, folder.path))


@dataclasses.dataclass(frozen=True)
class FingerprintChange:
    """How a span folder differs from the one a run read: its file counts, then and now."""

    files_then: int
    files_now: int


def fingerprint_change(then: str, now: str) -> FingerprintChange | None:
    """None when the two fingerprints name the same files (paths, sizes and mtimes),
    wherever the folder was read from; else the counts. An empty `then` (a record from
    before fingerprints were kept) is no change."""
    if not then:
        return None
    # "images:<root>,num_files:N,total_bytes:B,sha256:H"; the root may hold commas.
    then_fields, now_fields = then.rsplit(",", 3)[1:], now.rsplit(",", 3)[1:]
    if then_fields == now_fields:
        return None
    return FingerprintChange(_files(then_fields), _files(now_fields))


def _files(fields: list[str]) -> int:
    return next((int(f.split(":", 1)[1]) for f in fields if f.startswith("num_files:")), -1)


def _size_and_mtime(path: str) -> tuple[int, int]:
    if fileio.is_local(path):
        info = os.stat(fileio.local_path(path))
        return info.st_size, info.st_mtime_ns
    stat = fileio.stat(path)
    return stat.length, stat.mtime_nsec


class ImageFolderInputProcessor(input_processor.FileBasedInputProcessor):
    """TFX's file-based processor, with the span folder found by span_folders (stray
    names ignored with a warning, a padded folder read as it is named) and the whole
    image tree fingerprinted. TFX's driver and our executor ask for the pattern of the
    span and version resolved here: that is the folder found, not one rebuilt from the
    numbers (span-007, not span-7)."""

    _resolved: tuple[str, span_folders.SpanFolder] | None = None

    def resolve_span_and_version(self) -> tuple[int, int | None]:
        (split,) = self._splits
        static_span = None
        if self._range_config and self._range_config.HasField("static_range"):
            static_span = self._range_config.static_range.start_span_number
        folder = span_folders.resolve_span_folder(
            self._input_base_uri, split.pattern, span=static_span
        )
        warning = folder.warning(self._input_base_uri)
        if warning:
            logging.warning("ImageExampleGen: %s", warning)
        self._resolved = (split.pattern, folder)
        self._fingerprint = tree_fingerprint(os.path.join(self._input_base_uri, folder.path))
        return folder.span, folder.version

    def get_pattern_for_span_version(self, pattern: str, span: int, version: int | None) -> str:
        if self._resolved is not None:
            resolved_pattern, folder = self._resolved
            if (pattern, span, version) == (resolved_pattern, folder.span, folder.version):
                return folder.path
        return super().get_pattern_for_span_version(pattern, span, version)


class ImageFolderDriver(tfx_driver.FileBasedDriver):
    def get_input_processor(
        self,
        splits: Iterable[example_gen_pb2.Input.Split],
        range_config: range_config_pb2.RangeConfig | None = None,
        input_base_uri: str | None = None,
    ) -> input_processor.InputProcessor:
        assert input_base_uri
        return ImageFolderInputProcessor(input_base_uri, splits, range_config)
