"""The conversion on real Beam: layout, bad input, counts, determinism, round trip, shards."""

from __future__ import annotations

import hashlib
import json
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from imgpipe.components.common.formats import artifacts, conversion_summary, layout, manifest
from imgpipe.components.common.formats import features as fk
from imgpipe.components.image_example_gen import tasks, transforms, walk
from imgpipe.components.image_example_gen.convert import run_conversion
from imgpipe.components.image_example_gen.options import ImageOptions, OutputOptions
from tests import imagegen

pytestmark = pytest.mark.component


def in_process() -> beam.Pipeline:
    return beam.Pipeline(options=PipelineOptions(["--direct_num_workers=1"]))


def multi_process() -> beam.Pipeline:
    return beam.Pipeline(
        options=PipelineOptions(
            ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
        )
    )


def read_split(output_dir: str, split: str) -> list[tf.train.Example]:
    records = []
    for path in sorted(tf.io.gfile.glob(artifacts.split_shard_pattern(output_dir, split))):
        compression = "GZIP" if path.endswith(".gz") else ""
        for raw in tf.data.TFRecordDataset(path, compression_type=compression):
            records.append(tf.train.Example.FromString(raw.numpy()))
    return records


def feature(example: tf.train.Example, key: str):
    f = example.features.feature[key]
    return f.bytes_list.value[0] if f.bytes_list.value else f.int64_list.value[0]


