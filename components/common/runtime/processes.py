"""Whether a process named by host and pid (in a lease or a run marker) may still run."""

from __future__ import annotations

import errno
import os
import socket


def this_host() -> str:
    """The name a process of this machine records as its host."""
    return socket.gethostname()


def ended_here(host: str, pid: int) -> bool:
    """True when `pid` ran on this machine and has ended; a process of another machine
    is never judged ended from here."""
    if host != this_host():
        return False
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno != errno.EPERM
    return False
