"""Resolves {SPAN}/{VERSION} in the input path and fingerprints the image tree.

TFX's FileBasedDriver fingerprints the files a glob matches; an image folder nests
files below label folders, so this driver fingerprints the whole tree (every file's
path, size and mtime), walked as the listing walks it. A new, changed or removed
image changes the fingerprint, and with it TFX's cache key, so the component re-runs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

import tensorflow as tf
from tfx.components.example_gen import driver as tfx_driver
from tfx.components.example_gen import input_processor
from tfx.proto import example_gen_pb2, range_config_pb2

from imgpipe.components.common.storage import fileio
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


def resolve_input_root(input_base: str) -> str:
    """The folder a run reads: `input_base` with {SPAN}/{VERSION} resolved to the latest
    span (and its latest version), exactly as the driver resolves them; a path without
    patterns is returned as given.

    Raises:
      FileNotFoundError: the folder, or the patterns' parent, does not exist, or no
        folder matches the patterns. The message is one line that names the path.
    """
    base, pattern = split_input_base(input_base)
    if "{" not in pattern:
        if not fileio.isdir(input_base):
            raise FileNotFoundError(
                f"{input_base}: no such folder; give the image folder "
                "(root/<label>/... or root/<split>/<label>/...)"
            )
        return input_base
    if not fileio.isdir(base):
        raise FileNotFoundError(
            f"{input_base}: {base}, the folder that holds the spans, does not exist; "
            f"create it and put each span in it ({_first(pattern)}, ...)"
        )
    split = example_gen_pb2.Input.Split(name="images", pattern=pattern)
    processor = input_processor.FileBasedInputProcessor(base, [split], None)
    try:
        span, version = processor.resolve_span_and_version()
    except ValueError as e:
        raise FileNotFoundError(
            f"{input_base}: no folder in {base} matches {pattern}; put each span in a "
            f"folder of {base} named as the pattern says ({_first(pattern)}, ...)"
        ) from e
    return os.path.join(base, processor.get_pattern_for_span_version(pattern, span, version))


def _first(pattern: str) -> str:
    """The pattern's first span: span-{SPAN}/v{VERSION} -> span-1/v1."""
    return pattern.replace("{SPAN}", "1").replace("{VERSION}", "1")


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


def _size_and_mtime(path: str) -> tuple[int, int]:
    if fileio.is_local(path):
        info = os.stat(fileio.local_path(path))
        return info.st_size, info.st_mtime_ns
    stat = fileio.stat(path)
    return stat.length, stat.mtime_nsec


class ImageFolderInputProcessor(input_processor.FileBasedInputProcessor):
    def resolve_span_and_version(self) -> tuple[int, int | None]:
        span, version = super().resolve_span_and_version()
        (split,) = self._splits
        pattern = self.get_pattern_for_span_version(split.pattern, span, version)
        self._fingerprint = tree_fingerprint(os.path.join(self._input_base_uri, pattern))
        return span, version


class ImageFolderDriver(tfx_driver.FileBasedDriver):
    def get_input_processor(
        self,
        splits: Iterable[example_gen_pb2.Input.Split],
        range_config: range_config_pb2.RangeConfig | None = None,
        input_base_uri: str | None = None,
    ) -> input_processor.InputProcessor:
        assert input_base_uri
        return ImageFolderInputProcessor(input_base_uri, splits, range_config)
