"""Names made safe to show: on a terminal, in a log line, in an error, in the HTML report.

File and folder names come from users' trees and may hold anything but `/` and NUL:
escape sequences that drive a terminal, newlines that forge log lines, bidirectional
overrides that reverse what a reader sees, and bytes that are not UTF-8 at all. Every
place that prints a name passes it through `printable` first. The JSON files keep the
real (valid UTF-8) names; JSON escapes control characters itself.
"""

from __future__ import annotations

import unicodedata

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
