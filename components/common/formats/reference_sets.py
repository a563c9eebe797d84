"""Reference evaluation sets: fixed examples every blessing decision is also judged on.

A candidate is compared with the champion on the new span's eval split, but that split
alone can be fooled: grey photos make a colour champion look weak. So each push keeps
the eval split it was judged on, its *reference set*, and the next candidate must not
be worse than the champion on it either. A user may also name a curated *golden set*
(EvaluatorConfig.golden_examples): an ImageExampleGen or `imgpipe convert` output,
every split of it pooled. And the eval splits of the earlier spans the candidate was
trained on (EARLIER_SPANS: the window's spans before this one, components/trainer/
window.py) are unseen by every model too, since no eval split is ever trained on: the
Evaluator scores them as one more set, each image once (components/evaluator/
references.py window_set).

A reference folder holds copies of the encoded examples and their class names:
  label_map.json, labels.txt   the set's class names in id order (label_map.py)
  data_tfrecord-*              the eval split's shards, copied byte for byte
  manifest.json                every file with its size and CRC-32C, written last
The Evaluator writes it into its blessing artifact (REFERENCE_DIR) when it blesses;
the Pusher copies that folder into the push at served_models.REFERENCE_ASSET, so it
lives and is deleted with the model it judged, and survives pipeline-root clean-ups.
No TensorFlow here beyond the file seam.
"""

from __future__ import annotations

import dataclasses
import os

from imgpipe.components.common.formats import artifacts, label_map, layout, manifest
from imgpipe.components.common.storage import fileio

REFERENCE_DIR = "reference"
# The sets a candidate is compared with the champion on, by name.
NEW_SPLIT = "new_split"
CHAMPION_REFERENCE = "champion_reference"
GOLDEN = "golden"
# The eval splits of the window's earlier spans, less the images the sets above hold.
EARLIER_SPANS = "earlier_spans"


@dataclasses.dataclass(frozen=True)
class ReferenceSet:
    """Encoded examples and the class names their label ids stand for.

    Attributes:
      name: NEW_SPLIT, CHAMPION_REFERENCE, EARLIER_SPANS or GOLDEN.
      uri: where the set was read.
      labels: class names in id order.
      shards: the TFRecord files.
    """

    name: str
    uri: str
    labels: tuple[str, ...]
    shards: tuple[str, ...]


def from_split(examples_uri: str, split: str, name: str = NEW_SPLIT) -> ReferenceSet:
    """One split of an ImageExampleGen output.

    Raises:
      FileNotFoundError: the split has no shard, or the output no label map.
    """
    shards = tuple(sorted(fileio.glob(artifacts.split_shard_pattern(examples_uri, split))))
    if not shards:
        raise FileNotFoundError(f"no shards in {artifacts.split_dir(examples_uri, split)}")
    return ReferenceSet(name, examples_uri, tuple(artifacts.load_labels(examples_uri)), shards)


def from_golden(uri: str) -> ReferenceSet:
    """A user's golden set: every split of an ImageExampleGen (or `imgpipe convert`)
    output, pooled.

    Raises:
      FileNotFoundError: no label map or no shard at uri.
      ValueError: the label map is unreadable.
    """
    pattern = os.path.join(uri, f"{layout.SPLIT_DIR_PREFIX}*", f"{layout.SHARD_PREFIX}-*")
    shards = tuple(sorted(fileio.glob(pattern)))
    if not shards:
        raise FileNotFoundError(f"no shards in {uri} (expected {pattern})")
    return ReferenceSet(GOLDEN, uri, tuple(artifacts.load_labels(uri)), shards)


def read(folder: str, name: str = CHAMPION_REFERENCE) -> ReferenceSet:
    """A reference folder, checked against its manifest byte for byte (it is small).

    Raises:
      FileNotFoundError: there is no reference folder.
      ValueError: it is incomplete or damaged (manifest.IncompleteOutputError), or its
        label map is unreadable; the message names the file.
    """
    if not fileio.isdir(folder):
        raise FileNotFoundError(f"{folder} does not exist")
    listed = manifest.verify(folder, checksums=True)
    shards = tuple(
        os.path.join(folder, relpath)
        for relpath in sorted(listed.files)
        if relpath.startswith(layout.SHARD_PREFIX)
    )
    if not shards:
        raise ValueError(f"{folder} holds no examples")
    labels = label_map.read(os.path.join(folder, layout.LABEL_MAP_FILE)).labels
    return ReferenceSet(name, folder, labels, shards)


def write(reference: ReferenceSet, folder: str) -> None:
    """Copies the set's shards and class names into `folder`, manifest last."""
    fileio.makedirs(folder)
    names = []
    for index, shard in enumerate(reference.shards):
        # Shards of a golden set come from several splits: numbered, so none collide.
        suffix = layout.GZIP_SUFFIX if artifacts.shard_compression(shard) else ""
        name = f"{layout.SHARD_PREFIX}-{index:05d}-of-{len(reference.shards):05d}{suffix}"
        fileio.copy(shard, os.path.join(folder, name), overwrite=True)
        names.append(name)
    label_map.write(folder, list(reference.labels))
    names += [layout.LABEL_MAP_FILE, layout.LABELS_TXT_FILE]
    manifest.write(folder, manifest.describe(folder, names))
