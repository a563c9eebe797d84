"""Serving an earlier kept version again: `imgpipe rollback`.

A rollback changes no version folder. It verifies the version to serve (every byte
against its manifest, served_models.inspect) and points the model-server pointers at it
(model_config.write: kserve-models.config, then models.config, each atomically). A
process killed at any moment leaves models.config naming either the version served
before or the one rolled back to, both whole. From then on:
- TF Serving, pointed at models.config, loads that version at its next poll of the file
  and unloads the other (docs/serving-folder.md);
- the next retrain's champion is the newest sound push at or below it
  (served_models.find): its candidate is judged against what is served, and the
  versions above are named as not served;
- a run that judged its candidate before the rollback pushes nothing (the Pusher's
  compare-and-swap on models.config), and the next push is served as usual.

Each rollback is recorded in the serving folder's history (serving_history.py); a record
that cannot be written is a warning, never a failed rollback. No TensorFlow here beyond
the file seam.
"""

from __future__ import annotations

import dataclasses
import posixpath
import time

from imgpipe.components.common.formats import model_config, served_models, serving_history
from imgpipe.components.common.runtime import phases


@dataclasses.dataclass(frozen=True)
class Result:
    """What a rollback did.

    Attributes:
      serving_dir: the serving directory.
      version: the version models.config names now.
      was: the version it named before (None: it named none, or could not be read).
      passed: damaged versions passed over on the way to `version`, newest first.
      warning: why the history record was not written ("" when it was, or when the
        version served did not change).
    """

    serving_dir: str
    version: int
    was: int | None
    passed: tuple[served_models.Passed, ...] = ()
    warning: str = ""


def rollback(serving_dir: str, to: int | None = None) -> Result:
    """Points the model servers of serving_dir at `to`, or at the newest sound version
    older than the one served.

    Args:
      serving_dir: the serving directory (local, s3:// or gs://).
      to: the version to serve: a complete push whose every byte matches its manifest;
        None for the newest such version older than the one served (the newest
        complete version, when models.config names none).

    Returns:
      What it did; `was == version` when `to` was already served (the pointers are
      written again, which completes a rollback killed between them).

    Raises:
      ValueError: nothing to roll back to, or `to` is not a complete, sound version;
        the message names the versions the folder keeps.
      OSError: the folder cannot be read, or a pointer cannot be written.
    """
    versions = served_models.complete_versions(serving_dir)
    if not versions:
        raise ValueError(f"nothing to roll back to: {serving_dir} holds no complete push")
    named, _ = served_models.served(serving_dir, versions)
    current = named if named is not None and named in versions else versions[0]
    passed: list[served_models.Passed] = []
    if to is not None:
        kept = ", ".join(str(v) for v in versions)
        if to not in versions:
            raise ValueError(
                f"{serving_dir} keeps no complete version {to}; it keeps {kept} (newest first)"
            )
        problem = _problem(serving_dir, to)
        if problem is not None:
            raise ValueError(
                f"{problem.path} cannot be served: {problem.status} ({problem.reason}); "
                f"{serving_dir} keeps {kept} (newest first)"
            )
        target = to
    else:
        previous = _previous(serving_dir, [v for v in versions if v < current], passed)
        if previous is None:
            raise ValueError(_nothing_older(serving_dir, current, versions, passed))
        target = previous
    phases.reached(phases.ROLLING_BACK)
    model_config.write(serving_dir, target)
    phases.reached(phases.POINTED)
    warning = "" if target == named else _record(serving_dir, target, named)
    return Result(serving_dir, target, named, tuple(passed), warning)


def _nothing_older(
    serving_dir: str, current: int, versions: list[int], passed: list[served_models.Passed]
) -> str:
    """The one line that says there is nothing to roll back to, and what is kept."""
    if versions == [current]:
        return f"nothing to roll back to: {serving_dir} keeps only {current}"
    kept = ", ".join(str(v) for v in versions)
    if passed:
        older = "; ".join(f"{p.path}: {p.status} ({p.reason})" for p in passed)
        return (
            f"nothing to roll back to: {serving_dir} keeps no sound version older than the "
            f"served {current} ({older})"
        )
    return (
        f"nothing to roll back to: {serving_dir} keeps no version older than the served "
        f"{current} (it keeps {kept}; --to VERSION serves one of them)"
    )


def _problem(serving_dir: str, version: int) -> served_models.Passed | None:
    """Why a complete version cannot be served again (damaged, or legacy: no manifest to
    verify it with); None when every byte matches its manifest."""
    path = posixpath.join(serving_dir, str(version))
    _, problem = served_models.inspect(path, version, checksums=True)
    return problem


def _previous(serving_dir: str, older: list[int], passed: list[served_models.Passed]) -> int | None:
    """The first sound version of `older` (newest first); those passed over are
    appended to `passed`."""
    for version in older:
        problem = _problem(serving_dir, version)
        if problem is None:
            return version
        passed.append(problem)
    return None


def _record(serving_dir: str, version: int, was: int | None) -> str:
    """Records the rollback in the serving folder's history; returns why it could not
    ("" when it was written)."""
    decision = serving_history.Decision(
        time=time.time(),
        kind=serving_history.ROLLBACK,
        model_version=version,
        served_version=version,
        reason=f"rolled back from {was}" if was is not None else "rolled back",
    )
    try:
        serving_history.record(serving_dir, decision)
    except OSError as e:
        return f"the rollback was not recorded in {serving_dir}'s history: {e}"
    return ""
