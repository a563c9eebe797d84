"""Lists an image folder: which files are images of which label (and split), and which
are ignored or skipped, with the reason. Listing is sorted, so it is the same on every run.

Layouts:
  flat:  root/<label>/**/file       (the split is decided later, by hash)
  split: root/<split>/<label>/**/file
Files nested deeper under a label folder belong to that label. What the walk cannot
read (links not followed, special files, names that are not UTF-8, unreadable folders;
see walk.py) is reported beside the files.
"""

from __future__ import annotations

import dataclasses
import posixpath

from imgpipe.components.common.formats.label_map import class_name_problem
from imgpipe.components.common.images import image_formats
from imgpipe.components.image_example_gen.options import LAYOUT_AUTO, LAYOUT_FLAT, LAYOUT_SPLIT
from imgpipe.components.image_example_gen.split_names import SPLIT_ALIASES
from imgpipe.components.image_example_gen.walk import Unlisted, walk_tree

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
    ignored: list[ListedFile]  # not images: hidden files, other names, links not followed
    skipped: list[ListedFile]  # images that cannot be read or labelled; special files
    folders: list[str] = dataclasses.field(default_factory=list)  # every folder walked

    @property
    def files_seen(self) -> int:
        return len(self.images) + len(self.ignored) + len(self.skipped)

    @property
    def labels(self) -> list[str]:
        return sorted({image.label for image in self.images})

    @property
    def given_splits(self) -> list[str]:
        return sorted({image.split for image in self.images if image.split is not None})


def is_hidden(relpath: str) -> bool:
    return any(part.startswith(".") for part in relpath.split("/"))


def has_image_extension(relpath: str) -> bool:
    return posixpath.splitext(relpath)[1].lower() in image_formats.EXTENSIONS


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


def classify(
    relpaths: list[str],
    layout: str = LAYOUT_AUTO,
    unlisted: list[Unlisted] | None = None,
    folders: list[str] | None = None,
) -> Listing:
    """Sorts relative paths into labelled images, ignored files and skipped ones.

    Args:
      unlisted: entries the walk did not list as files, with their reasons; hidden
        ones are ignored as hidden, like hidden files.
      folders: the folders walked (see class_folders).
    """
    if layout == LAYOUT_AUTO:
        layout = detect_layout(relpaths)
    label_depth = 1 if layout == LAYOUT_FLAT else 2
    images: list[SourceImage] = []
    ignored: list[ListedFile] = []
    skipped: list[ListedFile] = []
    for entry in unlisted or []:
        if is_hidden(entry.relpath):
            ignored.append(ListedFile(entry.relpath, "hidden file"))
        else:
            (skipped if entry.skipped else ignored).append(ListedFile(entry.relpath, entry.reason))
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
            skipped.append(ListedFile(relpath, f"image outside {where}"))
            continue
        label = parts[label_depth - 1]
        problem = class_name_problem(label)
        if problem is not None:
            skipped.append(
                ListedFile(
                    relpath, f"label folder '{label}' cannot be a class: {problem}; rename it"
                )
            )
            continue
        split = parts[0] if layout == LAYOUT_SPLIT else None
        images.append(SourceImage(relpath, label, split))
    ignored.sort(key=lambda f: f.relpath)
    skipped.sort(key=lambda f: f.relpath)
    return Listing(layout, images, ignored, skipped, sorted(folders or []))


def list_images(root: str, layout: str = LAYOUT_AUTO, follow_links: bool = False) -> Listing:
    """Walks `root` (see walk.py) and classifies what it holds.

    Raises:
      FileNotFoundError: root does not exist or is not a directory.
    """
    tree = walk_tree(root, follow_links)
    return classify(tree.files, layout, tree.unlisted, tree.folders)


def class_folders(listing: Listing) -> list[tuple[str | None, str]]:
    """(split folder or None, label) of every label folder walked, empty ones too.

    The images name only the classes that hold a file, so a class folder with no file
    in it would vanish without a word; the conversion compares these folders with the
    classes it wrote and warns about each empty one. Hidden folders and names that
    cannot be classes (their files are skipped with the reason) are left out.
    """
    depth = 1 if listing.layout == LAYOUT_FLAT else 2
    found = []
    for folder in listing.folders:
        parts = folder.split("/")
        if len(parts) != depth or is_hidden(folder) or class_name_problem(parts[-1]):
            continue
        found.append((parts[0] if depth == 2 else None, parts[-1]))
    return found


def refused_class_folders(listing: Listing) -> list[tuple[str, str]]:
    """(label, why) of every class folder whose name cannot be a class: its files are
    skipped one by one, and the class would vanish with no word of its own."""
    depth = 1 if listing.layout == LAYOUT_FLAT else 2
    found = []
    for folder in listing.folders:
        parts = folder.split("/")
        if len(parts) == depth and not is_hidden(folder):
            problem = class_name_problem(parts[-1])
            if problem:
                found.append((parts[-1], problem))
    return found
