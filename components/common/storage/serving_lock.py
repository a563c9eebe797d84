"""One retrain at a time per serving directory: a lease that retrains sharing it take
in turn, on local disks and on object stores.

The ChampionResolver at the head of a run takes the lease before it reads the champion,
and the run holds it until the Pusher gives it back after the push (the Evaluator does
when it does not bless, and any step of ours that fails does). A second retrain's
resolver waits for it, so its drift check, warm start and evaluation all see the first
one's push. A retried resolver of the same run (the same output) takes its own lease
back at once. The Pusher checks the serving head again before pushing (see
components/pusher/executor.py): the last line of defence should a lease be broken under
a slow run.

No lease outlives a stopped run:
- While one of the run's steps works, it *holds* the lease (`hold`): the lease names its
  host and pid, and a thread renews its heartbeat every BEAT_SECONDS. A waiter on the
  same host breaks it as soon as that pid is gone (a SIGKILL); anywhere, once the
  heartbeat is STALE_SECONDS old.
- Between steps no process works for the run; the lease then lasts LEASE_SECONDS after
  the last step ended (time for the orchestrator to start the next one).
- Waiting is said on the console (a warning), with the holder and the longest wait.

The lease is one small JSON file, LOCK_FILE, in the serving directory (not a number, so
model servers ignore it), created only if absent: locally a hard link, which fails when
the name exists; on S3 a conditional PUT (`If-None-Match: *`); on GCS a write with
`ifGenerationMatch=0`. Breaking an expired lease is itself claimed by creating a marker
named after that lease's token, so of two waiters only one breaks it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import posixpath
import threading
import time
import uuid
from collections.abc import Iterator

from absl import logging

from imgpipe.components.common.runtime import processes
from imgpipe.components.common.storage import fileio

LOCK_FILE = ".decision-lock.json"
# Taking over an expired lease: a marker per lease, so one waiter alone breaks it.
BROKEN_SUFFIX = ".broken-"
# Between two steps of the holding run: long enough for an orchestrator to schedule the
# next step (a pod on a node being scaled up).
LEASE_SECONDS = 3600.0
# While a step works: how often it renews the heartbeat, and how old a heartbeat may be
# before the holder counts as gone.
BEAT_SECONDS = 20.0
STALE_SECONDS = 120.0
# On the Evaluator's blessing, for the Pusher: the lease's token, the newest complete
# version when the champion was picked (-1: none), which must still be the newest, and
# the version models.config named then (-1: none), which it must still name.
LEASE_PROPERTY = "serving_lease"
SERVING_HEAD_PROPERTY = "serving_head"
SERVED_PROPERTY = "served_version"
NO_HEAD = -1
# On the Pusher's PushedModel when it refused: the one line saying why.
REFUSED_PROPERTY = "refused"
# On the Pusher's PushedModel when it removed what a killed push left: one line each.
CLEARED_PROPERTY = "cleared"
# How often a waiting retrain looks at the lease again, and says it still waits.
POLL_SECONDS = 5.0
SAY_EVERY_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Lease:
    """Who decides for a serving directory, until when (seconds since the epoch).

    Attributes:
      owner: the run's resolver output (a retried resolver takes its lease back).
      token: this taking of the lease.
      expires: when it lapses unless renewed.
      host, pid: the process that last worked for it (in a local run, the runner).
      beat: the time of that process's last heartbeat.
      working: a step works now and beats; false between steps.
    """

    owner: str
    token: str
    expires: float
    host: str = ""
    pid: int = 0
    beat: float = 0.0
    working: bool = False


def gone(held: Lease, now: float | None = None) -> str:
    """Why the holder of `held` is gone ("" while it may still be working)."""
    now = time.time() if now is None else now
    if held.expires <= now:
        return "it expired"
    if held.pid:
        if processes.ended_here(held.host, held.pid):
            return f"its holder, pid {held.pid} on {held.host}, has ended"
        if held.working and now - held.beat > STALE_SECONDS:
            silent = now - held.beat
            return (
                f"its holder, pid {held.pid} on {held.host}, sent no heartbeat for {silent:.0f} s"
            )
    return ""


def path_of(serving_dir: str) -> str:
    return posixpath.join(serving_dir, LOCK_FILE)


def _read(path: str) -> Lease | None:
    """The lease in `path`; None when there is none. An unreadable lease (it cannot be
    written partly, but may be edited by hand) counts as expired."""
    try:
        document = json.loads(fileio.read_bytes(path))
        return Lease(
            str(document["owner"]),
            str(document["token"]),
            float(document["expires"]),
            str(document.get("host", "")),
            int(document.get("pid", 0)),
            float(document.get("beat", 0.0)),
            bool(document.get("working", False)),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return Lease("(unreadable)", f"unreadable-{fileio.stat(path).mtime_nsec}", 0.0)


def current(serving_dir: str) -> Lease | None:
    """The lease held on serving_dir, expired or not; None when there is none."""
    return _read(path_of(serving_dir))


def _document(lease: Lease) -> bytes:
    return json.dumps(dataclasses.asdict(lease), sort_keys=True).encode()


def acquire(
    serving_dir: str,
    owner: str,
    lease_seconds: float = LEASE_SECONDS,
    notes: list[str] | None = None,
) -> Lease:
    """Takes the lease on serving_dir for `owner`, waiting while another owner holds one
    whose holder is not gone (see the module docstring); returns it, held by this
    process (pid and heartbeat set: renew it with `hold`).

    Args:
      serving_dir: the serving directory (made if missing).
      owner: who decides; the same owner (a retried step) takes its lease back.
      lease_seconds: how long the lease lasts between steps unless renewed.
      notes: where a lease taken over from a run that is gone is named, one line, for
        the run's summary (a warning in the log too).
    """
    lease = _take(serving_dir, owner, lease_seconds, notes, wait=True)
    assert lease is not None  # a waiting take returns only with the lease
    return lease


def try_acquire(serving_dir: str, owner: str, lease_seconds: float = LEASE_SECONDS) -> Lease | None:
    """Takes the lease as `acquire` does, or returns None at once when another run that
    is not gone holds it (work that can wait for the next run, such as a collection)."""
    return _take(serving_dir, owner, lease_seconds, None, wait=False)


def _take(
    serving_dir: str,
    owner: str,
    lease_seconds: float,
    notes: list[str] | None,
    wait: bool,
) -> Lease | None:
    fileio.makedirs(serving_dir)
    path = path_of(serving_dir)
    said, said_at, started = "", 0.0, time.time()
    while True:
        now = time.time()
        lease = Lease(
            owner,
            uuid.uuid4().hex,
            now + lease_seconds,
            processes.this_host(),
            os.getpid(),
            now,
            True,
        )
        if fileio.create_new(path, _document(lease)):
            if said:
                logging.warning("%s: the lease is ours after %.0f s", serving_dir, now - started)
            return lease
        held = _read(path)
        if held is None:  # given back in between
            continue
        why = "its own earlier attempt" if held.owner == owner else gone(held, now)
        if why:
            if fileio.create_new(f"{path}{BROKEN_SUFFIX}{held.token}", b""):
                logging.warning("%s: taking over the lease of %s: %s", path, held.owner, why)
                if notes is not None and held.owner != owner:
                    notes.append(f"took over the serving lease of {held.owner}: {why}")
                if _read(path) == held:
                    fileio.remove(path)
            continue
        if not wait:
            return None
        if said != held.token or now - said_at >= SAY_EVERY_SECONDS:
            said, said_at = held.token, now
            working = f"pid {held.pid} on {held.host}" if held.working else "between its steps"
            # A warning, so that the console shows it: a wait that says nothing looks hung.
            logging.warning(
                "%s: waiting for another retrain to finish (%s, %s) for %.0f s so far; it "
                "holds the serving folder until it pushes or stops, at most until %s unless "
                "it works on",
                serving_dir,
                held.owner,
                working,
                now - started,
                time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(held.expires)),
            )
        time.sleep(POLL_SECONDS)


def _renew(serving_dir: str, token: str, working: bool, lease_seconds: float) -> bool:
    """Rewrites the lease with this process and a fresh heartbeat if `token` still
    holds it."""
    path = path_of(serving_dir)
    held = _read(path)
    if held is None or held.token != token:
        return False
    now = time.time()
    renewed = dataclasses.replace(
        held,
        expires=now + lease_seconds,
        host=processes.this_host(),
        pid=os.getpid(),
        beat=now,
        working=working,
    )
    fileio.write_atomic(path, _document(renewed))
    return True


def hand_on(serving_dir: str, token: str, lease_seconds: float = LEASE_SECONDS) -> bool:
    """The step is done and the run goes on: the lease waits for the next step."""
    return _renew(serving_dir, token, False, lease_seconds)


@contextlib.contextmanager
def hold(serving_dir: str, token: str, lease_seconds: float = LEASE_SECONDS) -> Iterator[None]:
    """While the block runs, this process holds the lease `token` (if it still does): its
    pid and a heartbeat every BEAT_SECONDS. After the block the lease waits for the
    run's next step, LEASE_SECONDS at most; a block that raises gives the lease back,
    since the run stops there."""
    if not serving_dir or not token:
        yield
        return
    stop = threading.Event()
    _renew(serving_dir, token, True, lease_seconds)

    def beat() -> None:
        while not stop.wait(BEAT_SECONDS):
            try:
                if not _renew(serving_dir, token, True, lease_seconds):
                    return
            except OSError as e:  # a store that blinked: the next beat tries again
                logging.warning("%s: the lease's heartbeat failed: %s", serving_dir, e)

    thread = threading.Thread(target=beat, name="serving-lease-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        stop.set()
        thread.join()
        release(serving_dir, token)
        raise
    stop.set()
    thread.join()
    hand_on(serving_dir, token, lease_seconds)


def release(serving_dir: str, token: str) -> bool:
    """Gives the lease back if `token` still holds it; True when it did."""
    path = path_of(serving_dir)
    held = _read(path)
    if held is None or held.token != token:
        return False
    fileio.remove(path)
    for name in fileio.list_dir(serving_dir):  # markers of leases broken before
        if name.startswith(LOCK_FILE + BROKEN_SUFFIX):
            fileio.remove(posixpath.join(serving_dir, name))
    return True


# Written and removed at once to prove the serving directory takes writes.
PROBE_PREFIX = ".write-probe-"


class ServingDirError(ValueError):
    """The serving directory cannot be used: one line that names it and the fix."""


def check_writable(serving_dir: str) -> None:
    """Makes the serving directory if missing and proves it takes a write, in seconds,
    before any training: a read-only folder, a missing bucket or refused credentials.

    Raises:
      ServingDirError: the message names the folder, what refused, and the fix.
    """
    probe = posixpath.join(serving_dir, f"{PROBE_PREFIX}{uuid.uuid4().hex}")
    try:
        fileio.makedirs(serving_dir)
        fileio.write_atomic(probe, b"")
        fileio.remove(probe)
    except Exception as e:  # noqa: BLE001 - every store's refusal becomes one line
        detail = " ".join(str(e).split())[:300] or type(e).__name__
        raise ServingDirError(
            f"the serving directory {serving_dir} cannot be written ({detail}): make it "
            "writable for this user, or create the bucket and give these credentials write "
            "access, or point --serving-dir (serving_dir) elsewhere"
        ) from None
