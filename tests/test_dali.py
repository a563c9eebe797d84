"""NVIDIA DALI reads ImageExampleGen's shards through the index files written beside
them: its own TFRecord reader, on CPU (no GPU here), gives every record byte for byte,
and its own tfrecord2idx writes the same index files."""

from __future__ import annotations

import os
import runpy
import sys

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import dali_input
from imgpipe.components.common.formats import conversion_summary
from imgpipe.components.common.formats import features as fk
from imgpipe.components.image_example_gen import shards as shards_lib
from imgpipe.components.image_example_gen.convert import run_conversion
from imgpipe.components.image_example_gen.options import ImageOptions, OutputOptions
from imgpipe.components.trainer import input as input_lib
from tests import imagegen
from tests.test_image_example_gen_convert import in_process

pytestmark = pytest.mark.platform

SPLITS = ("train", "eval")


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> str:
    """Pass-through shards of three labels of differently sized JPEGs, 3 shards a split,
    so that records sit deep in shards."""
    root = str(tmp_path_factory.mktemp("images"))
    imagegen.make_image_folder(root, {"a": 9, "b": 8}, size=(40, 56))
    imagegen.make_image_folder(os.path.join(root, "tall"), {"c": 5}, size=(72, 30), seed=3)
    out = str(tmp_path_factory.mktemp("examples"))
    run_conversion(
        root,
        out,
        ImageOptions(),
        OutputOptions(layout="flat", num_shards=3, splits=(("train", 0.7), ("eval", 0.3))),
        in_process,
    )
    return out


def _tf_records(shards: list[str]) -> list[tf.train.Example]:
    return [
        tf.train.Example.FromString(raw)
        for raw in tf.data.TFRecordDataset(shards).as_numpy_iterator()
    ]


def _feature(example: tf.train.Example, key: str):
    feature = example.features.feature[key]
    return feature.bytes_list.value[0] if feature.bytes_list.value else feature.int64_list.value[0]


def _dali_records(shards: list[str], indexes: list[str]) -> list[tuple[bytes, int, bytes]]:
    """(encoded, label, filename) of every record, in file order, by DALI's reader."""
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def read():
        inputs = fn.readers.tfrecord(
            path=shards,
            index_path=indexes,
            features={
                fk.IMAGE_ENCODED_KEY: tfrec.FixedLenFeature((), tfrec.string, ""),
                fk.LABEL_KEY: tfrec.FixedLenFeature([1], tfrec.int64, -1),
                fk.FILENAME_KEY: tfrec.FixedLenFeature((), tfrec.string, ""),
            },
            random_shuffle=False,
            pad_last_batch=True,
            name="Reader",
        )
        return inputs[fk.IMAGE_ENCODED_KEY], inputs[fk.LABEL_KEY], inputs[fk.FILENAME_KEY]

    pipe = read()
    pipe.build()
    count = pipe.epoch_size("Reader")
    records = []
    while len(records) < count:
        encoded, labels, names = pipe.run()
        for i in range(len(encoded)):
            records.append(
                (
                    np.array(encoded[i]).tobytes(),
                    int(np.array(labels[i])[0]),
                    np.array(names[i]).tobytes(),
                )
            )
    return records[:count]


def test_dalis_reader_gives_every_record_byte_for_byte_through_the_index_files(examples, tmp_path):
    summary = conversion_summary.read(examples)
    # A split can be published with empty shards; DALI reads their empty index as such.
    empty = shards_lib.write_tfrecord(
        str(tmp_path / "empty"), [], gzip=False, index_path=str(tmp_path / "empty.idx")
    )
    assert empty.index is not None and empty.index.size == 0
    for split in SPLITS:
        shards, indexes = dali_input.split_files(examples, split)
        # The Trainer's reader takes the shards only: the index files live elsewhere.
        assert list(input_lib.split_source(examples, split).files) == shards
        expected = [
            (
                _feature(example, fk.IMAGE_ENCODED_KEY),
                _feature(example, fk.LABEL_KEY),
                _feature(example, fk.FILENAME_KEY),
            )
            for example in _tf_records(shards)
        ]
        assert len(expected) == summary.splits[split].records > 0
        assert _dali_records(shards, indexes) == expected
        assert (
            _dali_records(
                [str(tmp_path / "empty"), *shards], [str(tmp_path / "empty.idx"), *indexes]
            )
            == expected
        )


def test_dalis_own_tfrecord2idx_writes_the_same_index_files(examples, tmp_path, monkeypatch):
    script = os.path.join(os.path.dirname(sys.executable), "tfrecord2idx")
    shards, indexes = dali_input.split_files(examples, "train")
    for shard, index in zip(shards, indexes, strict=True):
        theirs = str(tmp_path / "theirs.idx")
        monkeypatch.setattr(sys, "argv", ["tfrecord2idx", shard, theirs])
        runpy.run_path(script, run_name="__main__")
        assert open(theirs).read() == open(index).read() != ""


def test_the_cpu_training_pipeline_crops_resizes_flips_and_batches(examples):
    pipe = dali_input.train_pipeline(
        examples, "train", batch_size=5, image_size=24, num_threads=1, seed=1
    )
    pipe.build()
    labels_seen = set()
    for _ in range(3):
        images, labels = pipe.run()
        batch = np.stack([np.array(images[i]) for i in range(len(images))])
        assert batch.shape == (5, 24, 24, 3) and batch.dtype == np.uint8
        assert batch.std() > 0  # decoded pixels, not a fill
        labels_seen |= {int(np.array(labels[i])[0]) for i in range(len(labels))}
    assert labels_seen <= {0, 1, 2} and len(labels_seen) > 1


def test_shards_without_index_files_are_refused_naming_the_fix(examples, tmp_path):
    gzipped = str(tmp_path / "gz")
    root = str(tmp_path / "images")
    imagegen.make_image_folder(root, {"a": 2, "b": 2})
    run_conversion(root, gzipped, ImageOptions(), OutputOptions(gzip=True), in_process)
    with pytest.raises(FileNotFoundError, match="has no DALI index .* convert again without gzip"):
        dali_input.split_files(gzipped, "train")
    with pytest.raises(ValueError, match="device 'gpu' takes device_id=a GPU index"):
        dali_input.train_pipeline(examples, "train", batch_size=2, image_size=8, device="gpu")
