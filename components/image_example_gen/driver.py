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

from imgpipe.components.common import fileio
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
