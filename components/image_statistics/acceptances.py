"""Accepted drift that stays accepted until a model trained on it is served.

`--accept-drift N` accepts span N's drift against the champion. The change it accepts
(a class added, a channel moved) is still there in span N+1 until a model trained on it
is pushed, so the acceptance is recorded beside the champion it was measured against:

  <serving_dir>/.accepted-drift/<champion version>-span-<N>.json

A later span whose drift against the *same* champion is the same change (each drifted
metric on the same subject, at most one threshold further than the accepted distance;
each class added or removed among those accepted) passes the gate as accepted at span
N. A different change, or any change once another model has been pushed (a new
champion version), stops the run again. The folder starts with a dot, so model servers
and the listing of versions (served_models.complete_versions) never see it.
"""

from __future__ import annotations

import dataclasses
import posixpath

from imgpipe.components.common.formats import image_stats, record_folders
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio

ACCEPTED_DIR = ".accepted-drift"
VERSION = 1


@dataclasses.dataclass(frozen=True)
class Acceptance:
    """Drift accepted for one span against one champion."""

    span: int
    champion_version: int
    checks: tuple[image_stats.DriftCheck, ...]
    classes_added: tuple[str, ...] = ()
    classes_removed: tuple[str, ...] = ()
    version: int = VERSION


def _folder(serving_dir: str) -> str:
    return posixpath.join(serving_dir, ACCEPTED_DIR)


def record(serving_dir: str, champion_version: int, span: int, drift: image_stats.Drift) -> str:
    """Records span's accepted drift against champion_version; returns the file."""
    acceptance = Acceptance(
        span,
        champion_version,
        tuple(c for c in drift.checks if c.drifted),
        drift.classes_added,
        drift.classes_removed,
    )
    fileio.makedirs(_folder(serving_dir))
    path = posixpath.join(_folder(serving_dir), f"{champion_version}-span-{span}.json")
    fileio.write_atomic(path, config_loader.to_document(acceptance).encode())
    return path


def recorded(serving_dir: str, champion_version: int) -> list[Acceptance]:
    """The acceptances against champion_version, newest span first; unreadable files
    are passed over (an acceptance that cannot be read accepts nothing)."""
    if not serving_dir:
        return []
    found = record_folders.read_records(
        _folder(serving_dir), Acceptance, VERSION, f"{champion_version}-span-"
    )
    return sorted(found, key=lambda a: a.span, reverse=True)


def covers(acceptance: Acceptance, drift: image_stats.Drift) -> bool:
    """Whether every change in `drift` is one `acceptance` accepted."""
    if not set(drift.classes_added) <= set(acceptance.classes_added):
        return False
    if not set(drift.classes_removed) <= set(acceptance.classes_removed):
        return False
    accepted = {(c.metric, c.subject): c for c in acceptance.checks}
    for check in drift.checks:
        if not check.drifted:
            continue
        before = accepted.get((check.metric, check.subject))
        if before is None or check.distance > before.distance + check.threshold:
            return False
    return True


def still_accepted(
    serving_dir: str, champion_version: int, drift: image_stats.Drift
) -> Acceptance | None:
    """The recorded acceptance against this champion that covers `drift`, if any."""
    for acceptance in recorded(serving_dir, champion_version):
        if covers(acceptance, drift):
            return acceptance
    return None
