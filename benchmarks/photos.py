"""The benchmark dataset: ImageNet-sized JPEG photos made from Debian's opencv-doc photos.

Each image is a seeded random crop (some mirrored) of a real photograph, scaled to about
500x375 like an average ImageNet image, and saved at JPEG quality 90. The same call
always writes the same files, and a finished dataset is reused.
"""

from __future__ import annotations

import glob
import os

import cv2
import numpy as np

from imgpipe.pipelines.sample_photos import find_source_dir

TARGET_SHAPES = ((375, 500), (500, 375), (333, 500), (375, 375))


def source_photos(min_side: int = 240) -> list[str]:
    """Every opencv-doc example photo with a shorter side of at least min_side.

    Found (or extracted from the package) by the demo's own locator.
    """
    examples = os.path.dirname(find_source_dir())  # .../opencv-doc/examples
    paths = sorted(glob.glob(os.path.join(examples, "**", "*.jpg"), recursive=True))
    photos = []
    for path in paths:
        image = cv2.imread(path, cv2.IMREAD_REDUCED_COLOR_2)
        if image is not None and min(image.shape[:2]) * 2 >= min_side:
            photos.append(path)
    if not photos:
        raise FileNotFoundError(f"no photos of at least {min_side} px under {examples}")
    return photos


def make_photo_dataset(out_dir: str, count: int = 3000, classes: int = 10, seed: int = 0) -> str:
    """Writes out_dir/class_<k>/<n>.jpg and returns out_dir."""
    stamp = os.path.join(out_dir, ".complete")
    expected = f"{count} {classes} {seed}"
    if os.path.exists(stamp) and open(stamp).read() == expected:
        return out_dir
    sources = source_photos()
    decoded = [cv2.imread(p, cv2.IMREAD_COLOR) for p in sources]
    rng = np.random.default_rng(seed)
    for k in range(classes):
        os.makedirs(os.path.join(out_dir, f"class_{k}"), exist_ok=True)
    for n in range(count):
        photo = decoded[int(rng.integers(len(decoded)))]
        height, width = TARGET_SHAPES[int(rng.integers(len(TARGET_SHAPES)))]
        scale = max(height / photo.shape[0], width / photo.shape[1]) * rng.uniform(1.0, 1.6)
        resized = cv2.resize(
            photo,
            None,
            fx=scale,
            fy=scale,
            interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC,
        )
        top = int(rng.integers(resized.shape[0] - height + 1))
        left = int(rng.integers(resized.shape[1] - width + 1))
        crop = resized[top : top + height, left : left + width]
        if rng.integers(2):
            crop = crop[:, ::-1]
        path = os.path.join(out_dir, f"class_{n % classes}", f"{n:05d}.jpg")
        cv2.imwrite(path, np.ascontiguousarray(crop), [cv2.IMWRITE_JPEG_QUALITY, 90])
    with open(stamp, "w") as f:
        f.write(expected)
    return out_dir
