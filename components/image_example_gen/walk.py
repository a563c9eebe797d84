"""Walks an image folder without leaving it, without looping and without opening anything.

A local tree is walked with `os.scandir` on byte paths, from the entries' own types
(lstat), so that:
  - a FIFO, socket or device is reported, never opened (opening a FIFO blocks for good);
  - a symbolic link is reported and not followed, unless `follow_links` is set; even
    then, only links that resolve inside the input root are followed, a link back to a
    folder above it (a loop) is reported, and a folder is entered through links once;
  - a folder that is also one of its own parents (a bind mount of a parent) is reported;
  - a name that is not UTF-8 is reported by its escaped bytes, and the walk goes on;
  - an unreadable folder is reported, and the walk goes on.
Object stores (gs://, s3://) have no links or special files; their trees are walked
through tf.io.gfile.

Every entry that is not a regular file to read is `Unlisted`, with its reason and
whether it counts as skipped (it may have been an image) or ignored (it is not one).
The folders entered are listed too, so that an empty class folder can be named.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import stat

from imgpipe.components.common.runtime.printable import printable_bytes
from imgpipe.components.common.storage import fileio, object_store

LINK_NOT_FOLLOWED = (
    "symbolic link: not followed (follow_links follows links that stay inside the input root)"
)
LINK_OUTSIDE_ROOT = "symbolic link to outside the input root: not followed"
LINK_LOOP = "symbolic link loop: leads back to a folder above it"
LINK_REPEATED = "symbolic link to a folder already listed through another link: not followed"
LINK_DANGLING = "dangling symbolic link: its target does not exist"
FOLDER_LOOP = "folder loop: the same folder as one above it (a bind mount?): not listed"
NAME_NOT_UTF8 = "name is not valid UTF-8: rename it"
_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


@dataclasses.dataclass(frozen=True)
class Unlisted:
    """An entry that is not read: a link not followed, a special file, a bad name..."""

    relpath: str  # posix, relative to the root; escaped (printable_bytes) if not UTF-8
    reason: str
    skipped: bool  # counts as skipped (could have been an image), else as ignored


@dataclasses.dataclass
class Tree:
    files: list[str]  # regular files to read, as sorted posix paths relative to the root
    unlisted: list[Unlisted]
    folders: list[str] = dataclasses.field(default_factory=list)  # entered, sorted, UTF-8


def special_file_reason(mode: int) -> str:
    kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "unknown file type")
    return f"special file ({kind}): not read"


def unreadable_folder_reason(error: OSError) -> str:
    return f"unreadable folder: {error.strerror or error}"


def walk_tree(root: str, follow_links: bool = False) -> Tree:
    """Every entry below `root`, sorted: the regular files, and the rest with reasons.

    Args:
      follow_links: follow symbolic links that resolve inside `root` (never those that
        leave it).

    Raises:
      FileNotFoundError: root does not exist or is not a directory.
    """
    if fileio.is_local(root):
        local = fileio.local_path(root)
        if not os.path.isdir(local):
            raise FileNotFoundError(f"image folder {root!r} does not exist or is not a directory")
        return _walk_local(os.fsencode(local), follow_links)
    return _walk_remote(root)


def _decoded(relpath: bytes) -> str | None:
    try:
        return relpath.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _LocalWalk:
    def __init__(self, root: bytes, follow_links: bool):
        self.real_root = os.path.realpath(root)
        self.follow_links = follow_links
        self.files: list[str] = []
        self.unlisted: list[Unlisted] = []
        self.folders: list[str] = []
        # Folders entered through a link: each at most once, so that links cannot
        # multiply a tree (two links to one folder in each of n levels: 2**n copies).
        self.entered_by_link: set[tuple[int, int]] = set()

    def unlist(self, relpath: bytes, reason: str, skipped: bool) -> None:
        name = _decoded(relpath)
        self.unlisted.append(
            Unlisted(printable_bytes(relpath) if name is None else name, reason, skipped)
        )

    def add_file(self, relpath: bytes) -> None:
        name = _decoded(relpath)
        if name is None:
            self.unlist(relpath, NAME_NOT_UTF8, skipped=True)
        else:
            self.files.append(name)

    def inside_root(self, path: bytes) -> bool:
        target = os.path.realpath(path)
        return target == self.real_root or target.startswith(self.real_root.rstrip(b"/") + b"/")


def _walk_local(root: bytes, follow_links: bool) -> Tree:
    walk = _LocalWalk(root, follow_links)
    root_stat = os.stat(root)
    # (folder path, its path relative to the root, (st_dev, st_ino) of it and its parents)
    stack: list[tuple[bytes, bytes, tuple[tuple[int, int], ...]]] = [
        (root, b"", ((root_stat.st_dev, root_stat.st_ino),))
    ]
    while stack:
        folder, rel_folder, parents = stack.pop()
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as e:
            walk.unlist(rel_folder or b".", unreadable_folder_reason(e), skipped=True)
            continue
        for entry in entries:
            relpath = rel_folder + b"/" + entry.name if rel_folder else entry.name
            try:
                subfolder = _visit(walk, entry, relpath, parents)
            except OSError as e:  # the entry vanished or cannot be stat'ed
                walk.unlist(relpath, f"unreadable: {e.strerror or e}", skipped=True)
                continue
            if subfolder is not None:
                stack.append((entry.path, relpath, (*parents, subfolder)))
                name = _decoded(relpath)
                if name is not None:
                    walk.folders.append(name)
    walk.files.sort()
    walk.unlisted.sort(key=lambda entry: entry.relpath)
    return Tree(walk.files, walk.unlisted, sorted(walk.folders))


def _visit(
    walk: _LocalWalk, entry: os.DirEntry, relpath: bytes, parents: tuple[tuple[int, int], ...]
) -> tuple[int, int] | None:
    """Files or reports one entry; returns the (st_dev, st_ino) of a folder to enter."""
    if entry.is_symlink():
        return _visit_link(walk, entry, relpath, parents)
    if entry.is_dir(follow_symlinks=False):
        info = entry.stat(follow_symlinks=False)
        key = (info.st_dev, info.st_ino)
        if key in parents:
            walk.unlist(relpath, FOLDER_LOOP, skipped=False)
            return None
        return key
    if entry.is_file(follow_symlinks=False):
        walk.add_file(relpath)
    else:
        walk.unlist(relpath, special_file_reason(entry.stat(follow_symlinks=False).st_mode), True)
    return None


def _visit_link(
    walk: _LocalWalk, entry: os.DirEntry, relpath: bytes, parents: tuple[tuple[int, int], ...]
) -> tuple[int, int] | None:
    if not walk.follow_links:
        walk.unlist(relpath, LINK_NOT_FOLLOWED, skipped=False)
        return None
    if not walk.inside_root(entry.path):
        walk.unlist(relpath, LINK_OUTSIDE_ROOT, skipped=False)
        return None
    try:
        target = os.stat(entry.path)
    except FileNotFoundError:
        walk.unlist(relpath, LINK_DANGLING, skipped=True)
        return None
    except OSError as e:  # ELOOP: links that lead to each other
        walk.unlist(relpath, f"unreadable symbolic link: {e.strerror or e}", skipped=True)
        return None
    if stat.S_ISDIR(target.st_mode):
        key = (target.st_dev, target.st_ino)
        if key in parents:
            walk.unlist(relpath, LINK_LOOP, skipped=False)
        elif key in walk.entered_by_link:
            walk.unlist(relpath, LINK_REPEATED, skipped=False)
        else:
            walk.entered_by_link.add(key)
            return key
    elif stat.S_ISREG(target.st_mode):
        walk.add_file(relpath)
    else:
        walk.unlist(relpath, special_file_reason(target.st_mode), skipped=True)
    return None


def _walk_object_store(root: str) -> Tree:
    """The tree from one listing of the prefix (a request per 1,000 objects)."""
    if not object_store.isdir(root):
        raise FileNotFoundError(f"image folder {root!r} does not exist or is not a directory")
    files: list[str] = []
    folders: list[str] = []
    base = root.rstrip("/")
    for folder, subfolders, names in object_store.walk(root):
        relative = folder[len(base) + 1 :]
        prefix = relative + "/" if relative else ""
        files.extend(prefix + name for name in names)
        folders.extend(prefix + name for name in subfolders)
    return Tree(sorted(files), [], sorted(folders))


def _walk_remote(root: str) -> Tree:
    import tensorflow as tf

    if object_store.is_object_store(root):
        return _walk_object_store(root)
    if not tf.io.gfile.isdir(root):
        raise FileNotFoundError(f"image folder {root!r} does not exist or is not a directory")
    files: list[str] = []
    unlisted: list[Unlisted] = []
    folders: list[str] = []
    stack = [""]
    while stack:
        rel_folder = stack.pop()
        folder = posixpath.join(root, rel_folder) if rel_folder else root
        try:
            children = tf.io.gfile.listdir(folder)
        except tf.errors.OpError as e:
            unlisted.append(
                Unlisted(rel_folder or ".", f"unreadable folder: {e.message}", skipped=True)
            )
            continue
        for child in sorted(children):
            name = child.rstrip("/")
            relpath = posixpath.join(rel_folder, name) if rel_folder else name
            if child.endswith("/") or tf.io.gfile.isdir(posixpath.join(root, relpath)):
                stack.append(relpath)
                folders.append(relpath)
            else:
                files.append(relpath)
    return Tree(sorted(files), sorted(unlisted, key=lambda entry: entry.relpath), sorted(folders))
