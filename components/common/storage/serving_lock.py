"""One decision at a time per serving directory: a lease that retrains sharing it take
in turn, on local disks and on object stores.

The Evaluator takes the lease before it picks the champion, and the Pusher gives it
back after the push (the Evaluator does, when it does not bless). A second retrain's
Evaluator waits for it, so it is judged against the first one's push. A lease expires
LEASE_SECONDS after it was taken, so a run killed in between holds the schedule up at
most that long; a retried step of the same run (the same candidate model) takes its own
lease back at once. The Pusher checks the serving head again before pushing (see
components/pusher/executor.py): the last line of defence should a lease expire under a
slow run.

The lease is one small JSON file, LOCK_FILE, in the serving directory (not a number, so
model servers ignore it), created only if absent: locally a hard link, which fails when
the name exists; on S3 a conditional PUT (`If-None-Match: *`); on GCS a write with
`ifGenerationMatch=0`. Breaking an expired lease is itself claimed by creating a marker
named after that lease's token, so of two waiters only one breaks it.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import time
import uuid

from absl import logging

from imgpipe.components.common.storage import fileio

LOCK_FILE = ".decision-lock.json"
# Taking over an expired lease: a marker per lease, so one waiter alone breaks it.
BROKEN_SUFFIX = ".broken-"
# Long enough for an Evaluator on a large eval split and a push of a large model.
LEASE_SECONDS = 3600.0
# On the Evaluator's blessing, for the Pusher: the lease's token, and the newest complete
# version when the champion was picked (-1: none), which must still be the newest.
LEASE_PROPERTY = "serving_lease"
SERVING_HEAD_PROPERTY = "serving_head"
NO_HEAD = -1
# On the Pusher's PushedModel when it refused: the one line saying why.
REFUSED_PROPERTY = "refused"
# How often a waiting retrain looks at the lease again.
POLL_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class Lease:
    """Who decides for a serving directory, until when (seconds since the epoch)."""

    owner: str
    token: str
    expires: float


def path_of(serving_dir: str) -> str:
    return posixpath.join(serving_dir, LOCK_FILE)


def _read(path: str) -> Lease | None:
    """The lease in `path`; None when there is none. An unreadable lease (it cannot be
    written partly, but may be edited by hand) counts as expired."""
    try:
        document = json.loads(fileio.read_bytes(path))
        return Lease(str(document["owner"]), str(document["token"]), float(document["expires"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return Lease("(unreadable)", f"unreadable-{fileio.stat(path).mtime_nsec}", 0.0)


def current(serving_dir: str) -> Lease | None:
    """The lease held on serving_dir, expired or not; None when there is none."""
    return _read(path_of(serving_dir))


def acquire(serving_dir: str, owner: str, lease_seconds: float = LEASE_SECONDS) -> Lease:
    """Takes the lease on serving_dir for `owner`, waiting while another owner holds an
    unexpired one; returns it.

    Args:
      serving_dir: the serving directory (made if missing).
      owner: who decides; the same owner (a retried step) takes its lease back.
      lease_seconds: how long the lease lasts unless given back.
    """
    fileio.makedirs(serving_dir)
    path = path_of(serving_dir)
    said = ""
    while True:
        lease = Lease(owner, uuid.uuid4().hex, time.time() + lease_seconds)
        document = json.dumps(dataclasses.asdict(lease), sort_keys=True).encode()
        if fileio.create_new(path, document):
            return lease
        held = _read(path)
        if held is None:  # given back in between
            continue
        if held.owner == owner or held.expires <= time.time():
            why = "its own earlier attempt" if held.owner == owner else "it expired"
            if fileio.create_new(f"{path}{BROKEN_SUFFIX}{held.token}", b""):
                logging.warning("%s: taking over the lease of %s: %s", path, held.owner, why)
                if _read(path) == held:
                    fileio.remove(path)
            continue
        if said != held.token:
            said = held.token
            logging.info(
                "%s: waiting for another retrain's decision (%s), at most until %s",
                serving_dir,
                held.owner,
                time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(held.expires)),
            )
        time.sleep(POLL_SECONDS)


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
