"""The record holder: the best model this serving folder ever served, against which every
candidate is also judged, so that drops that are each within the margin never add up.

Each candidate is held against the champion (what serves now) and the record holder,
re-scored on today's evaluation sets. A push becomes the record holder when it scored at
least as well as the record holder on those sets, image by image, or when its classes
differ from the record holder's (the record moves with the class set: a model of other
classes cannot be held to it). Retention keeps the record holder's version; a rollback
does not move it.

  <serving_dir>/.record-holder.json  {"model_version": 1700000000, "labels": [...],
                                      "since": <time>, "reason": "...", "version": 1}

No TensorFlow here beyond the file seam.
"""

from __future__ import annotations

import dataclasses
import posixpath

from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio

RECORD_FILE = ".record-holder.json"
VERSION = 1
# On the Evaluator's blessing: 1 when the candidate, once pushed, becomes the record
# holder, and why; the Pusher writes the record after the push.
BLESSING_PROPERTY = "becomes_record"
BLESSING_REASON_PROPERTY = "record_reason"


@dataclasses.dataclass(frozen=True)
class RecordHolder:
    """The best model served.

    Attributes:
      model_version: its version folder in the serving folder.
      labels: its classes in id order.
      since: when it became the record holder (seconds since the epoch).
      reason: why, in a few words.
    """

    model_version: int
    labels: tuple[str, ...]
    since: float
    reason: str = ""
    version: int = VERSION


def path_of(serving_dir: str) -> str:
    return posixpath.join(serving_dir, RECORD_FILE)


def read(serving_dir: str) -> tuple[RecordHolder | None, str]:
    """The record holder, and a note when its record cannot be read ("" when it reads,
    or when there is none yet)."""
    path = path_of(serving_dir)
    if not serving_dir or not fileio.exists(path):
        return None, ""
    try:
        text = fileio.read_bytes(path).decode()
        return config_loader.from_document(RecordHolder, text, path, VERSION), ""
    except (OSError, ValueError) as e:
        return None, f"the record holder's record {path} cannot be read ({e})"


def write(serving_dir: str, holder: RecordHolder) -> None:
    fileio.write_atomic(path_of(serving_dir), config_loader.to_document(holder).encode())
