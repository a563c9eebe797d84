"""What each run decided about the serving folder: one small record per decision.

Every retrain ends in one decision, recorded beside the champion so that `imgpipe
history` can say, span by span, what serves and why:

  <serving_dir>/.history/<time in ns, 20 digits>-<kind>.json
    {"version": 1, "time": 1764000000.5, "kind": "pushed", "span": 7,
     "model_version": 1764000000, "served_version": 1764000000,
     "reference_accuracy": 0.91, "reason": "blessed: ...", "run_id": "..."}

The kinds: PUSHED (the Pusher published a model), REFUSED (the Evaluator did not bless
it, or the Pusher's compare-and-swap found a newer push), STOPPED (ImageStatistics'
data gate stopped the run before training), ROLLBACK (an operator served an earlier
version again) and FAILED (`imgpipe run local` ended in an error, a stop signal or its
deadline, and decided nothing: the span counts as not yet seen). A record is written
once and never changed; names sort by time. The folder starts with a dot: model servers
and served_models.complete_versions never see it. A history write is a report, not a
step: the components catch its OSError and log one line, so it never fails a push or a
retrain, and `read` names a damaged record instead of stopping. No TensorFlow here
beyond the file seam.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re

from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio

HISTORY_DIR = ".history"
VERSION = 1
# The kinds of decision.
PUSHED = "pushed"
REFUSED = "refused"
STOPPED = "stopped"  # the data gate stopped the run
ROLLBACK = "rollback"
FAILED = "failed"  # the run ended in an error and decided nothing
KINDS = (PUSHED, REFUSED, STOPPED, ROLLBACK, FAILED)

_SUFFIX = ".json"
# Enough digits for nanoseconds since the epoch until the year 5138: names sort by time.
_TIME_DIGITS = 20
# A reason as a record keeps it: the words, not the figures in brackets.
_REASON_CHARS = 160
_BRACKETED = re.compile(r"\s*\([^()]*\)")


@dataclasses.dataclass(frozen=True)
class Decision:
    """One run's decision about the serving folder.

    Attributes:
      time: when it was decided, seconds since the epoch.
      kind: PUSHED, REFUSED, STOPPED, ROLLBACK or FAILED.
      span: the span the run read (None when its Examples carry none).
      model_version: the version pushed, or rolled back to; None otherwise.
      served_version: the version that serves after the decision, when known.
      reference_accuracy: that served model's accuracy on the reference set (the
        champion's reference set, else the new eval split), when this run measured it.
      reason: the decision's reason in a few words (`brief`).
      run_id: the pipeline run that decided ("" when unknown).
      version: the record's schema version (VERSION), as every record in the serving
        folder has.
      input_fingerprint: a stop's span folder as the run read it (an admitted span
        keeps it in its record, spans.py); "" otherwise.
    """

    time: float
    kind: str
    span: int | None = None
    model_version: int | None = None
    served_version: int | None = None
    reference_accuracy: float | None = None
    reason: str = ""
    run_id: str = ""
    version: int = VERSION
    input_fingerprint: str = ""


def record(serving_dir: str, decision: Decision) -> str:
    """Writes the decision (atomically, on any filesystem) and returns its file.

    Raises:
      ValueError: the decision's kind is not one of KINDS.
      OSError: the record could not be written; a component logs it in one line and goes
        on, since a history write never fails a push or a retrain.
    """
    if decision.kind not in KINDS:
        raise ValueError(f"decision kind {decision.kind!r} is not one of {list(KINDS)}")
    folder = posixpath.join(serving_dir, HISTORY_DIR)
    fileio.makedirs(folder)
    stamp = str(round(decision.time * 1e9)).zfill(_TIME_DIGITS)
    path = posixpath.join(folder, f"{stamp}-{decision.kind}{_SUFFIX}")
    fileio.write_atomic(path, config_loader.to_document(decision).encode())
    return path


def read(serving_dir: str) -> tuple[list[Decision], list[str]]:
    """Every decision recorded in the serving folder, oldest first, and one line per
    record that could not be read, naming the file and why (never raised).

    Example:
      decisions, problems = read("/srv/serving")
      # problems: ['/srv/serving/.history/...-pushed.json is not JSON: ...']
    """
    folder = posixpath.join(serving_dir, HISTORY_DIR)
    decisions: list[Decision] = []
    problems: list[str] = []
    if not fileio.isdir(folder):
        return decisions, problems
    for name in _record_names(folder):
        path = posixpath.join(folder, name)
        try:
            decision = _load(path)
        except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
            problems.append(f"{path}: passed over, unreadable: {e}")
            continue
        if decision.kind not in KINDS:
            problems.append(f"{path}: passed over, unknown decision kind {decision.kind!r}")
            continue
        decisions.append(decision)
    return sorted(decisions, key=lambda d: d.time), problems


def newest(serving_dir: str) -> Decision | None:
    """The newest decision recorded in the serving folder, reading that one record only;
    None when there is none or it cannot be read."""
    folder = posixpath.join(serving_dir, HISTORY_DIR)
    names = _record_names(folder) if fileio.isdir(folder) else []
    if not names:
        return None
    try:
        return _load(posixpath.join(folder, names[-1]))
    except (OSError, ValueError):
        return None


def _record_names(folder: str) -> list[str]:
    """The records' file names, oldest first; a write in progress
    (fileio.ATOMIC_TEMP_SUFFIX) is not one."""
    return sorted(name for name in fileio.list_dir(folder) if name.endswith(_SUFFIX))


def _load(path: str) -> Decision:
    return config_loader.from_document(Decision, fileio.read_bytes(path).decode(), path, VERSION)


# After this many spans newer than the last push decided without a push, `imgpipe
# history` says the schedule has stalled: the served model ages while data lands. Reruns
# of a span, and runs with nothing new (a schedule that fires before data lands), do not
# count: only spans do.
STALLED_AFTER_SPANS = 3


@dataclasses.dataclass(frozen=True)
class Stall:
    """The spans decided since the last push or rollback, newer than every span pushed,
    when none of them was pushed.

    Attributes:
      spans: those spans, oldest first.
      refused: how many of them the Evaluator or the Pusher refused last.
      failed: how many of them last ended in a failed run (the others were stopped by
        the data gate).
      served_version: the version serving through them.
      last_reason: the newest decision's reason.
    """

    spans: tuple[int, ...]
    refused: int
    served_version: int | None
    last_reason: str
    failed: int = 0

    def describe(self) -> str:
        """One line for the person on call."""
        served = "nothing" if self.served_version is None else f"version {self.served_version}"
        stopped = len(self.spans) - self.refused - self.failed
        return (
            f"stalled: {len(self.spans)} spans since the last push, none pushed (spans "
            f"{self.spans[0]}-{self.spans[-1]}: {self.refused} refused, "
            f"{stopped} stopped by the data gate, {self.failed} failed); {served} serves; "
            f"the newest: {self.last_reason}"
        )


def stall(decisions: list[Decision], after: int = STALLED_AFTER_SPANS) -> Stall | None:
    """The spans decided since the last push or rollback (decisions oldest first) and
    newer than every span pushed, when there are at least `after` of them; None
    otherwise."""
    cut = next(
        (i for i in range(len(decisions) - 1, -1, -1) if decisions[i].kind in (PUSHED, ROLLBACK)),
        -1,
    )
    pushed = [d.span for d in decisions[: cut + 1] if d.kind == PUSHED and d.span is not None]
    newest_pushed = max(pushed, default=None)
    last_by_span: dict[int, Decision] = {}
    for decision in decisions[cut + 1 :]:
        if decision.span is not None and (newest_pushed is None or decision.span > newest_pushed):
            last_by_span[decision.span] = decision
    if len(last_by_span) < after:
        return None
    spans = tuple(sorted(last_by_span))
    served = (decisions[cut].served_version or decisions[cut].model_version) if cut >= 0 else None
    return Stall(
        spans=spans,
        refused=sum(last_by_span[s].kind == REFUSED for s in spans),
        failed=sum(last_by_span[s].kind == FAILED for s in spans),
        served_version=served if served is not None else decisions[-1].served_version,
        last_reason=decisions[-1].reason,
    )


def brief(reason: str) -> str:
    """A decision's reason in a few words: what is in brackets left out, one line, at
    most _REASON_CHARS characters.

    Example:
      brief("blessed: accuracy 0.9 vs floor 0.5 (threshold 0.5; ...); not worse than "
            "champion 7 on new_split")
      # 'blessed: accuracy 0.9 vs floor 0.5; not worse than champion 7 on new_split'
    """
    text = " ".join(reason.split())
    while True:
        shorter = _BRACKETED.sub("", text)
        if shorter == text:
            break
        text = shorter
    if len(text) > _REASON_CHARS:
        text = text[: _REASON_CHARS - 3].rstrip() + "..."
    return text
