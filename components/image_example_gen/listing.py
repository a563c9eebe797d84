"""Lists an image folder: which files are images of which label (and split), and which
are ignored or cannot be labelled. Listing is sorted, so it is the same on every run.

Layouts:
  flat:  root/<label>/**/file       (the split is decided later, by hash)
  split: root/<split>/<label>/**/file
Files nested deeper under a label folder belong to that label.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath

import tensorflow as tf

from imgpipe.components.image_example_gen.options import LAYOUT_AUTO, LAYOUT_FLAT, LAYOUT_SPLIT
from imgpipe.components.image_example_gen.split_names import SPLIT_ALIASES

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".webp"})
# The folder names that make a tree a split layout (split_names.py maps them to splits).
KNOWN_SPLIT_NAMES = frozenset(SPLIT_ALIASES)


@dataclasses.dataclass(frozen=True)
class SourceImage:
    relpath: str  # posix path relative to the root
    label: str
    split: str | None  # the top-level folder of a split layout, else None


@dataclasses.dataclass(frozen=True)
class ListedFile:
    relpath: str
    reason: str


@dataclasses.dataclass
class Listing:
    layout: str
    images: list[SourceImage]
    ignored: list[ListedFile]  # hidden files and files that are not images
    unlabeled: list[ListedFile]  # images outside any label folder: skipped

    @property
    def files_seen(self) -> int:
        return len(self.images) + len(self.ignored) + len(self.unlabeled)

    @property
    def labels(self) -> list[str]:
        return sorted({image.label for image in self.images})

    @property
    def given_splits(self) -> list[str]:
        return sorted({image.split for image in self.images if image.split is not None})


def walk_files(root: str) -> list[str]:
    """All files below root, as sorted posix paths relative to root.

    Raises:
      FileNotFoundError: root does not exist or is not a directory.
    """
    if not tf.io.gfile.isdir(root):
        raise FileNotFoundError(f"image folder {root!r} does not exist or is not a directory")
    found = []
    for dirpath, _, filenames in tf.io.gfile.walk(root):
        rel_dir = os.path.relpath(dirpath, root) if dirpath.rstrip("/") != root.rstrip("/") else ""
        for name in filenames:
            found.append(posixpath.join(rel_dir.replace(os.sep, "/"), name) if rel_dir else name)
    return sorted(found)


def is_hidden(relpath: str) -> bool:
    return any(part.startswith(".") for part in relpath.split("/"))


def has_image_extension(relpath: str) -> bool:
    return posixpath.splitext(relpath)[1].lower() in IMAGE_EXTENSIONS


def detect_layout(relpaths: list[str]) -> str:
    """`split` when every top-level folder holding images is a known split name."""
    top_dirs = {
        p.split("/")[0]
        for p in relpaths
        if "/" in p and not is_hidden(p) and has_image_extension(p)
    }
    if top_dirs and all(d.lower() in KNOWN_SPLIT_NAMES for d in top_dirs):
        return LAYOUT_SPLIT
    return LAYOUT_FLAT


def classify(relpaths: list[str], layout: str = LAYOUT_AUTO) -> Listing:
    """Sorts relative paths into labelled images, ignored files and unlabeled images."""
    if layout == LAYOUT_AUTO:
        layout = detect_layout(relpaths)
    label_depth = 1 if layout == LAYOUT_FLAT else 2
    images, ignored, unlabeled = [], [], []
    for relpath in sorted(relpaths):
        if is_hidden(relpath):
            ignored.append(ListedFile(relpath, "hidden file"))
            continue
        if not has_image_extension(relpath):
            ignored.append(ListedFile(relpath, "not an image file name"))
            continue
        parts = relpath.split("/")
        if len(parts) <= label_depth:
            where = "a label folder" if layout == LAYOUT_FLAT else "a <split>/<label> folder"
            unlabeled.append(ListedFile(relpath, f"image outside {where}"))
            continue
        split = parts[0] if layout == LAYOUT_SPLIT else None
        images.append(SourceImage(relpath, parts[label_depth - 1], split))
    return Listing(layout, images, ignored, unlabeled)


def list_images(root: str, layout: str = LAYOUT_AUTO) -> Listing:
    return classify(walk_files(root), layout)


def class_folders(root: str, layout: str) -> list[tuple[str | None, str]]:
    """(split folder or None, label) of every label folder under root, empty ones too.

    The listing sees files only, so a class folder with no file in it would vanish
    without a word; the conversion compares these folders with the classes it wrote
    and warns about each empty one.
    """

    def subfolders(folder: str) -> list[str]:
        # Object stores list folders with a trailing "/", which spares an isdir call each.
        return sorted(
            name.rstrip("/")
            for name in tf.io.gfile.listdir(folder)
            if not name.startswith(".")
            and (name.endswith("/") or tf.io.gfile.isdir(posixpath.join(folder, name)))
        )

    if layout == LAYOUT_FLAT:
        return [(None, label) for label in subfolders(root)]
    return [
        (split, label)
        for split in subfolders(root)
        for label in subfolders(posixpath.join(root, split))
    ]
