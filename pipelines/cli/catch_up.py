"""Which spans `imgpipe run local` runs: every span that landed since the last one a run
of this serving folder saw, oldest first, so a scheduler that was down for two days loses
no data; the spans it leaves, and the numbers missing, are named with the flag that takes
one in. The last span a run saw is read again, first, when its folder changed since (a
span still landing when the run read it, whose other files came later)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SpanPlan:
    """What a run reads.

    Attributes:
      spans: the spans to run in turn, oldest first; [None] reads the newest as TFX does.
      notes: one line each: the spans caught up, left, and missing.
    """

    spans: tuple[int | None, ...]
    notes: tuple[str, ...] = ()


def seen_spans(serving_dir: str) -> dict[int, str]:
    """The spans an earlier run decided on (admitted, pushed, refused or stopped at a
    gate: the serving folder's span records and history), each with the fingerprint of
    its folder as the run read it ("" when none was kept). A run that failed decided
    nothing: its span is read again."""
    from imgpipe.components.common.formats import serving_history, spans

    if not serving_dir:
        return {}
    decisions, _ = serving_history.read(serving_dir)
    seen: dict[int, str] = {}
    for decision in sorted(decisions, key=lambda d: d.time):  # the newest read wins
        if decision.span is not None and decision.kind != serving_history.FAILED:
            seen[decision.span] = decision.input_fingerprint or seen.get(decision.span, "")
    for admitted in spans.admitted(serving_dir):
        seen[admitted.span] = admitted.input_fingerprint or seen.get(admitted.span, "")
    return seen


def plan(data_root: str, serving_dir: str, asked: int | None) -> SpanPlan:
    """The spans of `data_root`'s {SPAN} pattern this run reads.

    Args:
      data_root: the image folder, perhaps with a span pattern.
      serving_dir: where earlier runs recorded what they saw.
      asked: the one span the user asked for (--span), if any.
    """
    if asked is not None:
        return SpanPlan((asked,))
    if "{" not in data_root:
        return SpanPlan((None,))
    from imgpipe.components.image_example_gen import landed_spans, split_input_base

    base, pattern = split_input_base(data_root)
    landed = landed_spans(base, pattern)
    seen = seen_spans(serving_dir)
    if not landed or not seen:
        return SpanPlan((None,))
    newest_seen = max(seen)
    new = [s for s in landed if s > newest_seen]
    notes = []
    if len(new) > 1:
        notes.append(
            f"spans landed since span {newest_seen}, the last a run saw: "
            f"{', '.join(map(str, new))}; each is run in turn"
        )
    left = [s for s in landed if s < newest_seen and s not in seen]
    for span in left:
        notes.append(
            f"span {span} landed after span {newest_seen} was run and is not read; take it "
            f"in with: imgpipe run local --span {span} ..."
        )
    known = set(landed) | set(seen)
    missing = [s for s in range(min(known), max(known)) if s not in known]
    if missing:
        notes.append(
            f"span{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
            "missing: no folder holds it"
        )
    # Without a newer span the run reads the newest again anyway, and TFX's cache key
    # holds its fingerprint: the check (a stat of each file) is paid only with new spans.
    changed = _changed(base, pattern, newest_seen, seen[newest_seen]) if new else None
    if changed:
        notes.append(changed)
        new.insert(0, newest_seen)
    return SpanPlan(tuple(new) if new else (None,), tuple(notes))


def _changed(base: str, pattern: str, span: int, read_as: str) -> str | None:
    """A line naming how span `span`'s folder changed since a run read it as `read_as`;
    None when it did not, or when that cannot be told."""
    from imgpipe.components.image_example_gen import fingerprint_change, span_fingerprint

    if not read_as:
        return None
    try:
        change = fingerprint_change(read_as, span_fingerprint(base, pattern, span))
    except (OSError, ValueError):
        return None  # the folder is gone, or no longer one span: nothing to read again
    if change is None:
        return None
    return (
        f"span {span} changed after a run read it ({change.files_then} files then, "
        f"{change.files_now} now: still landing when it was read, or replaced since); "
        "it is read again, first"
    )
