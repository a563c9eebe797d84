"""Sample photos in labelled folders, made without the internet: the demo's dataset, and
the source of the benchmarks' photos.

The photos come from Debian's `opencv-doc` package (OpenCV's sample images: animals,
buildings, fruit, calibration chessboards). Each class is a handful of source photos;
the images of a class are crops of them at seeded random positions and scales, some
mirrored, so the same call always writes the same bytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

import numpy as np

OPENCV_DOC_DATA = "/usr/share/doc/opencv-doc/examples/data"
# Where an extracted opencv-doc package lands when it is not installed.
FALLBACK_DIR = os.path.join(tempfile.gettempdir(), "imgpipe-opencv-doc")
_PACKAGE_DATA_SUBDIR = "usr/share/doc/opencv-doc/examples/data"

CLASSES: dict[str, tuple[str, ...]] = {
    "animal": ("baboon.jpg", "squirrel_cls.jpg", "butterfly.jpg", "HappyFish.jpg"),
    "building": ("building.jpg", "home.jpg", "leuvenA.jpg", "leuvenB.jpg"),
    "chessboard": tuple(
        f"{side}{i:02d}.jpg"
        for side in ("left", "right")
        for i in (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14)
    ),
    "fruit": ("apple.jpg", "orange.jpg", "fruits.jpg"),
}
DEFAULT_PER_CLASS = 80
DEFAULT_SIZE = 160
_JPEG_QUALITY = 90
# The smallest crop side, as a fraction of the source's shorter side.
_MIN_CROP = 0.4


def find_source_dir() -> str:
    """The folder with OpenCV's sample photos; extracts the package if it is missing.

    Raises:
      FileNotFoundError: opencv-doc is neither installed nor downloadable, with the fix.
    """
    for candidate in (OPENCV_DOC_DATA, os.path.join(FALLBACK_DIR, _PACKAGE_DATA_SUBDIR)):
        if _has_sources(candidate):
            return candidate
    _extract_package(FALLBACK_DIR)
    candidate = os.path.join(FALLBACK_DIR, _PACKAGE_DATA_SUBDIR)
    if _has_sources(candidate):
        return candidate
    raise FileNotFoundError(f"the opencv-doc package in {FALLBACK_DIR} lacks {candidate}")


def _has_sources(folder: str) -> bool:
    return all(
        os.path.isfile(os.path.join(folder, name)) for names in CLASSES.values() for name in names
    )


def _extract_package(target: str) -> None:
    """apt-get download opencv-doc, then dpkg -x: needs apt sources, not root."""
    if not shutil.which("apt-get") or not shutil.which("dpkg"):
        raise FileNotFoundError(
            f"the demo photos need Debian's opencv-doc package ({OPENCV_DOC_DATA} is missing) "
            "and this system has no apt-get/dpkg: install opencv-doc, or pass your own "
            "image folder to 'imgpipe run local --data DIR'"
        )
    os.makedirs(target, exist_ok=True)
    with tempfile.TemporaryDirectory() as download_dir:
        try:
            subprocess.run(
                ["apt-get", "download", "opencv-doc"],
                cwd=download_dir,
                check=True,
                capture_output=True,
                text=True,
            )
            (deb,) = [n for n in os.listdir(download_dir) if n.endswith(".deb")]
            subprocess.run(
                ["dpkg", "-x", os.path.join(download_dir, deb), target],
                check=True,
                capture_output=True,
                text=True,
            )
        except (subprocess.CalledProcessError, ValueError) as e:
            detail = getattr(e, "stderr", "") or str(e)
            raise FileNotFoundError(
                f"the demo photos need Debian's opencv-doc package ({OPENCV_DOC_DATA} is "
                f"missing) and 'apt-get download opencv-doc' failed: {detail.strip()}. "
                "Install it with 'apt-get install opencv-doc' (as root, with network), or "
                "pass your own image folder to 'imgpipe run local --data DIR'"
            ) from None


def crop_boxes(
    height: int,
    width: int,
    count: int,
    rng: np.random.RandomState,
) -> list[tuple[int, int, int, bool]]:
    """`count` square crops (top, left, side, mirrored) inside a height x width photo."""
    short = min(height, width)
    boxes = []
    for _ in range(count):
        side = int(round(short * rng.uniform(_MIN_CROP, 1.0)))
        top = int(rng.randint(0, height - side + 1))
        left = int(rng.randint(0, width - side + 1))
        boxes.append((top, left, side, bool(rng.randint(2))))
    return boxes


def make_dataset(
    out_dir: str,
    per_class: int = DEFAULT_PER_CLASS,
    size: int = DEFAULT_SIZE,
    seed: int = 0,
    source_dir: str | None = None,
    classes: Sequence[str] | None = None,
) -> dict[str, int]:
    """Writes out_dir/<class>/<source>_<n>.jpg, size x size, and returns the counts.

    An existing, complete dataset with the same settings is left untouched (its files
    keep their mtimes, so TFX's input fingerprint and cache stay valid).

    Args:
      out_dir: the dataset root (created).
      per_class: images per class.
      size: side of the square JPEGs.
      seed: seeds crop positions and scales.
      source_dir: OpenCV's sample photos; default: find_source_dir().
      classes: a subset of CLASSES' names; default: all.
    """
    import cv2

    names = sorted(classes or CLASSES)
    stamp = f"per_class={per_class} size={size} seed={seed} classes={','.join(names)}\n"
    # Beside the root, not in it: the root holds nothing but class folders.
    stamp_path = out_dir.rstrip("/") + ".sample_photos"
    if os.path.isfile(stamp_path) and open(stamp_path).read() == stamp and os.path.isdir(out_dir):
        return {name: len(os.listdir(os.path.join(out_dir, name))) for name in names}
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    source_dir = source_dir or find_source_dir()
    counts = {}
    for class_index, name in enumerate(names):
        sources = CLASSES[name]
        class_dir = os.path.join(out_dir, name)
        os.makedirs(class_dir)
        rng = np.random.RandomState(seed * 1000 + class_index)
        used: set[tuple[str, int, int, int, bool]] = set()
        for i in range(per_class):
            source = sources[i % len(sources)]
            photo = cv2.imread(os.path.join(source_dir, source), cv2.IMREAD_COLOR)
            if photo is None:
                raise ValueError(f"{os.path.join(source_dir, source)}: not a readable image")
            # No two images the same: an exact copy across splits is leakage.
            box = None
            while box is None or (source, *box) in used:
                height, width = photo.shape[:2]
                (box,) = crop_boxes(height, width, 1, rng)
            used.add((source, *box))
            top, left, side, mirrored = box
            crop = photo[top : top + side, left : left + side]
            if mirrored:
                crop = crop[:, ::-1]
            crop = cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA)
            ok, encoded = cv2.imencode(".jpg", crop, [cv2.IMWRITE_JPEG_QUALITY, _JPEG_QUALITY])
            if not ok:
                raise ValueError(f"could not encode a crop of {source}")
            stem = os.path.splitext(source)[0]
            with open(os.path.join(class_dir, f"{stem}_{i:03d}.jpg"), "wb") as f:
                f.write(encoded.tobytes())
        counts[name] = per_class
    with open(stamp_path, "w") as f:
        f.write(stamp)
    return counts
