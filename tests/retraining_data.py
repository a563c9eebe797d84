"""Generated spans for the retraining tests: three colour classes that a small CNN
separates, with noise, varied sizes and tints, written as JPEGs.

span_folder writes root/span-<n>/<label>/*.jpg; variants shuffle the labels (a data
bug: any model trained on them is at chance) or turn every image grey (a camera
change: drift).
"""

from __future__ import annotations

import os

import numpy as np

from tests.imagegen import jpeg_bytes, write

COLOURS = {"red": (200, 40, 40), "green": (40, 180, 60), "blue": (40, 60, 200)}
LABELS = tuple(sorted(COLOURS))


def colour_image(label: str, index: int, size: int = 48) -> np.ndarray:
    rng = np.random.default_rng([index, LABELS.index(label)])
    height, width = (int(v) for v in rng.integers(size * 3 // 4, size * 5 // 4, 2))
    tint = np.array(COLOURS[label]) + rng.uniform(-40, 40, 3)
    pixels = tint + rng.normal(0, 25, (height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def grey(pixels: np.ndarray) -> np.ndarray:
    luma = pixels @ np.array([0.299, 0.587, 0.114])
    return np.repeat(luma[..., None], 3, axis=-1).astype(np.uint8)


def span_folder(
    root: str,
    span: int,
    per_class: int,
    shuffle_labels: bool = False,
    greyscale: bool = False,
    size: int = 48,
) -> str:
    """Writes span `span` under root; images 0..per_class-1 of each class, so a later
    span with more per class holds the earlier one's images and new ones."""
    folder = os.path.join(root, f"span-{span}")
    rng = np.random.default_rng(span)
    for label in LABELS:
        for i in range(per_class):
            pixels = colour_image(label, i, size)
            if greyscale:
                pixels = grey(pixels)
            filed_under = LABELS[rng.integers(len(LABELS))] if shuffle_labels else label
            write(os.path.join(folder, filed_under, f"{label}-{i:04d}.jpg"), jpeg_bytes(pixels))
    return folder


def held_out(per_class: int, size: int = 48) -> tuple[list[bytes], list[str]]:
    """Encoded images no span holds, with their labels: for served accuracy."""
    images, labels = [], []
    for label in LABELS:
        for i in range(per_class):
            images.append(jpeg_bytes(colour_image(label, 100_000 + i, size)))
            labels.append(label)
    return images, labels


def served_accuracy(model_dir: str, per_class: int = 30) -> float:
    """Accuracy of a served model's serving_default signature on held-out images."""
    import tensorflow as tf

    from imgpipe.components.common.images.serving_limits import DEFAULT_MAX_REQUEST_IMAGES

    images, labels = held_out(per_class)
    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    step = DEFAULT_MAX_REQUEST_IMAGES  # a request holds at most this many
    requests = [tf.constant(images[i : i + step]) for i in range(0, len(images), step)]
    predicted = np.concatenate([signature(images=r)["predicted_class"].numpy() for r in requests])
    return float(np.mean([p.decode() == t for p, t in zip(predicted, labels, strict=True)]))
