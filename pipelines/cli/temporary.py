"""One folder for a command's temporary files, removed when its process exits.

The libraries under a command leave files in the temporary folder that nothing removes:
Beam's portable runners a folder per job (the stager's submission_environment_dependencies
.txt, the job server's beam-temp), TensorFlow its AutoGraph modules until the process
exits. A recurring run would pile them up. While a command runs, tempfile and the
processes it starts (TMPDIR) use a folder of its own inside the usual one; the folder is
removed when the process exits, however the command ended short of SIGKILL. At exit, not
at the command's end: the libraries' own exit handlers run first (Beam's stops its job
server and removes its folder, which must still be there).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

PREFIX = "imgpipe-run-"
ENV = "TMPDIR"


@contextlib.contextmanager
def command_folder() -> Iterator[str | None]:
    """Makes a new folder the temporary folder while this lasts; it goes at exit.

    Yields the folder, or None (nothing changed) when the temporary folder takes no new
    folder: the command then runs as it would have, and fails, if it does, on its own.
    """
    try:
        folder = tempfile.mkdtemp(prefix=PREFIX)
    except OSError:
        yield None
        return
    # Exit handlers run last-registered first, so this one runs after every handler the
    # command's libraries register.
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    saved_tempdir, saved_env = tempfile.tempdir, os.environ.get(ENV)
    tempfile.tempdir = folder
    os.environ[ENV] = folder
    try:
        yield folder
    finally:
        tempfile.tempdir = saved_tempdir
        if saved_env is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved_env
