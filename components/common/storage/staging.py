"""Local copies of object-store files for TensorFlow, which cannot open s3:// here, nor
gs:// on any endpoint but Google's (see object_store.py).

Reading: the Trainer and the Evaluator copy a split's shards to a local folder once
(stage_files), and tf.data reads them from there at local-disk speed for every epoch;
saved models are copied the same way (local_copy). The cost is one sequential download
of the split, and its size in free local disk, checked before the first byte is copied.

TensorFlow writes (SavedModel, checkpoints, TensorBoard events) have the same limit:
those bound for an object store are written to a local folder and copied there after
(local_folder), so TensorBoard sees a run's logs when the run ends, not while it runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Sequence

from imgpipe.components.common.storage import fileio, object_store

# Room left free beside the copies, for checkpoints and TensorFlow's own files.
HEADROOM_BYTES = 256 << 20


class NotEnoughLocalSpaceError(ValueError):
    """The shards do not fit on the local disk: a user error, whose line says how much
    room is needed and where."""


def needs_staging(files: Sequence[str]) -> bool:
    return any(object_store.is_object_store(path) for path in files)


def stage_files(files: Sequence[str], folder: str, name: str) -> tuple[str, ...]:
    """The files, those on an object store copied into `folder` (local ones stay).

    Args:
      files: the paths, in order; the copies keep it.
      folder: a local folder for the copies.
      name: how errors name the files, e.g. "s3://b/examples split 'train'".

    Raises:
      NotEnoughLocalSpaceError: the copies, and HEADROOM_BYTES, do not fit in `folder`.
    """
    sizes = {path: fileio.size(path) for path in files if object_store.is_object_store(path)}
    if not sizes:
        return tuple(files)
    needed = sum(sizes.values()) + HEADROOM_BYTES
    os.makedirs(folder, exist_ok=True)
    free = fileio.free_bytes(folder)
    if free is not None and free < needed:
        raise NotEnoughLocalSpaceError(
            f"{name}: copying it to {folder} needs {needed} bytes free there, and {free} "
            "are; free some, or set TMPDIR to a larger local disk"
        )
    started = time.monotonic()
    local = []
    for index, path in enumerate(files):
        if path not in sizes:
            local.append(path)
            continue
        target = os.path.join(folder, f"{index:05d}-{os.path.basename(path)}")
        fileio.copy(path, target, overwrite=True)
        local.append(target)
    seconds = time.monotonic() - started
    logging.info(
        "%s: copied %d shards (%d bytes) to %s in %.1f s (%.1f MB/s)",
        name,
        len(sizes),
        sum(sizes.values()),
        folder,
        seconds,
        sum(sizes.values()) / max(seconds, 1e-9) / 1e6,
    )
    return tuple(local)


@contextlib.contextmanager
def local_copy(uri: str, prefix: str = "imgpipe-") -> Iterator[str]:
    """A path TensorFlow can read for the file or folder `uri`: `uri` itself unless it
    is on an object store; then a local temporary copy, removed when the block ends."""
    if not object_store.is_object_store(uri):
        yield uri
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        local = os.path.join(folder, os.path.basename(uri.rstrip("/")))
        if fileio.isdir(uri):
            fileio.copy_tree(uri, local)
        else:
            fileio.copy(uri, local)
        yield local


@contextlib.contextmanager
def local_folder(uri: str, prefix: str = "imgpipe-") -> Iterator[str]:
    """A folder TensorFlow can write for `uri`: `uri` itself unless it is on an object
    store; then a local temporary folder, whose files are copied to `uri` when the block
    ends without an error, and which is removed either way."""
    if not object_store.is_object_store(uri):
        yield uri
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield folder
        fileio.copy_tree(folder, uri)


class ThroughLocalCopies:
    """A mixin for a TFX executor that reads its object-store inputs from local copies
    and writes its object-store outputs to local folders copied there after: for TFX's
    own executors that write through TensorFlow (StatisticsGen, SchemaGen,
    ExampleValidator). The artifacts keep their object-store URIs in the metadata."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        original: dict[str, str] = {}  # local copy -> object-store URI
        moved = []
        with contextlib.ExitStack() as stack:
            for copies, artifacts in ((local_copy, input_dict), (local_folder, output_dict)):
                for artifact in (a for group in artifacts.values() for a in group):
                    if object_store.is_object_store(artifact.uri):
                        uri = artifact.uri
                        artifact.uri = stack.enter_context(copies(uri))
                        original[artifact.uri] = uri
                        moved.append(artifact)
            try:
                result = super().Do(input_dict, output_dict, exec_properties)  # type: ignore[misc]
            finally:
                for artifact in moved:
                    artifact.uri = original[artifact.uri]
            # An ExecutorOutput (ExampleValidator's) names its artifacts by the local URIs.
            for group in getattr(result, "output_artifacts", {}).values():
                for artifact in group.artifacts:
                    artifact.uri = original.get(artifact.uri, artifact.uri)
            return result
