"""Room for a conversion on the output filesystem: checked before, explained after.

Until the shards are published, each record is on the output filesystem twice: in the
work folder's spill files and in the staged shard it is copied into. A conversion
therefore needs about twice its output's size free there.

Pass-through output is the size of its input (ratio 1.008 measured), so when input and
output are local the room is checked before anything is written. When images are
re-encoded, the output's size is known only at the end, and object stores report no
free space; then a full disk is explained when it happens: ENOSPC becomes a one-line
NotEnoughSpaceError that says how much room is needed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

from imgpipe.components.common.storage import fileio

# Spill files and staged shards hold every record once each until publishing.
COPIES_BEFORE_PUBLISHING = 2
# The Example around each image's bytes, and the TFRecord framing (1.008 measured).
RECORD_OVERHEAD = 1.01


class NotEnoughSpaceError(ValueError):
    """The output filesystem is too small for the conversion: a user error, whose one
    line says how much room is needed."""


def input_bytes(root: str, relpaths: Iterable[str]) -> int | None:
    """The images' total size; None when they are not local, where sizing them would
    cost a request per file."""
    if not fileio.is_local(root):
        return None
    total = 0
    for relpath in relpaths:
        try:
            total += fileio.size(os.path.join(root, relpath))
        except OSError:
            pass  # unreadable: the conversion skips it, with its reason
    return total


def needed_bytes(source_bytes: int) -> int:
    """Free bytes a conversion of `source_bytes` of images needs on its output filesystem
    when the image bytes are kept (pass-through)."""
    return math.ceil(source_bytes * RECORD_OVERHEAD * COPIES_BEFORE_PUBLISHING)


def check(output_dir: str, needed: int) -> None:
    """Refuses to start a conversion that would not fit on a local output filesystem.

    Raises:
      NotEnoughSpaceError: fewer than `needed` bytes are free there.
    """
    free = fileio.free_bytes(output_dir)
    if free is not None and free < needed:
        raise NotEnoughSpaceError(
            f"{output_dir} is on a filesystem with {human_size(free)} free, but this conversion "
            f"needs about {human_size(needed)} there: {_WHY}; {_FIX}"
        )


def out_of_space(output_dir: str, source_bytes: int | None) -> NotEnoughSpaceError:
    """The one-line error for a conversion that ran out of space, saying how much it needs."""
    example = (
        f" (about {human_size(needed_bytes(source_bytes))} for output the size of its input)"
        if source_bytes is not None
        else ""
    )
    return NotEnoughSpaceError(
        f"no space left on the filesystem of {output_dir}: a conversion needs about twice "
        f"its output's size free there{example}, as {_WHY}; {_FIX}"
    )


_WHY = "the spill files and the staged shards both hold every record until publishing"
_FIX = "free some space, or give an output folder on a larger filesystem"


def human_size(num_bytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes} bytes"
