"""The serving directory's contract: what a pushed model holds, and which one is served.

The Pusher copies a Trainer's serving model to <serving_dir>/<version>/, version being
an integer (seconds since the epoch), then writes manifest.json (every file's size and
CRC-32C, manifest.py's format) and PUSH_COMPLETE_FILE last. A version folder without
PUSH_COMPLETE is an interrupted push and is never read.

`find` is the one way to the champion: the newest *sound* push at or below the version
the model server is pointed at (models.config, model_config.py), which is the newest
push unless `imgpipe rollback` pointed it back. The model a new
candidate must not be worse than (the Evaluator), the weights a warm start begins from
(the Trainer), the data the next run's statistics are compared with (drift), the labels
the label audit reads: each calls `find` and puts `Lookup.note` in its summary line, so
damage degrades the same way everywhere. A push whose files differ from its manifest,
or whose labels cannot be read, is damaged: it is named in one line
(`serving/123: damaged (saved_model.pb: size 10 != 12345); using 122`) and passed over
for the next older sound push. A complete push without a manifest comes from a release
before manifests: it is a legacy push, used when its labels read, and said so. A push
newer than the served version is not served (rolled back from, or its push was stopped
before models.config named it): it is named and passed over the same way. Without
models.config (pushes of a release before it, or made by hand) the newest sound push is
the champion, as a server on the folder's highest version serves; when models.config
cannot be read or names no complete push, so is it, and the note says why.

What is checked: always every file's presence and size, and the CRC-32C of the small
files (up to manifest.CHECKSUMMED_ON_READ_BYTES: labels, statistics, weight shapes),
which costs one listing, a request per file on object stores and a few KB read. With
`checksums=True` every byte is checksummed too; callers that load the whole model and
act on it (the Evaluator, which blesses against it, and a warm start, which trains from
its weights) ask for it, since they read every byte anyway.

Beside the SavedModel, a serving model holds in ASSETS_EXTRA_DIR:
  labels.txt        class names in id order (layout.LABELS_TXT_FILE)
  label_map.json    the same, as JSON (layout.LABEL_MAP_FILE)
  image_stats.json  the ImageStatistics of the data it was trained on
  model.weights.h5  the Keras weights, for a warm start
  weight_shapes.json  the shape of each of those weights, in order: a warm start loads
                    them only into a model of the same architecture
  training.json     the spans it was trained on, its main settings, and a digest of
                    the spans' Examples and every setting: a candidate with the same
                    digest has nothing new to offer
  reference/        the examples it was judged on when it was blessed, which the next
                    candidate is also judged on (reference_sets.py); a model server
                    loads nothing from assets.extra but warm-up requests
No TensorFlow here beyond the file seam.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath

from imgpipe.components.common.formats import label_map, layout, manifest, model_config
from imgpipe.components.common.storage import fileio

ASSETS_EXTRA_DIR = "assets.extra"
WEIGHTS_FILE = "model.weights.h5"
WEIGHT_SHAPES_FILE = "weight_shapes.json"
# What the model was trained on: the spans, the main settings, and one digest of the
# spans' Examples and every setting ({"digest": ..., "spans": [...], ...}).
TRAINING_FILE = "training.json"
# ... its spans that passed their gates only by an acceptance (components/trainer/window.py).
ACCEPTED_SPANS_KEY = "accepted_spans"
PUSH_COMPLETE_FILE = "PUSH_COMPLETE"
# A push being copied on a local disk, renamed into place whole (the Pusher).
STAGING_PREFIX = ".push-"
MANIFEST_FILE = layout.MANIFEST_FILE

# Statuses of a push that `find` passed over or took with a caveat.
DAMAGED = "damaged"
LEGACY = "legacy"
NOT_SERVED = "not served"  # newer than the version models.config names
# Below a push: its reference evaluation set (components/common/formats/reference_sets.py).
REFERENCE_ASSET = posixpath.join(ASSETS_EXTRA_DIR, "reference")


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """One complete push.

    Attributes:
      path: the version folder, a SavedModel.
      version: its integer name.
      labels: class names in id order.
    """

    path: str
    version: int
    labels: tuple[str, ...]

    def asset(self, name: str) -> str:
        return posixpath.join(self.path, ASSETS_EXTRA_DIR, name)

    @property
    def statistics_uri(self) -> str | None:
        """The image_stats.json of its training data, or None for a model without it."""
        path = self.asset(layout.IMAGE_STATS_FILE)
        return path if fileio.exists(path) else None

    @property
    def weights_path(self) -> str | None:
        path = self.asset(WEIGHTS_FILE)
        return path if fileio.exists(path) else None

    @property
    def reference_dir(self) -> str:
        """Where its reference evaluation set is (absent in pushes made before them)."""
        return posixpath.join(self.path, REFERENCE_ASSET)

    def training(self) -> dict:
        """What it was trained on: `training_of(self.path)`."""
        return training_of(self.path)

    def weight_shapes(self) -> list[list[int]] | None:
        path = self.asset(WEIGHT_SHAPES_FILE)
        if not fileio.exists(path):
            return None
        with fileio.open_file(path, "r") as f:
            return json.load(f)["shapes"]


@dataclasses.dataclass(frozen=True)
class Passed:
    """A complete push `find` passed over (DAMAGED, NOT_SERVED) or took unverified
    (LEGACY)."""

    path: str
    version: int
    status: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Lookup:
    """What `find` found.

    Attributes:
      model: the newest sound push; None when there is none.
      passed: damaged pushes newer than it, newest first, and a legacy `model`'s entry.
      head: the newest complete version (sound or not), None when nothing was pushed:
        the Pusher pushes only while it is still the one the Evaluator saw.
      serving_dir: where it looked.
      served: the version models.config names (model_config.served_version), None
        when there is none or it cannot be read: the Pusher pushes only while it still
        names it (a rollback during a run refuses the run's push).
      served_note: why models.config was not followed ("" when it was, or is absent).
    """

    model: ServedModel | None
    passed: tuple[Passed, ...] = ()
    head: int | None = None
    serving_dir: str = ""
    served: int | None = None
    served_note: str = ""

    @property
    def note(self) -> str:
        """One line for a summary: why models.config was not followed, each push passed
        over, and what is used instead; "" when the served push was sound and verified."""
        parts = [self.served_note] if self.served_note else []
        parts += [f"{p.path}: {p.status} ({p.reason})" for p in self.passed]
        if not parts:
            return ""
        if self.model is None:
            parts.append("no sound push left")
        elif self.served_note or any(p.status != LEGACY for p in self.passed):
            parts.append(f"using {self.model.version}")
        return "; ".join(parts)


def training_of(model_dir: str) -> dict:
    """What a serving model (a push, or the Trainer's export) was trained on
    (TRAINING_FILE); {} for one made before it, or when the file cannot be read."""
    path = posixpath.join(model_dir, ASSETS_EXTRA_DIR, TRAINING_FILE)
    try:
        found = json.loads(fileio.read_bytes(path)) if fileio.exists(path) else {}
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def complete_versions(serving_dir: str) -> list[int]:
    """Versions with PUSH_COMPLETE, newest first."""
    if not serving_dir or not fileio.isdir(serving_dir):
        return []
    names = [n for n in fileio.list_dir(serving_dir) if n.isdigit()]
    return [
        v
        for v in sorted((int(n) for n in names), reverse=True)
        if fileio.exists(posixpath.join(serving_dir, str(v), PUSH_COMPLETE_FILE))
    ]


def read_labels(model_dir: str) -> tuple[str, ...]:
    """Class names of a serving model, from label_map.json or else labels.txt."""
    extra = posixpath.join(model_dir, ASSETS_EXTRA_DIR)
    path = posixpath.join(extra, layout.LABEL_MAP_FILE)
    if not fileio.exists(path):
        path = posixpath.join(extra, layout.LABELS_TXT_FILE)
    return label_map.read(path).labels


def damage(version_dir: str, checksums: bool = False) -> str | None:
    """Why a pushed version differs from its manifest ("saved_model.pb: size 10 !=
    12345"), or None when it matches. PUSH_COMPLETE, written after it, is not listed."""
    listed = manifest.read(version_dir)
    found = set(fileio.list_files(version_dir)) - {MANIFEST_FILE, PUSH_COMPLETE_FILE}
    missing = sorted(set(listed.files) - found)
    if missing:
        return f"{missing[0]}: missing" + (f" (and {len(missing) - 1} more)" if missing[1:] else "")
    extra = sorted(found - set(listed.files))
    if extra:
        return f"{extra[0]}: not in {MANIFEST_FILE}"
    for relpath, entry in listed.files.items():
        size = fileio.size(posixpath.join(version_dir, relpath))
        if size != entry.size:
            return f"{relpath}: size {size} != {entry.size}"
    for relpath, entry in listed.files.items():
        if checksums or entry.size <= manifest.CHECKSUMMED_ON_READ_BYTES:
            crc = manifest.describe(version_dir, [relpath])[relpath].crc32c
            if crc != entry.crc32c:
                return f"{relpath}: CRC-32C {crc} != {entry.crc32c}"
    return None


# What reading a damaged push can raise: unreadable or missing files (local, object
# store), and files that do not fit their schema.
_DAMAGE_ERRORS = (OSError, ValueError, KeyError)


def inspect(path: str, version: int, checksums: bool) -> tuple[ServedModel | None, Passed | None]:
    """One complete push: (the model, None) when sound; (the model, its LEGACY entry)
    when it has no manifest but its labels read; (None, its DAMAGED entry) otherwise.

    Args:
      path: the version folder.
      version: its number.
      checksums: checksum every byte, not only the small files.
    """
    legacy = not fileio.exists(posixpath.join(path, MANIFEST_FILE))
    try:
        problem = None if legacy else damage(path, checksums)
        if problem is None:
            model = ServedModel(path=path, version=version, labels=read_labels(path))
            if legacy:
                reason = f"no {MANIFEST_FILE}, pushed by an earlier release: not verified"
                return model, Passed(path, version, LEGACY, reason)
            return model, None
    except _DAMAGE_ERRORS as e:
        problem = " ".join(str(e).split()) or type(e).__name__
    return None, Passed(path, version, DAMAGED, problem)


def served(serving_dir: str, versions: list[int]) -> tuple[int | None, str]:
    """The version models.config names, and why it is not followed ("" when it is, or
    when there is no models.config).

    Args:
      serving_dir: the serving directory.
      versions: its complete versions (`complete_versions`).

    Returns:
      (the version named, None when none is or the file cannot be read; the reason).
    """
    path = posixpath.join(serving_dir, model_config.MODEL_CONFIG_FILE)
    try:
        version = model_config.served_version(serving_dir)
    except (OSError, ValueError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        return None, f"{path}: unreadable ({reason}), so the newest sound push is the champion"
    if version is not None and version not in versions:
        return version, (
            f"{path}: names {version}, which is not a complete push, so the newest sound "
            "push is the champion"
        )
    return version, ""


def find(serving_dir: str | None, checksums: bool = False) -> Lookup:
    """The newest sound push in serving_dir at or below the served version, and the
    pushes passed over: damaged ones, and newer ones that are not served.

    Args:
      serving_dir: the serving directory; None or "" for none.
      checksums: checksum every byte of each push inspected (see the module docstring).

    Raises:
      OSError: the folder itself cannot be listed (a store that cannot be reached).
    """
    if not serving_dir:
        return Lookup(None)
    versions = complete_versions(serving_dir)
    named, served_note = served(serving_dir, versions)
    followed = named if named is not None and not served_note else None
    head = versions[0] if versions else None
    passed: list[Passed] = []
    for version in versions:
        path = posixpath.join(serving_dir, str(version))
        if followed is not None and version > followed:
            reason = f"{model_config.MODEL_CONFIG_FILE} names {followed}"
            passed.append(Passed(path, version, NOT_SERVED, reason))
            continue
        model, problem = inspect(path, version, checksums)
        if problem is not None:
            passed.append(problem)
        if model is not None:
            return Lookup(model, tuple(passed), head, serving_dir, named, served_note)
    return Lookup(None, tuple(passed), head, serving_dir, named, served_note)


def latest(serving_dir: str | None) -> ServedModel | None:
    """`find(serving_dir).model`: the newest sound push, or None."""
    return find(serving_dir).model
