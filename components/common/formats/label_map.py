"""The class names of a data set: `label_map.json`, the one authoritative list, and
`labels.txt`, its plain-text copy (line i is class id i).

This module is the only reader and writer of both. A class name must survive
labels.txt: written as one line and read back, it must come back the same. Names that
cannot (a line break, white space at either end, a control character, nothing at all)
are refused, with the reason, wherever a name becomes a class: a label folder of the
input (its images are skipped), or a given label map (the run stops). A class name is
also a folder's name (root/<label>/), so it must be one safe path component: not `.` or
`..`, no `/` or `\\`, and at most NAME_MAX_BYTES in UTF-8. A label map naming
`../../etc` or `/etc/passwd` is refused, not taken as classes without images.
"""

from __future__ import annotations

import dataclasses
import os
import unicodedata

from imgpipe.components.common.formats.layout import LABEL_MAP_FILE, LABELS_TXT_FILE
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.runtime.printable import printable, short
from imgpipe.components.common.storage import fileio

SCHEMA_VERSION = 1
# The longest file or folder name of Linux's file systems (ext4, XFS, tmpfs), in bytes.
NAME_MAX_BYTES = 255


def class_name_problem(name: str) -> str | None:
    """Why `name` cannot be a class name, or None when it can.

    Example:
      class_name_problem("cat")  # None
      class_name_problem(" cat")  # 'it has white space at an end, which labels.txt ...'
    """
    if not name:
        return "it is empty"
    if name in (".", ".."):
        return "it names a folder of the path ('.' or '..'), not a folder of its own"
    if "/" in name or "\\" in name:
        return "it has a path separator ('/' or '\\'), so it is not one folder name"
    if len(name.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
        return f"it is longer than the {NAME_MAX_BYTES} bytes a folder name may have"
    if len(f"{name}.".splitlines()) > 1:  # the dot keeps a final line break in sight
        return "it has a line break, which labels.txt cannot hold"
    if name != name.strip():
        return "it has white space at an end, which labels.txt cannot keep"
    if name.startswith("\ufeff"):
        return "it starts with a byte-order mark, which labels.txt cannot keep"
    if any(unicodedata.category(char) == "Cc" for char in name):
        return "it has a control character"
    return None


@dataclasses.dataclass(frozen=True)
class LabelMap:
    """Class names in id order: `labels[i]` is class id i."""

    labels: tuple[str, ...]
    version: int = SCHEMA_VERSION

    def validate(self) -> None:
        """Raises ValueError naming the first class name that is repeated or refused."""
        seen: set[str] = set()
        for index, name in enumerate(self.labels):
            problem = class_name_problem(name)
            shown = short(printable(name), NAME_MAX_BYTES)
            if problem is not None:
                raise ValueError(f"labels[{index}] '{shown}' cannot be a class: {problem}")
            if name in seen:
                raise ValueError(f"labels[{index}] '{shown}' repeats a class name")
            seen.add(name)


def read(path: str) -> LabelMap:
    """Reads a label_map.json, or a labels.txt (one class name a line; blank lines and
    white space at the ends of lines are dropped).

    Raises:
      FileNotFoundError: nothing at path.
      ValueError: the file holds no valid label list; the message names the file.
    """
    if not fileio.exists(path):
        raise FileNotFoundError(f"label map {path!r} does not exist")
    try:
        text = fileio.read_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"label map {path!r} is not UTF-8 text") from None
    if not path.endswith(".json"):
        names = tuple(line.strip() for line in text.splitlines() if line.strip())
        try:
            return config_loader.from_dict(LabelMap, {"labels": names})
        except ValueError as e:
            raise ValueError(f"label map {path!r}: {e}") from None
    return config_loader.from_document(LabelMap, text, f"label map {path!r}", SCHEMA_VERSION)


def write(output_dir: str, labels: list[str]) -> None:
    """Writes label_map.json and labels.txt.

    Raises:
      ValueError: a name is repeated or cannot be a class name.
    """
    label_map = LabelMap(tuple(labels))
    label_map.validate()
    for name, text in (
        (LABEL_MAP_FILE, config_loader.to_document(label_map)),
        (LABELS_TXT_FILE, "".join(f"{label}\n" for label in labels)),
    ):
        with fileio.open_file(os.path.join(output_dir, name), "wb") as f:
            f.write(text.encode("utf-8"))
