"""Names and values made safe to show: on a terminal, in a log line, in an error, in the
HTML report.

File and folder names come from users' trees and may hold anything but `/` and NUL:
escape sequences that drive a terminal, newlines that forge log lines, bidirectional
overrides that reverse what a reader sees, and bytes that are not UTF-8 at all. Every
place that prints a name passes it through `printable` first. The JSON files keep the
real (valid UTF-8) names; JSON escapes control characters itself.

A value an error message quotes (a setting, an argument) passes through `shown`, which
cuts it short: a message quotes at most the start of a value.
"""

from __future__ import annotations

import reprlib
import unicodedata
from typing import Any

# Unicode categories a display acts on rather than shows: controls (C0, DEL, C1),
# format characters (bidirectional overrides, zero-width ones), line and paragraph
# separators, and unassigned or private-use code points.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# Lone surrogates U+DC80..U+DCFF stand for undecodable bytes 0x80..0xFF
# (a UTF-8 decode with "surrogateescape", as os.fsdecode does).
_SURROGATE_ESCAPED = range(0xDC80, 0xDD00)


def _escape(char: str) -> str:
    code = ord(char)
    if code in _SURROGATE_ESCAPED:
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` with every character a display would act on, and every undecodable byte,
    escaped as `\\xNN` / `\\uNNNN`; a backslash is doubled, so the result is unambiguous.

    Example:
      printable("cat\\x1b[31m.jpg")  # 'cat\\\\x1b[31m.jpg'
      printable_bytes(b"caf\\xe9.jpg")  # 'caf\\\\xe9.jpg'
    """
    if text.isprintable() and "\\" not in text:  # the common case, in C
        return text
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == " " or unicodedata.category(char) not in _UNSAFE_CATEGORIES:
            out.append(char)
        else:
            out.append(_escape(char))
    return "".join(out)


def printable_bytes(name: bytes) -> str:
    """A raw file name (as os.scandir gives for bytes paths), decoded where it is UTF-8
    and escaped byte by byte where it is not."""
    return printable(name.decode("utf-8", "surrogateescape"))


# How much of a value an error message quotes: enough to recognise it, however large the
# value is (a 10 MB setting once made a 10 MB error line).
SHOWN_CHARS = 60


class _Prefix(reprlib.Repr):
    """reprlib's short repr, with a long string cut to its start and its length said."""

    def repr_str(self, x: str, level: int) -> str:
        return repr(x) if len(x) <= self.maxstring else _cut(repr(x[: self.maxstring]), len(x))


_SHOWN = _Prefix(
    maxlevel=2, maxlist=4, maxtuple=4, maxdict=4, maxstring=SHOWN_CHARS, maxother=SHOWN_CHARS
)


def _cut(start: str, length: int) -> str:
    return f"{start}... ({length:,} characters)"


def short(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` as a message shows it unquoted (a path, an argument): its first `limit`
    characters and its length, when it is longer.

    Example:
      short("/data/" + "x" * 10_000)  # '/data/xxx...xxx... (10,006 characters)'
    """
    return text if len(text) <= limit else _cut(text[:limit], len(text))


def shown(value: Any) -> str:
    """`value` as an error message quotes it: its repr, a string cut to its first
    SHOWN_CHARS characters and a collection to its first items, however large it is.

    Example:
      shown("x" * 10_000_000)  # "'xxx...xxx'... (10,000,000 characters)"
      shown(list(range(100)))  # '[0, 1, 2, 3, ...]'
    """
    return _SHOWN.repr(value)
