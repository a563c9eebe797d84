"""The phases of a conversion (and of pointing a model server at a version), and the one
test seam that stops a process in one.

With IMGPIPE_STOP_AT=<phase> set (or <phase>:<SIGNAL>, e.g. writing:TERM), the process
sends itself the signal, SIGKILL by default, when it first reaches that phase; with
<phase>:HANG it waits there for good, as a read that never returns would. The kill
tests use it to stop a real conversion at a known point; unset, `reached` costs one
environment lookup, and it is called once per phase or per batch, never per image.
"""

from __future__ import annotations

import os
import signal
import threading

STOP_AT_ENV = "IMGPIPE_STOP_AT"

LISTING = "listing"  # listing the image folder
CONVERTING = "converting"  # the Beam pipeline converts images into spill files
WRITING = "writing"  # shards are written into the work folder
PUBLISHING = "publishing"  # shards and the metadata files are moving into place
PUBLISHED = "published"  # everything is in place but the manifest, written last
PHASES = (LISTING, CONVERTING, WRITING, PUBLISHING, PUBLISHED)
# Pointing a model server at a version (formats/model_config.py): by a push, after its
# files, or by `imgpipe rollback` (formats/rollback.py).
ROLLING_BACK = "rolling-back"  # the rollback's version is verified; nothing written yet
POINTING = "pointing"  # kserve-models.config is written; models.config, the record, next
POINTED = "pointed"  # models.config names the version; a rollback's history record next
POINTER_PHASES = (ROLLING_BACK, POINTING, POINTED)

# IMGPIPE_STOP_AT's action that waits for good instead of sending a signal.
HANG = "HANG"

_stopped = False


def reached(phase: str) -> None:
    """Marks that the process is in `phase`: stops it there if IMGPIPE_STOP_AT says so."""
    global _stopped
    target = os.environ.get(STOP_AT_ENV)
    if not target or _stopped:
        return
    name, _, signal_name = target.partition(":")
    if name == phase:
        _stopped = True
        if signal_name == HANG:
            threading.Event().wait()
        os.kill(os.getpid(), signal.Signals[f"SIG{signal_name or 'KILL'}"])
