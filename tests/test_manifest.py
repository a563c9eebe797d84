"""manifest.json: written last, read typed, and `verify` names what does not match; the
shard writer's checksums are computed while writing and match the files."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import tensorflow as tf

from imgpipe.components.common.formats import layout, manifest
from imgpipe.components.common.storage import fileio
from imgpipe.components.image_example_gen import shards

pytestmark = pytest.mark.unit


def _folder(tmp_path) -> str:
    """A small complete output: a shard and a JSON file, then the manifest."""
    folder = str(tmp_path / "out")
    os.makedirs(os.path.join(folder, "Split-train"))
    shard = shards.write_tfrecord(
        os.path.join(folder, "Split-train", "data_tfrecord-00000-of-00001"),
        [b"one", b"two" * 1000],
        gzip=False,
    ).shard
    with open(os.path.join(folder, "summary.json"), "w") as f:
        f.write('{"a": 1}\n')
    entries = {"Split-train/data_tfrecord-00000-of-00001": shard}
    entries.update(manifest.describe(folder, ["summary.json"]))
    manifest.write(folder, entries)
    return folder


def test_the_manifest_lists_every_file_and_verify_accepts_the_folder(tmp_path):
    folder = _folder(tmp_path)
    found = manifest.verify(folder, checksums=True)
    assert found == manifest.read(folder)
    shard = found.files["Split-train/data_tfrecord-00000-of-00001"]
    assert shard.records == 2
    assert shard.size == os.path.getsize(
        os.path.join(folder, "Split-train", "data_tfrecord-00000-of-00001")
    )
    assert found.files["summary.json"] == manifest.entry_of(b'{"a": 1}\n')
    assert sorted(os.listdir(folder)) == ["Split-train", layout.MANIFEST_FILE, "summary.json"]
    text = open(os.path.join(folder, layout.MANIFEST_FILE)).read()
    assert json.loads(text)["version"] == manifest.SCHEMA_VERSION
    manifest.write(folder, dict(reversed(list(found.files.items()))))
    assert open(os.path.join(folder, layout.MANIFEST_FILE)).read() == text  # deterministic


@pytest.mark.parametrize(
    "damage, message",
    [
        ("no manifest", r"out is incomplete: it has no manifest.json, which is written last"),
        ("missing shard", r"Split-train/data_tfrecord-00000-of-00001 is missing, though"),
        ("extra shard", r"Split-train/data_tfrecord-00000-of-00002 is not in .*manifest.json"),
        ("truncated shard", r"data_tfrecord-00000-of-00001 has \d+ bytes, but .* says \d+"),
        ("changed summary", r"summary.json has CRC-32C \w+, but .* says \w+"),
    ],
)
def test_verify_refuses_an_output_that_differs_and_names_the_file(tmp_path, damage, message):
    folder = _folder(tmp_path)
    shard = os.path.join(folder, "Split-train", "data_tfrecord-00000-of-00001")
    if damage == "no manifest":
        os.remove(os.path.join(folder, layout.MANIFEST_FILE))
    elif damage == "missing shard":
        os.remove(shard)
    elif damage == "extra shard":
        os.link(shard, shard.replace("of-00001", "of-00002"))
    elif damage == "truncated shard":
        os.truncate(shard, 20)
    else:
        with open(os.path.join(folder, "summary.json"), "w") as f:
            f.write('{"a": 2}\n')  # same size
    with pytest.raises(manifest.IncompleteOutputError, match=message):
        manifest.verify(folder)


def test_a_large_file_is_checksummed_only_when_asked(tmp_path):
    folder = str(tmp_path / "out")
    os.makedirs(folder)
    big = os.path.join(folder, "weights.bin")
    with open(big, "wb") as f:
        f.write(b"\x00" * (manifest.CHECKSUMMED_ON_READ_BYTES + 1))
    manifest.write(folder, manifest.describe(folder, ["weights.bin"]))
    with open(big, "r+b") as f:
        f.write(b"\x01")  # same size, other bytes
    manifest.verify(folder)
    with pytest.raises(manifest.IncompleteOutputError, match="weights.bin has CRC-32C"):
        manifest.verify(folder, checksums=True)


@pytest.mark.parametrize(
    "document, message",
    [
        ({"version": 2, "files": {}}, "schema version 2; this release reads version 1"),
        ({"version": 1, "files": {}, "extra": 1}, r"unknown key\(s\) \['extra'\]"),
        ({"version": 1, "files": {"a": {"size": 1}}}, "files.a: .*crc32c"),
        (
            {"version": 1, "files": {"a": {"size": 1, "crc32c": "xyz"}}},
            "crc32c must be 8 lowercase hex digits",
        ),
        (
            {"version": 1, "files": {"../a": {"size": 1, "crc32c": "00000000"}}},
            "files holds '../a', which is not a file inside the folder",
        ),
    ],
)
def test_other_shapes_are_refused_naming_the_field(tmp_path, document, message):
    with open(tmp_path / layout.MANIFEST_FILE, "w") as f:
        json.dump(document, f)
    with pytest.raises(ValueError, match=message):
        manifest.read(str(tmp_path))


@pytest.mark.parametrize("gzip", [False, True])
def test_shards_are_tfrecords_whose_entry_is_computed_while_writing(tmp_path, gzip):
    records = [b"", b"x", os.urandom(100), os.urandom(70_000)]
    path = str(tmp_path / ("shard.gz" if gzip else "shard"))
    index_path = None if gzip else str(tmp_path / "shard.idx")
    written = shards.write_tfrecord(path, records, gzip, index_path)
    name = os.path.basename(path)
    assert written.shard == dataclasses.replace(
        manifest.describe(str(tmp_path), [name])[name], records=4
    )
    if index_path is not None:  # DALI's index: `offset size` of each framed record
        assert open(index_path).read() == "0 16\n16 17\n33 116\n149 70016\n"
        assert written.index == manifest.describe(str(tmp_path), ["shard.idx"])["shard.idx"]
    else:
        assert written.index is None
        with pytest.raises(ValueError, match="DALI cannot index a GZIP"):
            shards.write_tfrecord(path, records, gzip, str(tmp_path / "shard.idx"))
    read_back = tf.data.TFRecordDataset(path, layout.GZIP if gzip else "")
    assert [r.numpy() for r in read_back] == records
    if not gzip:  # the same bytes as TensorFlow's own writer
        reference = str(tmp_path / "reference")
        with tf.io.TFRecordWriter(reference) as writer:
            for record in records:
                writer.write(record)
        assert open(reference, "rb").read() == open(path, "rb").read()


def test_atomic_writes_and_folder_moves_leave_nothing_behind(tmp_path):
    target = str(tmp_path / "a" / "file.json")
    os.makedirs(os.path.dirname(target))
    fileio.write_atomic(target, b"1")
    fileio.write_atomic(target, b"22")
    assert os.listdir(tmp_path / "a") == ["file.json"]
    assert open(target, "rb").read() == b"22"
    fileio.rename(str(tmp_path / "a"), str(tmp_path / "b"))
    assert fileio.list_files(str(tmp_path)) == ["b/file.json"]
    fileio.remove(str(tmp_path / "b"))
    fileio.remove(str(tmp_path / "b"))  # gone already: fine
    assert fileio.list_dir(str(tmp_path)) == []
