"""Progress bars on the terminal: `imgpipe convert`'s conversion, and in `imgpipe run
local` (and `imgpipe demo`) the steps that count their work.

The work counts into a local folder (components/common/runtime/progress.py): the number
of items once it is known, then each Beam worker's count. A daemon thread here sums
them twice a second into a tqdm bar (count, items/s, ETA) written straight to the
user's stderr, around the chatter filter, so that the bar's last line is out before
the command's next line on stdout. There is no bar when stderr is not a terminal (a
pipe, a file, a CI log, a Kubeflow pod's log) or with --no-progress.

In `imgpipe run local` each step gets a folder of its own while it runs, named in
PROGRESS_DIR_ENV; a step whose executor counts (ImageExampleGen: the images converted;
ImageStatistics: the records analysed) shows a bar between its start and end lines,
and the other steps show nothing. StatisticsGen shows no bar: it is TFX's executor, and
its TFDV pipeline has nowhere to count short of patching TFDV's transforms; its start
and end lines are all it shows.

A bar never fails or slows the command: its thread ends on any error of its own, a
worker's count that cannot be written is dropped, and the bar's end waits at most
END_WAIT_S for the thread (a stop by signal, pipelines/termination.py, is bounded).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import threading
from typing import IO, TYPE_CHECKING, Any

from imgpipe.components.common.runtime import progress
from imgpipe.pipelines.cli import chatter

if TYPE_CHECKING:  # local_runner loads TFX, which `imgpipe --help` need not
    from imgpipe.pipelines.local_runner import StepAnnouncer

NO_PROGRESS_FLAG = "--no-progress"
# How often the bar sums the workers' counts.
POLL_S = 0.5
# The most a bar's end waits for its thread to draw the last line: the thread is a
# daemon, so one that does not answer (a terminal that takes no output) is left behind.
END_WAIT_S = 2.0


def add_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        NO_PROGRESS_FLAG,
        action="store_true",
        help="no progress bar (there is none when stderr is not a terminal)",
    )


def wanted(args: argparse.Namespace) -> bool:
    """A bar is shown: stderr is a terminal, and --no-progress was not given."""
    return not args.no_progress and os.isatty(chatter.user_stderr())


class ProgressBar:
    """Sums the workers' counts in a local folder into a tqdm bar on the terminal.

    A context manager: the folder (`directory`, None when the bar is off) exists inside
    the block only. The bar appears once the work has written its total, and its last
    line ends before the block does; it is removed however the block ends.
    """

    def __init__(self, enabled: bool):
        self._enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: IO[str] | None = None
        self.directory: str | None = None

    def __enter__(self) -> ProgressBar:
        if not self._enabled:
            return self
        from tqdm import tqdm  # here, on the main thread, not while the work imports

        try:
            self.directory = tempfile.mkdtemp(prefix="imgpipe-progress-")
            self._stream = os.fdopen(os.dup(chatter.user_stderr()), "w", errors="replace")
        except OSError:  # no bar, and the work goes on without one
            self.end()
            return self
        self._thread = threading.Thread(
            target=self._watch,
            args=(tqdm, self.directory, self._stream),
            name="imgpipe-progress",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end()

    def end(self) -> None:
        """Draws the bar's last line and removes the folder; waits at most END_WAIT_S."""
        self._stop.set()
        try:
            if self._thread is not None:
                self._thread.join(END_WAIT_S)
            if self._stream is not None and not (self._thread and self._thread.is_alive()):
                with contextlib.suppress(OSError):
                    self._stream.close()
        finally:
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
            self._thread = self._stream = self.directory = None

    def _watch(self, tqdm: Any, directory: str, stream: IO[str]) -> None:
        bar = None
        try:
            while True:
                stopping = self._stop.wait(POLL_S)
                found = progress.read(directory)
                if found is not None:
                    if bar is None:
                        bar = tqdm(
                            total=found.total,
                            desc=found.what,
                            unit="img",
                            file=stream,
                            smoothing=0.1,
                            dynamic_ncols=_has_width(stream),
                        )
                    if found.done > bar.n:
                        bar.update(found.done - bar.n)
                if stopping:
                    return
        except Exception:  # a bar that fails is gone; the work goes on
            return
        finally:
            if bar is not None:
                with contextlib.suppress(Exception):
                    bar.close()


def _has_width(stream: IO[str]) -> bool:
    """The terminal says how wide it is: a new pseudo-terminal says 0 columns until its
    owner sets its size, and a bar that fits 0 columns is empty (tqdm then draws its
    default width)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except OSError:
        return False


class StepBars:
    """`imgpipe run local`'s bars: wraps the step announcer so that each step runs with
    a ProgressBar of its own, its folder named in PROGRESS_DIR_ENV, and the bar ends
    before the step's end line. A context manager; inside, the variable is set only
    while a step runs, and only when the bar is on.

    Example:
      with StepBars(progress.wanted(args), print_step) as announce:
          local_runner.run(config, announce=announce)
    """

    def __init__(self, enabled: bool, announce: StepAnnouncer):
        self._enabled = enabled
        self._announce = announce
        self._bar: ProgressBar | None = None
        self._saved: str | None = None

    def __enter__(self) -> StepAnnouncer:
        self._saved = os.environ.pop(progress.PROGRESS_DIR_ENV, None)
        return self.announce

    def __exit__(self, *exc_info: object) -> None:
        self._end_bar()
        if self._saved is not None:
            os.environ[progress.PROGRESS_DIR_ENV] = self._saved

    def announce(self, step: str, event: str, seconds: float | None) -> None:
        self._end_bar()  # the last line of the step's bar comes before its end line
        self._announce(step, event, seconds)
        if event == "started" and self._enabled:
            self._bar = ProgressBar(enabled=True).__enter__()
            if self._bar.directory is not None:
                os.environ[progress.PROGRESS_DIR_ENV] = self._bar.directory

    def _end_bar(self) -> None:
        bar, self._bar = self._bar, None
        os.environ.pop(progress.PROGRESS_DIR_ENV, None)
        if bar is not None:
            bar.end()
