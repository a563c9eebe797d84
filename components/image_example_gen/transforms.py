"""Converting ImageExampleGen's images: tasks in, pointers to spilled records out.

`ConvertImages` spills each record to a per-bundle file in the work directory and emits
only a small pointer (shards.RecordPointer); `shards.WriteShards` groups the pointers by
shard and writes the shards.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import os
import uuid
from collections.abc import Iterator
from typing import IO

import apache_beam as beam
import tensorflow as tf

from imgpipe.components.common.images.image_header import ImageHeaderError
from imgpipe.components.common.runtime import allocator, cpu, progress
from imgpipe.components.common.runtime.printable import printable
from imgpipe.components.common.storage import fileio
from imgpipe.components.image_example_gen.examples import image_example
from imgpipe.components.image_example_gen.image_codec import ImageDecodeError, convert_image
from imgpipe.components.image_example_gen.options import ImageOptions
from imgpipe.components.image_example_gen.shards import RecordPointer, SkippedFile
from imgpipe.components.image_example_gen.tasks import ConversionTask

SKIPPED_TAG = "skipped"
RECORDS_TAG = "records"


class ImageConversionError(ValueError):
    """A bad image under on_error=fail; the message names the file and the reason."""


@dataclasses.dataclass(frozen=True)
class _Converted:
    task: ConversionTask
    record: bytes | None = None
    bytes_in: int = 0
    reencoded: bool = False
    sha256: str = ""  # of the source bytes: the content split key
    error: str | None = None
    rotated: bool = False
    composited: bool = False


def convert_task(root: str, task: ConversionTask, options: ImageOptions) -> _Converted:
    """Reads and converts one image into its serialized Example, or the reason it can't be.

    Whatever goes wrong with one file becomes that file's reason: one file never stops
    a run (on_error=fail stops it in ConvertImageFn, naming the file).
    """
    try:
        data = fileio.read_regular_file(os.path.join(root, task.relpath), options.max_file_bytes)
    except fileio.NotAnImageFileError as e:
        return _Converted(task, error=str(e))
    except (OSError, tf.errors.OpError) as e:
        reason = e.message if isinstance(e, tf.errors.OpError) else (e.strerror or str(e))
        return _Converted(task, error=f"unreadable: {reason}")
    try:
        image, _ = convert_image(data, options)
        sha256 = hashlib.sha256(data).hexdigest()
        record = image_example(image, task.label_id, task.label, task.relpath, sha256)
    except (ImageHeaderError, ImageDecodeError) as e:
        return _Converted(task, error=str(e))
    except Exception as e:  # anything else one file can cause is its reason too
        return _Converted(task, error=f"cannot convert: {type(e).__name__}: {e}")
    return _Converted(
        task,
        record,
        len(data),
        image.reencoded,
        sha256,
        rotated=image.rotated,
        composited=image.composited,
    )


class ConvertImageFn(beam.DoFn):
    """Converts a batch of images; spills each serialized Example.

    When the options decode every image, a thread pool converts the batch: decoding,
    resizing and encoding release the GIL, so the threads use every core of a worker,
    on any runner. Pass-through converts inline: its work per image (read, header,
    hash, serialize) is mostly Python, and threads measured twice as slow as none.
    """

    def __init__(
        self,
        root: str,
        spill_dir: str,
        options: ImageOptions,
        fail_on_error: bool,
        progress_dir: str | None = None,
        threads: int = 0,
    ):
        self._root = root
        self._spill_dir = spill_dir
        self._options = options
        self._fail_on_error = fail_on_error
        self._progress_dir = progress_dir
        self._threads = threads

    def setup(self) -> None:
        allocator.tune_malloc()
        self._progress = progress.Counter(self._progress_dir)
        self._pool = None
        if self._options.decodes_every_image:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self._threads or cpu.available_cores()
            )

    def teardown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def start_bundle(self) -> None:
        self._spill: IO[bytes] | None = None
        self._spill_path = ""
        self._offset = 0

    def process(self, batch: list[ConversionTask]) -> Iterator:
        """Yields one list of RecordPointers for the batch, and each skipped file."""
        convert = functools.partial(convert_task, self._root, options=self._options)
        pointers = []
        for converted in self._pool.map(convert, batch) if self._pool else map(convert, batch):
            if converted.error is not None:
                yield from self._skip(converted.task, converted.error)
                continue
            record = converted.record
            assert record is not None  # every conversion without an error has one
            if self._spill is None:
                self._spill_path = os.path.join(self._spill_dir, f"{uuid.uuid4().hex}.spill")
                self._spill = fileio.open_file(self._spill_path, "wb")
            self._spill.write(record)
            self._progress.add(1)
            task = converted.task
            pointers.append(
                RecordPointer(
                    task.split,
                    task.relpath,
                    task.label,
                    self._spill_path,
                    self._offset,
                    len(record),
                    converted.bytes_in,
                    converted.reencoded,
                    converted.sha256,
                    converted.rotated,
                    converted.composited,
                )
            )
            self._offset += len(record)
        if pointers:
            yield pointers

    def _skip(self, task: ConversionTask, reason: str) -> Iterator:
        if self._fail_on_error:
            raise ImageConversionError(f"{printable(task.relpath)}: {printable(reason)}")
        self._progress.add(1)
        yield beam.pvalue.TaggedOutput(SKIPPED_TAG, SkippedFile(task.split, task.relpath, reason))

    def finish_bundle(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._progress.flush()


@beam.ptransform_fn
def ConvertImages(  # noqa: N802 - Beam transforms are named like classes
    task_batches: beam.PCollection,
    root: str,
    spill_dir: str,
    options: ImageOptions,
    fail_on_error: bool,
    progress_dir: str | None = None,
) -> beam.pvalue.DoOutputsTuple:
    """Converts batches of ConversionTasks.

    Elements are batches, not images, because Beam's per-element cost (about 0.5 ms
    in-process, measured) would otherwise exceed the cost of storing an image.

    Args:
      progress_dir: a local folder where each worker counts the files it has done, for
        a local command's progress bar (runtime/progress.py); None for none.

    Returns:
      A tuple with RECORDS_TAG (one list of RecordPointer per batch) and SKIPPED_TAG
      (one SkippedFile per bad file).
    """
    return task_batches | "Convert" >> beam.ParDo(
        ConvertImageFn(root, spill_dir, options, fail_on_error, progress_dir)
    ).with_outputs(SKIPPED_TAG, main=RECORDS_TAG)
