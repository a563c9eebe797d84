"""Small file trees for tests: files at any path (bytes paths too), and folders deeper
than the system's path limit."""

from __future__ import annotations

import os


def touch(path: str | bytes, data: bytes = b"\xff\xd8\xff") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def make_deep(root: str, levels: int, name: str) -> None:
    """root/name/name/.../x.jpg, deeper than PATH_MAX, made with folder descriptors."""
    fd = os.open(root, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir(name, dir_fd=fd)
        deeper = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.close(os.open("x.jpg", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
