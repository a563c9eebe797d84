"""The serving directory's contract: what a pushed model holds, and which one is served.

The Pusher copies a Trainer's serving model to <serving_dir>/<version>/, version being
an integer (seconds since the epoch), and writes PUSH_COMPLETE_FILE last; a version
folder without it is an interrupted push and is never read. The newest complete push
is the champion: the model a new candidate must not be worse than (the Evaluator), the
weights a warm start begins from (the Trainer), and the data the next run's statistics
are compared with (drift, in ImageStatistics).

Beside the SavedModel, a serving model holds in ASSETS_EXTRA_DIR:
  labels.txt        class names in id order (layout.LABELS_TXT_FILE)
  label_map.json    the same, as JSON (layout.LABEL_MAP_FILE)
  image_stats.json  the ImageStatistics of the data it was trained on
  model.weights.h5  the Keras weights, for a warm start
  weight_shapes.json  the shape of each of those weights, in order: a warm start loads
                    them only into a model of the same architecture
  reference/        the examples it was judged on when it was blessed, which the next
                    candidate is also judged on (reference_sets.py); a model server
                    loads nothing from assets.extra but warm-up requests
No TensorFlow here beyond the file seam.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath

from imgpipe.components.common import fileio, label_map, layout

ASSETS_EXTRA_DIR = "assets.extra"
WEIGHTS_FILE = "model.weights.h5"
WEIGHT_SHAPES_FILE = "weight_shapes.json"
PUSH_COMPLETE_FILE = "PUSH_COMPLETE"
# Below a push: its reference evaluation set (components/common/reference_sets.py).
REFERENCE_ASSET = posixpath.join(ASSETS_EXTRA_DIR, "reference")


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """One complete push.

    Attributes:
      path: the version folder, a SavedModel.
      version: its integer name.
      labels: class names in id order.
    """

    path: str
    version: int
    labels: tuple[str, ...]

    def asset(self, name: str) -> str:
        return posixpath.join(self.path, ASSETS_EXTRA_DIR, name)

    @property
    def statistics_uri(self) -> str | None:
        """The image_stats.json of its training data, or None for a model without it."""
        path = self.asset(layout.IMAGE_STATS_FILE)
        return path if fileio.exists(path) else None

    @property
    def weights_path(self) -> str | None:
        path = self.asset(WEIGHTS_FILE)
        return path if fileio.exists(path) else None

    @property
    def reference_dir(self) -> str:
        """Where its reference evaluation set is (absent in pushes made before them)."""
        return posixpath.join(self.path, REFERENCE_ASSET)

    def weight_shapes(self) -> list[list[int]] | None:
        path = self.asset(WEIGHT_SHAPES_FILE)
        if not fileio.exists(path):
            return None
        with fileio.open_file(path, "r") as f:
            return json.load(f)["shapes"]


def _versions(serving_dir: str) -> list[int]:

    if not serving_dir or not fileio.isdir(serving_dir):
        return []
    names = fileio.list_dir(serving_dir)
    return sorted((int(name) for name in names if name.isdigit()), reverse=True)


def read_labels(model_dir: str) -> tuple[str, ...]:
    """Class names of a serving model, from label_map.json or else labels.txt."""
    extra = posixpath.join(model_dir, ASSETS_EXTRA_DIR)
    path = posixpath.join(extra, layout.LABEL_MAP_FILE)
    if not fileio.exists(path):
        path = posixpath.join(extra, layout.LABELS_TXT_FILE)
    return label_map.read(path).labels


def latest(serving_dir: str | None) -> ServedModel | None:
    """The newest complete push in serving_dir, or None when nothing was pushed yet."""
    if not serving_dir:
        return None
    for version in _versions(serving_dir):
        path = posixpath.join(serving_dir, str(version))
        if fileio.exists(posixpath.join(path, PUSH_COMPLETE_FILE)):
            return ServedModel(path=path, version=version, labels=read_labels(path))
    return None
