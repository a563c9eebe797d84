"""The folder a span pattern names, as it exists on disk: TFX's {SPAN}, {VERSION} and
date patterns ({YYYY}, {MM}, {DD}) resolved by listing the folders and matching names.

TFX's FileBasedDriver globs the pattern, reads a number from every path the glob
matches and stops at the first that holds none: a stray `span-x` beside span-1 ... span-6
stopped every run. It then rebuilds the path from the number, so a folder `span-007`
was looked for as `span-7`. Here each level of the pattern is listed once and each name
matched against a regex built from the pattern. A name that does not match is ignored,
and named in a warning (hidden names, `.partial` say, are ignored silently). The folder
read is the one that exists, padded or not; TFX's width spec `{SPAN:3}` asks for exactly
three digits. As in TFX, the newest span is read, then its newest version; the span
number is TFX's (for a date, its days since 1970-01-01), and RangeConfig's static range
picks one span.

Example:
  folder = resolve_span_folder("/data", "span-{SPAN}")  # /data: span-5, span-007, span-x
  folder.path, folder.span  # ("span-007", 7)
  folder.warning("/data")   # "ignored in /data: span-x (not named as span-{SPAN} says); ..."
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import os
import posixpath
import re
from collections.abc import Sequence

from imgpipe.components.common.runtime.printable import printable
from imgpipe.components.common.storage import fileio

# TFX's specs (tfx/components/example_gen/utils.py): {SPAN} or {SPAN:width}, the same
# for {VERSION}, and the date specs, which stand for the span.
_SPEC = re.compile(r"\{(?P<name>SPAN|VERSION)(?::(?P<width>[^}]*))?\}|\{(?P<date>YYYY|MM|DD)\}")
_DATE_GROUPS = {"YYYY": ("year", 4), "MM": ("month", 2), "DD": ("day", 2)}
_EPOCH = datetime.date(1970, 1, 1)
# A message names at most this many folders.
_NAMED = 10
NOT_A_FOLDER = "a file, not a folder"
NOT_A_DATE = "not a date"
# A full match of the pattern: its path relative to the base, its span and its version.
_Candidate = tuple[str, int, int | None]


@dataclasses.dataclass(frozen=True)
class Ignored:
    """A name beside the span folders that the pattern does not take, and why."""

    path: str  # relative to the base, '/' between levels
    reason: str


@dataclasses.dataclass(frozen=True)
class SpanFolder:
    """The folder a pattern resolved to.

    Attributes:
      path: the folder, relative to the base, spelled as it exists (`span-007/v2`).
      span: TFX's span number (0 for a pattern without span or date specs).
      version: the {VERSION} number, or None for a pattern without one.
      ignored: what was ignored beside it, sorted by path.
    """

    path: str
    span: int
    version: int | None
    ignored: tuple[Ignored, ...] = ()

    def warning(self, base: str) -> str | None:
        """One line naming what was ignored in `base` and the folder read; None if none."""
        if not self.ignored:
            return None
        by_reason: dict[str, list[str]] = {}
        for ignored in self.ignored:
            by_reason.setdefault(ignored.reason, []).append(ignored.path)
        parts = [f"{_names(paths)} ({reason})" for reason, paths in by_reason.items()]
        version = "" if self.version is None else f" version {self.version}"
        return (
            f"ignored in {printable(base)}: {'; '.join(parts)}; span {self.span}{version} "
            f"is read, from {printable(self.path)}"
        )


@dataclasses.dataclass(frozen=True)
class _Level:
    text: str  # the pattern's folder name at this level
    regex: re.Pattern[str]
    specs: tuple[str, ...]  # the specs in it: SPAN, VERSION, YYYY, MM, DD


def has_specs(pattern: str) -> bool:
    """Whether `pattern` holds a span, version or date spec."""
    return _SPEC.search(pattern) is not None


def resolve_span_folder(base: str, pattern: str, span: int | None = None) -> SpanFolder:
    """The folder `pattern` names below `base`: the newest span, then its newest version.

    Each folder the pattern reaches is listed once. A name a level's regex does not
    match is ignored, as is a match that is a file; hidden names (a leading '.') are
    skipped silently. A pattern without specs is returned as it is, unlisted.

    Args:
      base: the folder that holds the spans (local or a URI).
      pattern: the path below it, with TFX's specs: `span-{SPAN}`, `span-{SPAN:3}/v{VERSION}`.
      span: the one span to take (RangeConfig's static range); None takes the newest.

    Raises:
      FileNotFoundError: `base` does not exist, or no folder matches; the message names
        what `base` holds.
      ValueError: the pattern's specs are invalid, or two folders are the same span and
        version (span-7 and span-007); the message names them.
    """
    levels = _levels(pattern)
    if not any(level.specs for level in levels):
        return SpanFolder(pattern, 0, None)
    # The name a message gives as an example: the span asked for, else the first (today).
    first = (datetime.date.today() - _EPOCH).days if "{YYYY}" in pattern else 1
    example = fill(pattern, first if span is None else span)
    if not fileio.isdir(base):
        raise FileNotFoundError(
            f"{printable(base)}, the folder that holds the spans, does not exist; create it "
            f"and put each span in it ({example}, ...)"
        )
    candidates, ignored, seen = _walk(base, levels)
    if span is not None:
        candidates = [c for c in candidates if c[1] == span]

    def key(candidate: _Candidate) -> tuple[int, int]:
        return candidate[1], -1 if candidate[2] is None else candidate[2]

    for _, group in itertools.groupby(sorted(candidates, key=key, reverse=True), key=key):
        same = sorted(group)
        folders = [c for c in same if fileio.isdir(os.path.join(base, c[0]))]
        ignored += [Ignored(c[0], NOT_A_FOLDER) for c in same if c not in folders]
        if len(folders) > 1:
            _, number, version = folders[0]
            which = f"span {number}" + ("" if version is None else f" version {version}")
            raise ValueError(
                f"{_names([c[0] for c in folders])} in {printable(base)} are "
                f"{'both' if len(folders) == 2 else 'all'} {which}; keep one of them (rename "
                "or remove the others)"
            )
        if folders:
            path, number, version = folders[0]
            return SpanFolder(path, number, version, tuple(sorted(ignored, key=_by_path)))
    holds = f"it holds {_names(sorted(seen))}" if seen else "it is empty"
    which = "" if span is None else f" for span {span}"
    raise FileNotFoundError(
        f"no folder in {printable(base)} matches {pattern}{which} ({holds}); put each span "
        f"in a folder of {printable(base)} named as the pattern says ({example}, ...)"
    )


def fill(pattern: str, span: int, version: int = 1) -> str:
    """The pattern with its specs filled in as TFX writes them (zero-padded to a given
    width): fill("span-{SPAN:3}/v{VERSION}", 1) -> "span-001/v1"."""
    day = _EPOCH + datetime.timedelta(days=span)
    dates = {"YYYY": f"{day.year:04d}", "MM": f"{day.month:02d}", "DD": f"{day.day:02d}"}

    def value(match: re.Match[str]) -> str:
        if match["date"]:
            return dates[match["date"]]
        number = str(span if match["name"] == "SPAN" else version)
        return number.zfill(int(match["width"])) if match["width"] else number

    return _SPEC.sub(value, pattern)


def _walk(base: str, levels: Sequence[_Level]) -> tuple[list[_Candidate], list[Ignored], list[str]]:
    """Lists each folder the levels reach, once: the full matches, the names ignored, and
    what exists down to where the walk stopped (for a message when nothing matches)."""
    ignored: list[Ignored] = []
    seen: list[str] = []
    candidates: list[_Candidate] = []
    frontier: list[tuple[str, dict[str, str]]] = [("", {})]
    for depth, level in enumerate(levels):
        last = depth == len(levels) - 1
        deeper: list[tuple[str, dict[str, str]]] = []
        for folder, groups in frontier:
            names = fileio.list_dir(os.path.join(base, folder) if folder else base)
            if folder and not names:
                seen.append(folder)
            for name in names:
                path = posixpath.join(folder, name) if folder else name
                match = None if name.startswith(".") else level.regex.fullmatch(name)
                if match is None:
                    seen.append(path)
                    if level.specs and not name.startswith("."):
                        ignored.append(Ignored(path, f"not named as {level.text} says"))
                    continue
                matched = {**groups, **match.groupdict()}
                if not last:
                    deeper.append((path, matched))
                    continue
                seen.append(path)
                numbers = _numbers(matched)
                if numbers is None:
                    ignored.append(Ignored(path, NOT_A_DATE))
                else:
                    candidates.append((path, numbers[0], numbers[1]))
        frontier = deeper
    return candidates, ignored, seen


def _levels(pattern: str) -> list[_Level]:
    """The pattern's folder names, each with its regex; checks the specs as TFX does."""
    found = [m["name"] or m["date"] for m in _SPEC.finditer(pattern)]
    counts = {name: found.count(name) for name in set(found)}
    dates = [name for name in _DATE_GROUPS if name in counts]
    problem = None
    if any(n > 1 for n in counts.values()):
        problem = "each spec may appear once"
    elif dates and "SPAN" in counts:
        problem = "give {SPAN} or the date specs, not both"
    elif dates and len(dates) != len(_DATE_GROUPS):
        problem = "the date specs come together: {YYYY}, {MM} and {DD}"
    elif "VERSION" in counts and not ("SPAN" in counts or dates):
        problem = "{VERSION} needs {SPAN} (or the date specs) beside it"
    for match in _SPEC.finditer(pattern):
        width = match["width"]
        if width is not None and not (width.isdigit() and int(width) > 0):
            problem = f"the width in {match[0]} must be a positive whole number"
    if problem:
        raise ValueError(f"span pattern {pattern}: {problem}")
    return [_level(text) for text in pattern.strip("/").split("/")]


def _level(text: str) -> _Level:
    parts: list[str] = []
    specs: list[str] = []
    end = 0
    for match in _SPEC.finditer(text):
        parts.append(re.escape(text[end : match.start()]))
        if match["date"]:
            group, digits = _DATE_GROUPS[match["date"]]
            parts.append(f"(?P<{group}>[0-9]{{{digits}}})")
            specs.append(match["date"])
        else:
            count = f"{{{match['width']}}}" if match["width"] else "+"
            parts.append(f"(?P<{match['name'].lower()}>[0-9]{count})")
            specs.append(match["name"])
        end = match.end()
    parts.append(re.escape(text[end:]))
    return _Level(text, re.compile("".join(parts)), tuple(specs))


def _numbers(groups: dict[str, str]) -> tuple[int, int | None] | None:
    """(span, version) from a match's groups; None for a date that is not one."""
    version = int(groups["version"]) if "version" in groups else None
    if "span" in groups:
        return int(groups["span"]), version
    try:
        day = datetime.date(int(groups["year"]), int(groups["month"]), int(groups["day"]))
    except ValueError:
        return None
    return (day - _EPOCH).days, version


def _by_path(ignored: Ignored) -> str:
    return ignored.path


def _names(paths: Sequence[str]) -> str:
    """`a, b and c`; past _NAMED names, `... and N more`."""
    shown = [printable(p) for p in paths[:_NAMED]]
    rest = len(paths) - len(shown)
    if rest:
        return f"{', '.join(shown)} and {rest} more"
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def landed_spans(base: str, pattern: str) -> list[int]:
    """Every span number a folder of `base` holds under `pattern`, ascending; none when
    the pattern has no specs or `base` does not exist."""
    levels = _levels(pattern)
    if not any(level.specs for level in levels) or not fileio.isdir(base):
        return []
    candidates, _, _ = _walk(base, levels)
    return sorted(
        {number for path, number, _ in candidates if fileio.isdir(os.path.join(base, path))}
    )
