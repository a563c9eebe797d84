"""Library chatter off by default: what a user reads is the command's own output.

TensorFlow, XLA, ml-metadata and ZetaSQL log from C++ straight to file descriptor 2 (the
oneDNN and CUDA notes, `cuInit` failures on a machine with no GPU, absl's "before
InitializeLog" banner), in this process and in the Beam workers it starts; Python
libraries add deprecation warnings. None of it is the user's to act on. Without
--verbose, those lines are dropped on their way to stderr and everything else passes:
the one-line errors, the summaries, and any line not known as chatter. The progress bars
go around the filter, straight to the user's stderr (`user_stderr`).

Example:
  with quiet_stderr(enabled=not verbose):
      run_the_command()
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator

VERBOSE_FLAG = "--verbose"
# TensorFlow's deprecation notices (several lines each) below ERROR.
CHATTY_LOGGERS = {"tensorflow": logging.ERROR}
# absl's logger carries the project's own warnings and the libraries' (TFX's and
# ml-metadata's ZetaSQL fallbacks, "Execution 6 failed" before the command's own one-line
# error): only the project's pass.
SHARED_LOGGER = "absl"
_OURS = f"{os.sep}imgpipe{os.sep}"


def _ours_or_fatal(record: logging.LogRecord) -> bool:
    return _OURS in record.pathname or record.levelno >= logging.CRITICAL


VERBOSE_ENV = "IMGPIPE_VERBOSE"

# Lines in absl/glog's format ("I0000 00:00:17956.. 12568 port.cc:153] ...") at INFO,
# WARNING or ERROR; FATAL ones pass. The banner absl prints before its logging is set up.
_CHATTER = re.compile(
    rb"^(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|(?:\x1b\[[0-9;]*m)?(?:WARNING|INFO):(?:absl|tensorflow|root):"
    rb")"
)


def is_chatter(line: bytes) -> bool:
    return _CHATTER.match(line) is not None


# The user's stderr, set aside while quiet_stderr has replaced file descriptor 2.
_user_stderr: int | None = None


def user_stderr() -> int:
    """The file descriptor of the stderr the user reads: the one quiet_stderr set aside
    while it runs, else 2. What writes there goes around the filter, at once: a progress
    bar, whose lines must end before the command's next line on stdout."""
    return 2 if _user_stderr is None else _user_stderr


@contextlib.contextmanager
def quiet_stderr(enabled: bool) -> Iterator[None]:
    """Drops library chatter from file descriptor 2 while the block runs.

    The descriptor itself is replaced by a pipe, so the C++ libraries and the child
    processes that inherit it are filtered too; a thread copies what passes to the real
    stderr, and the block's end restores it and waits for the copy to finish.
    """
    if not enabled:
        yield
        return
    global _user_stderr
    sys.stderr.flush()
    real = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    _user_stderr = real
    copier = threading.Thread(target=_copy, args=(read_end, real), daemon=True)
    copier.start()
    loggers = [logging.getLogger(name) for name in CHATTY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger, level in zip(loggers, CHATTY_LOGGERS.values(), strict=True):
        logger.setLevel(level)
    shared = logging.getLogger(SHARED_LOGGER)
    shared.addFilter(_ours_or_fatal)
    try:
        with warnings.catch_warnings():
            # Libraries' warnings (deprecations, TFX's and Beam's notices); ours stay.
            warnings.filterwarnings("ignore", module=r"^(?!imgpipe)")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        shared.removeFilter(_ours_or_fatal)
        sys.stderr.flush()
        os.dup2(real, 2)
        _user_stderr = None
        copier.join(timeout=5)
        if not copier.is_alive():  # else a child still writes: the copy keeps its fd
            os.close(real)


def _copy(read_end: int, out: int) -> None:
    """Copies lines from read_end to out, without the chatter, until every writer is gone.

    Children that inherited the pipe (Beam's workers) may outlive the block: the copy
    then goes on, daemon, until they exit."""
    pending = b""
    with open(read_end, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            passed = [line + b"\n" for line in lines if not is_chatter(line)]
            # A progress bar redraws with \r and no newline: pass it as it comes.
            if pending and b"\r" in pending and not is_chatter(pending):
                passed.append(pending)
                pending = b""
            if passed:
                _write_all(out, b"".join(passed))
    if pending and not is_chatter(pending):
        _write_all(out, pending)


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:  # the reader of stderr is gone: nothing to show it to
        pass
