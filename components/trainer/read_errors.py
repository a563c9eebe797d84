"""Which shard a failed read of the input pipeline came from.

tf.data only knows that a record was bad or that the count was off; on failure these
read every shard of the split again to name the one that is corrupt, truncated or
miscounted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from imgpipe.components.common.formats.artifacts import ShardReadError
from imgpipe.components.trainer.input import READ_BUFFER_BYTES, SplitSource


def count_records(path: str, compression: str) -> int:
    """Records in one shard; raises tf.errors.OpError if it is corrupt or truncated."""
    dataset = tf.data.TFRecordDataset(path, compression, READ_BUFFER_BYTES)
    return int(dataset.reduce(np.int64(0), lambda count, _: count + 1))


def find_read_error(source: SplitSource) -> ShardReadError | None:
    """Reads every shard of `source` to name the one that is corrupt or miscounted."""
    compression = source.compression
    counts = {}
    for path in source.files:
        try:
            counts[path] = count_records(path, compression)
        except tf.errors.OpError as e:
            return ShardReadError(
                f"{path}: corrupt or truncated shard of {source.name} "
                f"({e.message.strip()}); re-run ImageExampleGen for this span"
            )
    total = sum(counts.values())
    if source.records is not None and total != source.records:
        per_shard = ", ".join(f"{os.path.basename(p)}: {n}" for p, n in counts.items())
        return ShardReadError(
            f"{source.name}: the shards hold {total} records but ImageExampleGen wrote "
            f"{source.records}; a shard was truncated or replaced ({per_shard})"
        )
    return None


@contextlib.contextmanager
def named_read_errors(*sources: SplitSource) -> Iterator[None]:
    """Turns a tf.data read failure inside the block into a ShardReadError naming the file.

    The pipeline itself only knows that a record was bad or that the count was off;
    on failure this re-reads the shards to find which one. Errors not caused by the
    shards are re-raised unchanged.
    """
    try:
        yield
    except tf.errors.OpError as e:
        for source in sources:
            error = find_read_error(source)
            if error is not None:
                raise error from e
        raise
