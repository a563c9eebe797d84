"""One folder for a command's temporary files, removed when its process exits.

The libraries under a command leave files in the temporary folder that nothing removes:
Beam's portable runners a folder per job (the stager's submission_environment_dependencies
.txt, the job server's beam-temp), TensorFlow its AutoGraph modules until the process
exits. A recurring run would pile them up. While a command runs, tempfile and the
processes it starts (TMPDIR) use a folder of its own inside the usual one; the folder is
removed when the process exits, however the command ended short of SIGKILL. At exit, not
at the command's end: the libraries' own exit handlers run first (Beam's stops its job
server and removes its folder, which must still be there).

A command killed by SIGKILL (the OOM killer, a scheduler's timeout) cannot remove its
folder, so each command holds an exclusive lock on a file in its own (flock, released by
the kernel when the process and the children it forked are gone) and removes, as it
starts, every sibling folder whose lock it can take: the folder of a command that is
gone, whichever pid namespace it ran in. A folder without a lock file (a command between
making its folder and locking it, or one of a version before the lock) is left alone.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator

PREFIX = "imgpipe-run-"
ENV = "TMPDIR"
OWNER_FILE = ".owner"
# The open lock files of this process's folders: the lock lasts as long as they are open.
_held: list[int] = []


@contextlib.contextmanager
def command_folder() -> Iterator[str | None]:
    """Makes a new folder the temporary folder while this lasts; it goes at exit.

    Yields the folder, or None (nothing changed) when the temporary folder takes no new
    folder: the command then runs as it would have, and fails, if it does, on its own.
    """
    with contextlib.suppress(OSError):  # what it cannot list or remove stays, as before
        remove_gone_commands_folders(tempfile.gettempdir())
    try:
        folder = tempfile.mkdtemp(prefix=PREFIX)
        _held.append(_lock(os.path.join(folder, OWNER_FILE)))
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


def _lock(path: str, create: bool = True) -> int:
    """Opens `path` and holds an exclusive lock on it. Raises BlockingIOError when another
    process holds it, FileNotFoundError when it is not there and not to be created."""
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def remove_gone_commands_folders(parent: str) -> list[str]:
    """Removes the folders in `parent` of commands that are gone; returns them."""
    removed = []
    for name in sorted(os.listdir(parent)):
        folder = os.path.join(parent, name)
        if not name.startswith(PREFIX) or not os.path.isdir(folder):
            continue
        try:
            fd = _lock(os.path.join(folder, OWNER_FILE), create=False)
        except OSError:
            continue  # its command is running, it has no lock file, or it is not ours
        try:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed
