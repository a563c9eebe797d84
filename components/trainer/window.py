"""The window of spans a retrain trains on: this run's span and the newest spans before
it that passed the gates (components/common/formats/spans.py), `trainer.spans` in all.

One span is a few dozen images per class; a champion trained on one span competes with
a candidate trained on the next, and nothing accumulates. The window makes each run
train on the data of the last spans, each converted once (their Examples stay in the
pipeline root) and read again. The model's classes are this span's: an earlier span is
read with its label ids mapped to them by name, and left out (said so) when it has a
class this span does not, or when its Examples are gone. Validation stays on this
span's eval split, and no eval split of any span is trained on, so the reference sets
the Evaluator keeps stay unseen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from imgpipe.components.common.formats.spans import AdmittedSpan


@dataclasses.dataclass(frozen=True)
class Window:
    """What a run trains on besides its own span.

    Attributes:
      spans: every span trained on, newest first, this run's included (None when its
        span is unknown).
      earlier: the earlier spans read, newest first, with each one's label remap (its
        label id -> the model's), None where the ids already agree.
      note: the spans of the window left out, and why, in one line ("" when none).
      accepted: the spans trained on that passed their gates only by an acceptance
        (drift or the label audit), oldest first: the Evaluator does not hold a later
        candidate whose window has moved past them to their images.
    """

    spans: tuple[int | None, ...]
    earlier: tuple[tuple[AdmittedSpan, tuple[int, ...] | None], ...] = ()
    note: str = ""
    accepted: tuple[int, ...] = ()


def choose(
    admitted: Sequence[AdmittedSpan],
    span: int | None,
    labels: Sequence[str],
    size: int,
    missing: Callable[[str], str],
    served: Sequence[int] = (),
    span_accepted: bool = False,
) -> Window:
    """The window for this run's span.

    Args:
      admitted: the admitted spans, any order.
      span: this run's span; None (unknown) trains on it alone.
      labels: the model's classes (this span's), in id order.
      size: spans in all, this one included; 0 for every admitted span.
      missing: examples_uri -> why it cannot be read ("" when it can).
      served: the spans the champion was trained on: a span admitted only by an
        acceptance is read once a model trained on it was pushed.
      span_accepted: this run's span passed its gates only by an acceptance.
    """
    own = (span,) if span_accepted and span is not None else ()
    if span is None or size == 1:
        return Window((span,), accepted=own)
    earlier = sorted((s for s in admitted if s.span < span), key=lambda s: -s.span)
    taken: list[tuple[AdmittedSpan, tuple[int, ...] | None]] = []
    left_out = []
    for candidate in earlier:  # newest first; one left out is replaced by an older one
        if size and len(taken) >= size - 1:
            break
        extra = [name for name in candidate.labels if name not in labels]
        why = missing(candidate.examples_uri)
        if candidate.accepted and candidate.span not in served:
            left_out.append(
                f"span {candidate.span}: passed its gates by an acceptance, and no model "
                "trained on it has been pushed"
            )
        elif why:
            left_out.append(f"span {candidate.span}: {why}")
        elif extra:
            left_out.append(f"span {candidate.span}: it has classes {extra} this span does not")
        else:
            remap = tuple(list(labels).index(name) for name in candidate.labels)
            taken.append((candidate, None if remap == tuple(range(len(remap))) else remap))
    note = "left out " + "; ".join(left_out) if left_out else ""
    accepted = sorted([*own, *(s.span for s, _ in taken if s.accepted)])
    return Window((span, *(s.span for s, _ in taken)), tuple(taken), note, tuple(accepted))


def describe(window: Window) -> str:
    """One line for the summary: the spans trained on, and those left out."""
    trained = ", ".join("?" if s is None else str(s) for s in window.spans)
    return f"spans {trained}" + (f" ({window.note})" if window.note else "")
