"""Where drift's baseline comes from: the statistics the served model was trained on.

The champion is the one the run resolved (components/common/formats/champion.py: the
newest sound push; damaged pushes are passed over and named in `note`); its assets.extra/ holds the
image_stats.json of its training data. Whatever stands in the way of reading it
(nothing pushed yet, a model pushed without statistics, a file this release cannot
read) is not an error: the comparison is skipped, and the reason goes into
image_stats.json and the report.
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.formats import image_stats, layout, served_models
from imgpipe.components.common.storage import fileio


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The statistics to compare with, or why there are none.

    Attributes:
      stats: the baseline's statistics; None when there is none.
      uri: the image_stats.json read ("" when none was found).
      reason: why there is no baseline ("" when there is one).
      note: damaged pushes passed over to find it ("" when none).
    """

    stats: image_stats.ImageStats | None
    uri: str = ""
    reason: str = ""
    note: str = ""


# What reading a pushed model's files can raise: missing or unreadable files (local,
# or tf.io.gfile's errors on object stores) and files that do not fit their schema.
_READ_ERRORS = (OSError, ValueError, KeyError, tf.errors.OpError)


def none(reason: str) -> Baseline:
    return Baseline(stats=None, reason=reason)


def read_file(path: str) -> Baseline:
    """The baseline in an image_stats.json file; a reason when it cannot be read."""
    try:
        with fileio.open_file(path, "r") as f:
            return Baseline(image_stats.from_json_text(f.read(), path), uri=path)
    except _READ_ERRORS as e:
        return none(f"{path} cannot be read as a baseline: {e}")


def from_serving_dir(serving_dir: str) -> Baseline:
    """The served model's training statistics, read from the serving directory (`imgpipe
    stats --baseline`; a run reads its resolved champion: from_champion)."""
    return from_champion(champion_lib.resolve(serving_dir, checksums=False))


def from_champion(resolved: champion_lib.Resolved) -> Baseline:
    """The training statistics of the champion the run resolved."""
    if resolved.status == champion_lib.NOT_SET:
        return none(resolved.reason)
    champion = resolved.model
    if champion is None:
        if resolved.status == champion_lib.NONE and not resolved.note:
            return none(f"{resolved.reason}: nothing to compare with")
        return none(resolved.reason)
    lookup = resolved.lookup()
    uri = champion.statistics_uri
    if uri is None:
        found = none(
            f"the served model {champion.path} (version {champion.version}) carries no "
            f"{served_models.ASSETS_EXTRA_DIR}/{layout.IMAGE_STATS_FILE} of its training data"
        )
    else:
        found = read_file(uri)
    if not lookup.note:
        return found
    if found.stats is None:
        return dataclasses.replace(found, reason=f"{lookup.note}; {found.reason}")
    return dataclasses.replace(found, note=lookup.note)


def from_path(path: str) -> Baseline:
    """`imgpipe stats --baseline`: an image_stats.json, a folder holding one (an
    ImageStatistics artifact), or a serving directory."""
    if not fileio.isdir(path):
        return read_file(path)
    in_folder = os.path.join(path, layout.IMAGE_STATS_FILE)
    if fileio.exists(in_folder):
        return read_file(in_folder)
    return from_serving_dir(path)
