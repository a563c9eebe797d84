"""The champion a run is judged against, resolved once: champion.json in a ServedChampion
artifact.

The ChampionResolver at the head of every run reads the serving directory once, with
the checks its strictest reader needs (served_models.find, every byte checksummed), and
writes what it found here. ImageStatistics (drift and the label audit), the Trainer (the
warm start) and the Evaluator (the comparison) read this record, never the serving
directory: one run sees one champion, and the lineage records which. The Pusher still
checks that the serving head and the served version (models.config) are the ones
recorded here before it pushes.

  {"version": 1, "serving_dir": ..., "status": "found", "champion_version": 1700000000,
   "path": ".../1700000000", "labels": [...], "head": 1700000000, "note": "",
   "passed": [...], "lease_token": "...", "served": 1700000000, "served_note": ""}

No TensorFlow here beyond the file seam.
"""

from __future__ import annotations

import contextlib
import dataclasses
import posixpath
from collections.abc import Sequence
from typing import Any

from imgpipe.components.common.formats import acceptances as acceptances_lib
from imgpipe.components.common.formats import record_holder, served_models, spans
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio, serving_lock

CHAMPION_FILE = "champion.json"
VERSION = 1
# Statuses.
FOUND = "found"
NONE = "none"  # nothing pushed yet, or nothing sound left (note says what was passed)
UNREADABLE = "unreadable"  # the serving directory itself could not be listed
NOT_SET = "not_set"  # no serving directory configured


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What the serving directory held when the run began.

    Attributes:
      serving_dir: where it looked ("" when none is set).
      status: FOUND, NONE, UNREADABLE or NOT_SET.
      reason: why there is no champion ("" when found).
      champion_version, path, labels: the champion (None, None, () when none).
      head: the newest complete version, sound or not; the Pusher pushes only while it
        is still the newest.
      note: damaged pushes passed over, or a legacy champion (served_models.Lookup.note).
      passed: those pushes, one entry each.
      lease_token: the serving lease this run holds ("" when none was taken).
      served: the version models.config named (None: none, or unreadable); the Pusher
        pushes only while it still names it, so a rollback during the run refuses it.
      served_note: why models.config was not followed (served_models.Lookup).
      record_version, record_path, record_labels: the record holder (record_holder.py),
        the best model ever served, when it is another version than the champion and
        sound; None, None, () otherwise (the champion then stands for it).
      record_note: why the record holder is not used ("" when it is, or is the champion).
      admitted: the spans admitted to training when the run began, newest first: the
        Trainer's window is chosen from these (spans.py).
      acceptances: the drift accepted against the champion, newest span first:
        ImageStatistics' gate reads these (acceptances.py).
      records_note: the span and acceptance records that could not be read, one line
        each: they admit and accept nothing.
    """

    serving_dir: str
    status: str
    reason: str = ""
    champion_version: int | None = None
    path: str | None = None
    labels: tuple[str, ...] = ()
    head: int | None = None
    note: str = ""
    passed: tuple[served_models.Passed, ...] = ()
    lease_token: str = ""
    served: int | None = None
    served_note: str = ""
    record_version: int | None = None
    record_path: str | None = None
    record_labels: tuple[str, ...] = ()
    record_note: str = ""
    admitted: tuple[spans.AdmittedSpan, ...] = ()
    acceptances: tuple[acceptances_lib.Acceptance, ...] = ()
    records_note: tuple[str, ...] = ()
    version: int = VERSION

    @property
    def model(self) -> served_models.ServedModel | None:
        if self.path is None or self.champion_version is None:
            return None
        return served_models.ServedModel(self.path, self.champion_version, self.labels)

    def lookup(self) -> served_models.Lookup:
        """The same, as served_models.find returns it."""
        return served_models.Lookup(
            self.model, self.passed, self.head, self.serving_dir, self.served, self.served_note
        )

    def describe(self) -> str:
        """One line for a summary: the champion, and what was passed over."""
        if self.status == FOUND:
            text = f"{self.champion_version} ({self.path})"
            return f"{text}; {self.note}" if self.note else text
        return f"none: {self.reason}"


def resolve(serving_dir: str, lease_token: str = "", checksums: bool = True) -> Resolved:
    """Reads the serving directory once: the newest sound push, and what was passed over.

    Args:
      serving_dir: the serving directory; "" for none.
      lease_token: the serving lease the caller holds, recorded for the later steps.
      checksums: checksum every byte of each push inspected (the Evaluator blesses
        against it and a warm start trains from it, so a run asks for this).
    """
    if not serving_dir:
        return Resolved(
            "", NOT_SET, "no serving_dir is set, so there is no served model to compare with"
        )
    try:
        lookup = served_models.find(serving_dir, checksums=checksums)
    except (OSError, ValueError) as e:
        return Resolved(
            serving_dir,
            UNREADABLE,
            f"the serving directory {serving_dir} cannot be read: {e}",
            lease_token=lease_token,
        )
    champion = lookup.model
    if champion is None:
        reason = lookup.note or f"no model has been pushed to {serving_dir} yet"
        none = Resolved(
            serving_dir,
            NONE,
            reason,
            head=lookup.head,
            note=lookup.note,
            passed=lookup.passed,
            lease_token=lease_token,
            served=lookup.served,
            served_note=lookup.served_note,
        )
        return with_records(none)
    found = Resolved(
        serving_dir,
        FOUND,
        "",
        champion.version,
        champion.path,
        champion.labels,
        lookup.head,
        lookup.note,
        lookup.passed,
        lease_token,
        lookup.served,
        lookup.served_note,
    )
    return with_records(with_record_holder(found, checksums))


def with_records(resolved: Resolved) -> Resolved:
    """`resolved` with the serving folder's span records and the champion's acceptances,
    read once for the run."""
    problems: list[str] = []
    admitted = spans.admitted(resolved.serving_dir, problems)
    accepted = (
        acceptances_lib.recorded(resolved.serving_dir, resolved.champion_version, problems)
        if resolved.champion_version is not None
        else []
    )
    return dataclasses.replace(
        resolved,
        admitted=tuple(admitted),
        acceptances=tuple(accepted),
        records_note=tuple(problems),
    )


def release_run_lease(uri: str | None) -> None:
    """Gives back the serving lease the run's ChampionResolver took (its record at
    `uri`), if the run still holds it: every runner calls this when a run ends, however
    it ended. A resolver that did not finish took nothing."""
    if not uri:
        return
    try:
        resolved = read(uri)
    except (OSError, ValueError):
        return
    if resolved.lease_token:
        serving_lock.release(resolved.serving_dir, resolved.lease_token)


def with_record_holder(resolved: Resolved, checksums: bool = True) -> Resolved:
    """`resolved` with the record holder, when it is a sound version other than the
    champion; a record that names a version gone or damaged is said so, and the champion
    stands for it."""
    holder, note = record_holder.read(resolved.serving_dir)
    if holder is None or holder.model_version == resolved.champion_version:
        return dataclasses.replace(resolved, record_note=note)
    path = posixpath.join(resolved.serving_dir, str(holder.model_version))
    if holder.model_version not in served_models.complete_versions(resolved.serving_dir):
        return dataclasses.replace(
            resolved,
            record_note=f"record holder {holder.model_version} is gone; the champion stands for it",
        )
    model, problem = served_models.inspect(path, holder.model_version, checksums)
    if model is None:
        why = problem.reason if problem is not None else "unreadable"
        return dataclasses.replace(
            resolved,
            record_note=f"record holder {holder.model_version} is damaged ({why}); the "
            "champion stands for it",
        )
    return dataclasses.replace(
        resolved, record_version=model.version, record_path=model.path, record_labels=model.labels
    )


def write(uri: str, resolved: Resolved) -> None:
    fileio.makedirs(uri)
    fileio.write_atomic(
        posixpath.join(uri, CHAMPION_FILE), config_loader.to_document(resolved).encode()
    )


def read(uri: str) -> Resolved:
    """Raises ValueError naming the file when it has another shape, OSError when missing."""
    path = posixpath.join(uri, CHAMPION_FILE)
    return config_loader.from_document(Resolved, fileio.read_bytes(path).decode(), path, VERSION)


def from_inputs(artifacts: Sequence[Any] | None) -> Resolved | None:
    """The record in a step's `champion` input (a list of one artifact); None when the
    step was wired without one."""
    return read(artifacts[0].uri) if artifacts else None


def holding(resolved: Resolved | None) -> contextlib.AbstractContextManager[None]:
    """While a step works for the run, it holds the run's serving lease (heartbeats; a
    step that raises gives it back: serving_lock.hold)."""
    if resolved is None or not resolved.lease_token:
        return contextlib.nullcontext()
    return serving_lock.hold(resolved.serving_dir, resolved.lease_token)