@pytest.fixture(scope="module")
def messy_folder(tmp_path_factory) -> str:
    """Good images of three labels, plus one of every kind of bad or ignored file."""
    root = str(tmp_path_factory.mktemp("messy"))
    imagegen.make_image_folder(root, {"cat": 12, "dog": 10, "owl": 8})
    good_jpeg = imagegen.jpeg_bytes(imagegen.photo_like(40, 40, seed=99))
    bomb = bytearray(imagegen.png_bytes(np.zeros((1, 1, 3), np.uint8)))
    bomb[16:24] = (12000).to_bytes(4, "big") + (12000).to_bytes(4, "big")
    corrupt_png = bytearray(imagegen.png_bytes(imagegen.photo_like(32, 32)))
    corrupt_png[60:200] = b"\x00" * 140
    for rel, data in {
        "cat/truncated.jpg": good_jpeg[: len(good_jpeg) // 2],
        "cat/empty.jpg": b"",
        "dog/text.jpg": b"I am a text file with an image name\n",
        "dog/bomb.png": bytes(bomb),
        "owl/corrupt-body.png": bytes(corrupt_png),
        "owl/nested/deeper/cmyk.jpg": imagegen.cmyk_jpeg_bytes(imagegen.photo_like(20, 20)),
        "owl/UPPER.JPG": good_jpeg,
        "stray.jpg": good_jpeg,
        "README.md": b"# images\n",
        "cat/.DS_Store": b"\x00",
        ".cache/thumb.jpg": good_jpeg,
    }.items():
        imagegen.write(os.path.join(root, rel), data)
    os.symlink(os.path.join(root, "missing-target.jpg"), os.path.join(root, "dog", "dangling.jpg"))
    return root


@pytest.fixture(scope="module")
def converted(messy_folder, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("out"))
    result = run_conversion(
        messy_folder,
        out,
        ImageOptions(),
        OutputOptions(num_shards=2, splits=(("train", 0.7), ("eval", 0.3)), stratify=True),
        in_process,
    )
    return out, result


def test_every_bad_input_is_skipped_with_its_reason(converted):
    out, _ = converted
    skipped = {row["path"]: row["reason"] for row in artifacts.load_skipped(out)}
    assert set(skipped) == {
        "cat/truncated.jpg",
        "cat/empty.jpg",
        "dog/text.jpg",
        "dog/bomb.png",
        "stray.jpg",
    }
    assert "no end-of-image marker" in skipped["cat/truncated.jpg"]
    assert skipped["cat/empty.jpg"] == "empty file (0 bytes)"
    assert skipped["dog/text.jpg"].startswith("not an image")
    assert skipped["dog/bomb.png"].startswith("decompression bomb: 12000x12000")
    assert skipped["stray.jpg"] == "image outside a label folder"
    ignored = json.loads(open(os.path.join(out, "ignored.json")).read())
    assert {row["path"]: row["reason"] for row in ignored} == {
        "README.md": "not an image file name",
        "cat/.DS_Store": "hidden file",
        ".cache/thumb.jpg": "hidden file",
        "dog/dangling.jpg": walk.LINK_NOT_FOLLOWED,  # links are not followed by default
    }


def test_the_manifest_lists_every_file_and_each_shard_with_its_records(converted):
    out, result = converted
    files = manifest.verify(out, checksums=True).files
    shard_names = [
        f"Split-{split}/data_tfrecord-0000{i}-of-00002"
        for split in ("eval", "train")
        for i in (0, 1)
    ]
    assert sorted(files) == sorted(
        shard_names
        + [f"dali_index/{name}.idx" for name in shard_names]
        + list(layout.EXAMPLES_METADATA_FILES)
    )
    for split in ("train", "eval"):
        records = [
            entry.records for name, entry in files.items() if name.startswith(f"Split-{split}/")
        ]
        assert sum(records) == result.summary.splits[split].records
    assert not [name for name in os.listdir(out) if name.startswith(".")]


def test_counts_reconcile_and_are_recorded(converted):
    out, result = converted
    summary = conversion_summary.read(out)
    assert summary == result.summary
    assert summary.files_seen == summary.written + summary.skipped + summary.ignored
    assert not summary.decoded_every_image  # pass-through: the statistics check them
    # 30 generated + cmyk + UPPER.JPG + corrupt-body.png (header-valid) are written.
    assert (summary.written, summary.skipped, summary.ignored) == (33, 5, 4)
    written = read_split(out, "train") + read_split(out, "eval")
    assert len(written) == 33
    assert sum(s.records for s in summary.splits.values()) == 33


def test_layout_labels_and_features(converted):
    out, result = converted
    assert result.split_names == ["train", "eval"]
    assert artifacts.load_labels(out) == ["cat", "dog", "owl"]
    examples = {
        feature(e, fk.FILENAME_KEY).decode(): e
        for e in read_split(out, "train") + read_split(out, "eval")
    }
    cmyk = examples["owl/nested/deeper/cmyk.jpg"]
    assert feature(cmyk, fk.LABEL_KEY) == 2
    assert feature(cmyk, fk.LABEL_TEXT_KEY) == b"owl"
    assert feature(cmyk, fk.IMAGE_CHANNELS_KEY) == 3  # CMYK became RGB
    cat = examples["cat/img_000.jpg"]
    assert feature(cat, fk.IMAGE_FORMAT_KEY) == b"jpeg"
    assert (feature(cat, fk.IMAGE_HEIGHT_KEY), feature(cat, fk.IMAGE_WIDTH_KEY)) == (48, 64)
    # Stratified by content over the images written (12 cat, 10 dog, 11 owl): 30% of
    # each label, rounded by largest remainder.
    assert result.summary.splits["eval"].labels == {"cat": 4, "dog": 3, "owl": 3}
    assert result.summary.split_by == "content" and result.summary.label_conflicts == ()


def test_passthrough_round_trip_keeps_bytes_and_pixels(converted, messy_folder):
    out, _ = converted
    for example in read_split(out, "train")[:5]:
        rel = feature(example, fk.FILENAME_KEY).decode()
        source = open(os.path.join(messy_folder, rel), "rb").read()
        stored = feature(example, fk.IMAGE_ENCODED_KEY)
        assert stored == source
        assert feature(example, fk.SHA256_KEY).decode() == hashlib.sha256(source).hexdigest()
        np.testing.assert_array_equal(
            tf.io.decode_image(stored).numpy(), tf.io.decode_image(source).numpy()
        )


def test_each_shard_has_its_dali_index_with_every_record_where_it_is(converted):
    out, result = converted
    for split in ("train", "eval"):
        indexed = 0
        for path in sorted(tf.io.gfile.glob(artifacts.split_shard_pattern(out, split))):
            with open(path, "rb") as f:
                shard = f.read()
            lines = open(artifacts.dali_index_path(out, split, path)).read().splitlines()
            # Each line is `offset size` of a record: its framing (length, CRC, bytes,
            # CRC) starts there and takes exactly that many bytes, one after another.
            end = 0
            for line in lines:
                offset, size = map(int, line.split(" "))
                assert offset == end
                assert int.from_bytes(shard[offset : offset + 8], "little") == size - 16
                end = offset + size
            assert end == len(shard)
            indexed += len(lines)
        assert indexed == result.summary.splits[split].records > 0


def test_shards_are_named_and_mixed(converted):
    out, _ = converted
    names = sorted(tf.io.gfile.listdir(artifacts.split_dir(out, "train")))
    assert names == ["data_tfrecord-00000-of-00002", "data_tfrecord-00001-of-00002"]
    for name in names:
        path = os.path.join(artifacts.split_dir(out, "train"), name)
        labels_in_shard = [
            feature(tf.train.Example.FromString(raw.numpy()), fk.LABEL_KEY)
            for raw in tf.data.TFRecordDataset(path)
        ]
        assert len(set(labels_in_shard)) > 1, f"{name} holds a single class"


def test_two_runs_on_different_runners_give_byte_identical_shards(messy_folder, tmp_path):
    options = OutputOptions(num_shards=3, seed=7)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_conversion(messy_folder, a, ImageOptions(resize=24), options, in_process)
    run_conversion(messy_folder, b, ImageOptions(resize=24), options, multi_process)
    for split in ("train", "eval"):
        files_a = sorted(tf.io.gfile.listdir(artifacts.split_dir(a, split)))
        assert files_a == sorted(tf.io.gfile.listdir(artifacts.split_dir(b, split)))
        for name in files_a:
            with (
                open(os.path.join(artifacts.split_dir(a, split), name), "rb") as fa,
                open(os.path.join(artifacts.split_dir(b, split), name), "rb") as fb,
            ):
                assert fa.read() == fb.read(), f"{split}/{name} differs"
    for name in (
        layout.SUMMARY_FILE,
        layout.SKIPPED_FILE,
        layout.LABEL_MAP_FILE,
        layout.MANIFEST_FILE,
    ):
        assert open(os.path.join(a, name)).read() == open(os.path.join(b, name)).read()


def test_on_error_fail_names_the_file_and_publishes_nothing(messy_folder, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(
        ValueError,
        match=r"cat/empty\.jpg: empty file|cat/truncated\.jpg|"
        r"dog/.*|stray\.jpg: image outside",
    ):
        run_conversion(
            messy_folder, str(out), ImageOptions(), OutputOptions(on_error="fail"), in_process
        )
    assert not out.exists() or os.listdir(out) == []


def test_resize_crop_gzip_and_shard_size(tmp_path):
    root = str(tmp_path / "imgs")
    imagegen.make_image_folder(root, {"a": 6, "b": 6}, size=(90, 120))
    out = str(tmp_path / "out")
    result = run_conversion(
        root,
        out,
        ImageOptions(resize=32, center_crop=True, quality=80),
        OutputOptions(gzip=True, shard_mb=0.01, splits=(("train", 1.0),)),
        in_process,
    )
    assert result.summary.decoded_every_image
    names = tf.io.gfile.listdir(artifacts.split_dir(out, "train"))
    assert all(n.endswith(".gz") for n in names)
    # DALI cannot index GZIP shards: none is written, and the summary says so.
    assert not os.path.exists(os.path.join(out, layout.DALI_INDEX_DIR))
    assert [w.code for w in result.summary.warnings] == [conversion_summary.NO_DALI_INDEX]
    bytes_out = result.summary.splits["train"].bytes_out
    assert len(names) == max(1, -(-bytes_out // int(0.01 * 1024 * 1024)))
    examples = read_split(out, "train")
    assert len(examples) == 12
    for example in examples:
        assert (feature(example, fk.IMAGE_HEIGHT_KEY), feature(example, fk.IMAGE_WIDTH_KEY)) == (
            32,
            32,
        )
        assert tf.io.decode_jpeg(feature(example, fk.IMAGE_ENCODED_KEY)).shape == (32, 32, 3)


def test_split_layout_keeps_given_splits(tmp_path):
    root = str(tmp_path / "imgs")
    imagegen.make_image_folder(os.path.join(root, "training"), {"a": 3, "b": 3})
    imagegen.make_image_folder(os.path.join(root, "validation"), {"a": 2, "b": 1}, seed=1)
    imagegen.make_image_folder(os.path.join(root, "test"), {"a": 1, "b": 1}, seed=2)
    out = str(tmp_path / "out")
    result = run_conversion(root, out, ImageOptions(), OutputOptions(num_shards=1), in_process)
    # The usual folder names become the splits the Trainer and the Evaluator read.
    assert result.split_names == ["eval", "test", "train"]
    assert [len(read_split(out, s)) for s in result.split_names] == [3, 2, 6]
    example = read_split(out, "eval")[0]
    assert feature(example, fk.FILENAME_KEY).decode().startswith("validation/")
    assert result.summary.layout == "split" and result.summary.split_by == ""
    assert result.summary.warnings == ()


def test_a_train_and_test_tree_evaluates_on_test_and_says_so(tmp_path):
    root = str(tmp_path / "imgs")
    imagegen.make_image_folder(os.path.join(root, "train"), {"a": 3, "b": 3})
    imagegen.make_image_folder(os.path.join(root, "test"), {"a": 2}, seed=1)
    out = str(tmp_path / "out")
    result = run_conversion(root, out, ImageOptions(), OutputOptions(num_shards=1), in_process)
    assert result.split_names == ["eval", "train"]
    assert len(read_split(out, "eval")) == 2 and len(read_split(out, "train")) == 6
    assert [(w.code, w.message) for w in result.summary.warnings] == [
        (
            conversion_summary.SPLIT_FOLDERS,
            "no validation folder: the test folder 'test' is the 'eval' split, which the "
            "Evaluator reads",
        ),
        (
            conversion_summary.SMALL_CLASS,
            "class 'b' has no image in split(s) ['eval'] (eval 0, train 3)",
        ),
    ]
    # With no eval folder at all, nothing is converted and the message says what to do.
    os.rename(os.path.join(root, "test"), os.path.join(tmp_path, "elsewhere"))
    with pytest.raises(ValueError, match=r"split folders \['train'\] but none for the eval"):
        run_conversion(root, str(tmp_path / "out2"), ImageOptions(), OutputOptions(), in_process)
    assert os.listdir(tmp_path / "out2") == []  # nothing that a reader accepts


def test_a_split_of_only_bad_files_is_reported_and_published_empty(tmp_path):
    root = str(tmp_path / "imgs")
    imagegen.make_image_folder(os.path.join(root, "train"), {"a": 3, "b": 2})
    imagegen.write(os.path.join(root, "test", "a", "empty.jpg"), b"")
    imagegen.write(os.path.join(root, "test", "b", "text.png"), b"not a picture")
    out = str(tmp_path / "out")
    result = run_conversion(root, out, ImageOptions(), OutputOptions(), in_process)
    summary = result.summary
    assert (summary.written, summary.skipped, summary.files_seen) == (5, 2, 7)
    # The test folder is the eval split here (there is no validation folder).
    assert summary.splits["eval"].records == 0
    assert {row["path"] for row in artifacts.load_skipped(out)} == {
        "test/a/empty.jpg",
        "test/b/text.png",
    }
    assert tf.io.gfile.listdir(artifacts.split_dir(out, "eval")) == ["data_tfrecord-00000-of-00001"]
    assert read_split(out, "eval") == [] and len(read_split(out, "train")) == 5
    # The empty shard has its empty index, listed in the manifest.
    empty_index = artifacts.dali_index_path(out, "eval", "data_tfrecord-00000-of-00001")
    assert open(empty_index, "rb").read() == b""
    assert "dali_index/Split-eval/data_tfrecord-00000-of-00001.idx" in manifest.read(out).files
    assert (conversion_summary.EMPTY_SPLIT, "split 'eval' has no image") in [
        (w.code, w.message) for w in summary.warnings
    ]


def test_task_files_carry_the_plan_to_the_pipeline(tmp_path):
    planned = [
        tasks.ConversionTask(f"b/é {i}\nx.jpg", "b", 1, "eval" if i % 3 else "train")
        for i in range(7)
    ]
    pattern = tasks.write_task_files(
        planned, str(tmp_path / "tasks"), batch_size=2, batches_per_file=3
    )
    assert len(tf.io.gfile.glob(pattern)) == 2  # 4 batches, 3 a file
    with in_process() as pipeline:
        batches = pipeline | tasks.ReadTaskBatches(pattern)
        assert_that(batches | beam.FlatMap(lambda batch: batch), equal_to(planned))


def test_convert_images_ptransform(tmp_path):
    root = str(tmp_path / "imgs")
    imagegen.make_image_folder(root, {"a": 2})
    imagegen.write(os.path.join(root, "a", "bad.jpg"), b"nope")
    spill = str(tmp_path / "spill")
    os.makedirs(spill)
    planned = [
        tasks.ConversionTask(rel, "a", 0, "train")
        for rel in ("a/img_000.jpg", "a/img_001.jpg", "a/bad.jpg")
    ]
    with in_process() as pipeline:
        outputs = (
            pipeline
            | beam.Create(tasks.batch_tasks(planned, size=2))
            | transforms.ConvertImages(root, spill, ImageOptions(), False)
        )
        assert_that(
            outputs[transforms.RECORDS_TAG]
            | beam.FlatMap(lambda pointers: [(p.relpath, p.split) for p in pointers]),
            equal_to([("a/img_000.jpg", "train"), ("a/img_001.jpg", "train")]),
            label="records",
        )
        assert_that(
            outputs[transforms.SKIPPED_TAG] | beam.Map(lambda s: s.relpath),
            equal_to(["a/bad.jpg"]),
            label="skipped",
        )


@pytest.fixture(scope="module")
def copies_folder(tmp_path_factory) -> str:
    """Two labels of distinct images, one image copied to six more paths of its label,
    one filed under both labels, an empty class folder and a one-image class."""
    root = str(tmp_path_factory.mktemp("copies"))
    imagegen.make_image_folder(root, {"cat": 20, "dog": 20, "owl": 1})
    copied = open(os.path.join(root, "cat", "img_003.jpg"), "rb").read()
    for i in range(6):
        imagegen.write(os.path.join(root, "cat", f"album{i}", "again.jpg"), copied)
    conflict = open(os.path.join(root, "dog", "img_007.jpg"), "rb").read()
    imagegen.write(os.path.join(root, "cat", "looks-like-a-dog.jpg"), conflict)
    os.makedirs(os.path.join(root, "empty"))
    return root


def _splits_by_path(output_dir: str) -> dict[str, str]:
    return {
        feature(e, fk.FILENAME_KEY).decode(): split
        for split in ("train", "eval")
        for e in read_split(output_dir, split)
    }


def test_identical_bytes_land_in_one_split_by_content_and_not_by_path(copies_folder, tmp_path):
    copies = ["cat/img_003.jpg"] + [f"cat/album{i}/again.jpg" for i in range(6)]
    splits = (("train", 0.5), ("eval", 0.5))
    by_content = str(tmp_path / "content")
    result = run_conversion(
        copies_folder, by_content, ImageOptions(), OutputOptions(splits=splits), in_process
    )
    decided = _splits_by_path(by_content)
    assert len({decided[path] for path in copies}) == 1
    # Stratified over distinct images: the 20 cats (the copies count once), 20 dogs
    # less the conflict, and the one owl, which cannot reach both splits.
    assert result.summary.splits["eval"].labels == {"cat": 10, "dog": 9}

    by_path = str(tmp_path / "path")
    run_conversion(
        copies_folder,
        by_path,
        ImageOptions(),
        OutputOptions(splits=splits, split_by="path"),
        in_process,
    )
    decided = _splits_by_path(by_path)
    assert {decided[path] for path in copies} == {"train", "eval"}  # the leak path hashing allows


def test_label_conflicts_are_skipped_and_reported_with_their_paths(copies_folder, tmp_path):
    out = str(tmp_path / "out")
    result = run_conversion(copies_folder, out, ImageOptions(), OutputOptions(), in_process)
    summary = conversion_summary.read(out)
    assert summary == result.summary
    reason = (
        "label conflict: identical bytes under labels [cat, dog]: cat/looks-like-a-dog.jpg, "
        "dog/img_007.jpg"
    )
    ((conflict),) = summary.label_conflicts
    assert conflict.labels == ("cat", "dog") and not conflict.kept
    assert conflict.paths == ("cat/looks-like-a-dog.jpg", "dog/img_007.jpg")
    assert conflict.reason == reason
    skipped = {row["path"]: row["reason"] for row in artifacts.load_skipped(out)}
    assert skipped == {"cat/looks-like-a-dog.jpg": reason, "dog/img_007.jpg": reason}
    assert (summary.files_seen, summary.written, summary.skipped) == (48, 46, 2)
    assert summary.files_seen == summary.written + summary.skipped + summary.ignored
    assert [(w.code, w.message) for w in summary.warnings] == [
        (conversion_summary.EMPTY_CLASS, "class folder 'empty' has no image"),
        (
            conversion_summary.SMALL_CLASS,
            "class 'owl' has 1 image, too few to appear in every split (train 1, eval 0)",
        ),
        (conversion_summary.LABEL_CONFLICT, f"{reason} (skipped)"),
    ]


def test_label_conflicts_can_be_kept_in_one_split_or_stop_the_conversion(copies_folder, tmp_path):
    kept = str(tmp_path / "kept")
    result = run_conversion(
        copies_folder,
        kept,
        ImageOptions(),
        OutputOptions(on_label_conflict="keep", splits=(("train", 0.5), ("eval", 0.5))),
        in_process,
    )
    assert result.summary.written == 48 and result.summary.skipped == 0
    ((conflict),) = result.summary.label_conflicts
    assert conflict.kept
    decided = _splits_by_path(kept)
    assert decided["cat/looks-like-a-dog.jpg"] == decided["dog/img_007.jpg"]

    failed = tmp_path / "failed"
    with pytest.raises(
        ValueError,
        match=r"^label conflict: identical bytes under labels \[cat, dog\]: "
        r"cat/looks-like-a-dog\.jpg, dog/img_007\.jpg \(on_label_conflict fail",
    ):
        run_conversion(
            copies_folder,
            str(failed),
            ImageOptions(),
            OutputOptions(on_label_conflict="fail"),
            in_process,
        )
    assert not any(failed.rglob("data_tfrecord-*"))


def test_a_summary_of_the_first_schema_version_still_reads(converted, tmp_path):
    out, result = converted
    document = json.load(open(os.path.join(out, layout.SUMMARY_FILE)))
    for key in ("split_by", "label_conflicts", "warnings"):
        del document[key]
    (tmp_path / layout.SUMMARY_FILE).write_text(json.dumps({**document, "version": 1}))
    old = conversion_summary.read(str(tmp_path))
    assert old.splits == result.summary.splits and old.warnings == ()


def test_rotated_and_transparent_images_are_stored_as_seen_and_counted(tmp_path):
    """A phone's rotated JPEG is stored upright and a transparent PNG opaque on white,
    each counted in the summary; every other file keeps its bytes."""
    root = str(tmp_path / "images")
    imagegen.make_image_folder(root, {"cat": 3, "dog": 3})
    upright = imagegen.marked(24, 40)
    imagegen.write(
        os.path.join(root, "cat", "phone.jpg"),
        imagegen.exif_jpeg_bytes(imagegen.stored_for(upright, 6), 6),
    )
    imagegen.write(os.path.join(root, "dog", "logo.png"), imagegen.half_transparent_png(8, 8))
    out = str(tmp_path / "out")
    options = OutputOptions(num_shards=1, splits=(("train", 1.0),))

    summary = run_conversion(root, out, ImageOptions(), options, in_process).summary

    train = summary.splits["train"]
    assert (train.rotated, train.composited, train.reencoded) == (1, 1, 2)
    assert conversion_summary.read(out).splits["train"].rotated == 1
    for example in read_split(out, "train"):
        rel = feature(example, fk.FILENAME_KEY).decode()
        stored = feature(example, fk.IMAGE_ENCODED_KEY)
        with open(os.path.join(root, rel), "rb") as f:
            source = f.read()
        pixels = tf.io.decode_image(stored, channels=3).numpy()  # EXIF-blind, as TF is
        if rel == "cat/phone.jpg":
            assert (feature(example, fk.IMAGE_HEIGHT_KEY), pixels.shape[:2]) == (24, (24, 40))
            assert pixels[2, 2, 0] > 200 and pixels[-3, -3, 0] < 80  # marker top-left
        elif rel == "dog/logo.png":
            assert feature(example, fk.IMAGE_CHANNELS_KEY) == 3
            assert (pixels[-1] == 255).all()
        else:
            assert stored == source
