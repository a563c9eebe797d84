"""How the tests wait: for the event, never for a time (docs/development.md, "Waiting in
tests").

A test that needs something to have happened waits for that thing: a line on a pipe, a
file, a port that answers, a threading.Event, a thread joined, or a condition polled
until it holds (`until`). A sleep that orders events ("give the server half a second")
is a race that a busy machine loses. What is left of the wall clock is the give-up bound
of each wait, which decides only how long a broken run takes to fail: each bound below
comes from a figure measured on a busy machine (the tests at `nice -n 19` with two
CPU-bound processes beside them, on 2 cores already at load 12-20: slower than CI), with
a wide margin.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Something that happens at once, given the CPU: a lease's heartbeat, a log line from a
# thread, a stop's deadline thread deciding, a signal reaching a child, a child's exit
# after SIGKILL, a shell past its first line, a cluster's processes gone once its command
# has ended, a Spark application listed as completed. Measured: under 0.4 s (the slowest,
# a Spark application listed, 0.3 s, and a trainer's exit after SIGKILL, 0.4 s).
AT_ONCE_S = 60.0
# A short command of this project, or a tool it runs, on tiny inputs, that runs no job:
# an argument error, --help, `version`, bin/build-image, bin/pin-base-images and
# bin/k8s-images against a fake registry, a chroot script, a headless browser printing
# one page, compileall, a nested pytest that skips, the import of every front door.
# Measured: 0.1-26 s (the slowest, the imports of every front door, 26 s).
COMMAND_S = 300.0
# A command that runs a small job: a conversion of a few hundred images in a fresh
# process (killed or stopped at a phase, or whole), and a two-worker training's wait
# for its first backups. Measured: 8-38 s for a conversion; the two-worker test, killed
# at its backup and rerun, 164 s in all.
JOB_S = 600.0
# A training in a fresh process (MirroredStrategy on two logical CPUs, a few dozen
# steps; one stopped and resumed): measured 248 s and 438 s, where the old bounds were
# 240 s and 600 s. Past the component tier's hang bound (pyproject.toml, 900 s): such a
# test has its own, TRAINING_TEST_S, for the training and the fixtures before it. Also
# the wait for two worker containers to start training (inside the container tier's
# 3600 s hang bound).
TRAINING_S = 2400.0
TRAINING_TEST_S = TRAINING_S + JOB_S
# Polls of `until`: often enough that a test does not wait noticeably longer than the
# event, rarely enough to cost nothing beside it.
POLL_S = 0.02


def until(condition: Callable[[], T], what: str, give_up: float = AT_ONCE_S) -> T:
    """Polls `condition` until it returns something true, and returns that.

    Raises:
      AssertionError: naming `what`, when `give_up` seconds pass first.
    """
    deadline = time.monotonic() + give_up
    while True:
        if value := condition():
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {give_up:.0f} s")
        time.sleep(POLL_S)
