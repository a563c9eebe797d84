"""Ends the imgpipe process as Python's own exit does, short of tearing the interpreter down.

A command that imported TensorFlow spends 1.3-1.4 s after its work in the interpreter's
finalization, which frees module by module what the kernel frees at once when the process
ends (measured: `imgpipe convert` of 10 photos, 4.1-4.4 s in all; benchmarks/cli_start.py).
`end_process` does what CPython's exit does before that point, in its order, then ends the
process: non-daemon threads are joined, the exit handlers run (last registered first, so a
command's temporary folder still goes after its libraries' handlers), and the standard
streams are flushed. After a stop signal (pipelines/termination.py) the threads of the
abandoned work are not waited for: a library thread the stop cut off may never end.

Two private names of the standard library, checked against CPython 3.13: the functions
Py_FinalizeEx calls for the first two steps.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

from imgpipe.pipelines import termination


def end_process(code: int) -> NoReturn:
    termination.ending(code)
    if termination.received() is None:
        with termination.joining():  # a signal now cuts the wait short
            threading._shutdown()  # type: ignore[attr-defined]  # waits for non-daemon threads
    atexit._run_exitfuncs()  # runs the handlers and clears them: they run once
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, or a stream closed by a handler
            pass
    os._exit(code)


def exit_code(error: SystemExit) -> int:
    """The status Python gives a process that ends with `error` (sys.exit's argument)."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1
