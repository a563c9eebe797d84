"""Class names to integer ids, stable across retraining runs when a label map is given."""

from __future__ import annotations

import json

import tensorflow as tf

from imgpipe.components.common import artifacts, layout
from imgpipe.components.image_example_gen.options import NEW_LABEL_APPEND


def read_label_map(uri: str) -> list[str]:
    """Reads class names in id order from a label_map.json or a labels.txt.

    Raises:
      FileNotFoundError: nothing at uri.
      ValueError: the file holds no usable label list.
    """
    if not tf.io.gfile.exists(uri):
        raise FileNotFoundError(f"label map {uri!r} does not exist")
    with tf.io.gfile.GFile(uri, "r") as f:
        text = f.read()
    if uri.endswith(".json"):
        labels = json.loads(text).get("labels")
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ValueError(f"label map {uri!r} needs a 'labels' list of strings")
    else:
        labels = [line.strip() for line in text.splitlines() if line.strip()]
    if len(set(labels)) != len(labels):
        raise ValueError(f"label map {uri!r} repeats a class name")
    return labels


def build_labels(found: list[str], existing: list[str] | None, on_new_label: str) -> list[str]:
    """Class names in id order: sorted, or the existing map plus (optionally) new classes.

    Raises:
      ValueError: a class is not in the existing map and on_new_label is `fail`.
    """
    if existing is None:
        return sorted(found)
    new = sorted(set(found) - set(existing))
    if new and on_new_label != NEW_LABEL_APPEND:
        raise ValueError(
            f"classes {new} are not in the given label map ({len(existing)} classes); "
            "pass on_new_label='append' to give them new ids at the end"
        )
    return list(existing) + new


def write_label_files(output_dir: str, labels: list[str]) -> None:
    artifacts.write_json(f"{output_dir}/{layout.LABEL_MAP_FILE}", {"version": 1, "labels": labels})
    with tf.io.gfile.GFile(f"{output_dir}/{layout.LABELS_TXT_FILE}", "w") as f:
        f.write("".join(f"{label}\n" for label in labels))
