"""`python -m imgpipe.components.trainer.several_workers.join_watchdog PID SECONDS INDEX
ADDRESS...`: ends worker PID, with one line naming the workers it cannot reach, if it
has not joined the cluster within SECONDS.

A separate process, because the wait it bounds cannot be interrupted from inside: while
TensorFlow's leader (worker 0) waits for a missing worker to register, it holds Python's
interpreter lock, so no thread of its own runs. The worker closes this process's stdin
once it has joined (or when it ends), which ends the watch. Standard library only: it
starts in milliseconds.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
from collections.abc import Sequence

# Printed before the one line of a worker's failure, for the process that started it.
ERROR_MARK = "imgpipe-worker-error:"


def answers(address: str, timeout: float = 1.0) -> bool:
    """Whether host:port accepts a TCP connection now."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def worker_name(addresses: Sequence[str], index: int) -> str:
    return f"trainer worker {index} of {len(addresses)} ({addresses[index]})"


def unreachable_line(addresses: Sequence[str], index: int, waited: float) -> str:
    """The one line of worker `index` that could not join the others within `waited`
    seconds: the addresses that do not accept a connection now."""
    silent = [a for i, a in enumerate(addresses) if i != index and not answers(a)]
    who = ", ".join(silent) if silent else "the other workers (they answer, but did not join)"
    return (
        f"{worker_name(addresses, index)} cannot reach {who} within {waited:.0f} s: each "
        f"of the trainer.workers={len(addresses)} workers must be running, and its address "
        "must accept connections from the others"
    )


def main(argv: list[str]) -> int:
    pid, seconds, index, addresses = int(argv[1]), float(argv[2]), int(argv[3]), argv[4:]
    ready, _, _ = select.select([sys.stdin], [], [], seconds)
    if ready:  # closed: the worker joined, or ended
        return 0
    line = unreachable_line(addresses, index, seconds)
    print(f"{ERROR_MARK} {line}", file=sys.stderr, flush=True)
    try:
        os.kill(pid, signal.SIGKILL)  # TensorFlow catches SIGTERM
    except ProcessLookupError:
        pass
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
