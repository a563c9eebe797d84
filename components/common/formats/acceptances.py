"""Accepted drift, recorded beside the champion it was measured against, until a model
trained on it is served (components/image_statistics/acceptances.py decides what a record
covers):

  <serving_dir>/.accepted-drift/<champion version>-span-<N>.json

The ChampionResolver reads the records of the run's champion once, at the head of the run
(champion.py); ImageStatistics writes one when `--accept-drift N` accepts span N. The
folder starts with a dot, so model servers and the listing of versions never see it. No
TensorFlow here beyond the file seam.
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


def folder(serving_dir: str) -> str:
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
    fileio.makedirs(folder(serving_dir))
    path = posixpath.join(folder(serving_dir), f"{champion_version}-span-{span}.json")
    fileio.write_atomic(path, config_loader.to_document(acceptance).encode())
    return path


def recorded(
    serving_dir: str, champion_version: int, problems: list[str] | None = None
) -> list[Acceptance]:
    """The acceptances against champion_version, newest span first; a file that cannot
    be read accepts nothing, and is named in `problems` when it is given."""
    if not serving_dir:
        return []
    found = record_folders.read_records(
        folder(serving_dir), Acceptance, VERSION, f"{champion_version}-span-", problems
    )
    return sorted(found, key=lambda a: a.span, reverse=True)
