"""ImageStatistics on tiny generated data: exactness, leakage, merge order, the report.

The TFX pipeline run (gate, TFDV image domain) is in test_image_statistics_pipeline.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html.parser
import json
import os
import shutil
import subprocess
import tempfile

import apache_beam as beam
import cv2
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions

from imgpipe.components.common.formats import (
    artifacts,
    conversion_summary,
    label_map,
    layout,
    manifest,
)
from imgpipe.components.common.formats import features as fk
from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.images.preprocessing import eval_image
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio
from imgpipe.components.image_example_gen.convert import run_conversion
from imgpipe.components.image_example_gen.options import ImageOptions, OutputOptions
from imgpipe.components.image_statistics import accumulator as acc
from imgpipe.components.image_statistics import anomalies as anomaly_lib
from imgpipe.components.image_statistics import spec, summary
from imgpipe.components.image_statistics import transforms as stats_transforms
from imgpipe.components.image_statistics.analyze import (
    AnalysisOptions,
    BatchDecoder,
    ImageKey,
    analyze_batch,
)
from imgpipe.components.image_statistics.compute import strict_check_needed
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.executor import Executor, options_from_properties
from imgpipe.components.image_statistics.pixel_summaries import (
    THUMBNAIL_SIZE,
    difference_hashes,
    thumbnail_jpeg,
)
from imgpipe.components.image_statistics.produce import produce
from tests import imagegen, waiting
from tests import trainer_helpers as th
from tests.outputs import tree

pytestmark = pytest.mark.component

IMAGE_SIZE = 48
CROP = 0.875
SPLITS = ["train", "eval"]
CHROMIUM = "/usr/bin/chromium"
# Saturated colours no chart or text on the page uses: found in the screenshot, they
# can only come from the thumbnails.
CLASS_COLOURS = {"crimson": (230, 20, 60), "lime": (30, 220, 40)}


def make_pipeline() -> beam.Pipeline:
    return beam.Pipeline(options=PipelineOptions(["--direct_num_workers=1"]))


def textured(rng: np.random.Generator, height: int, width: int, colour) -> np.ndarray:
    """A colour with a random smooth pattern, so every image has its own dHash."""
    small = rng.integers(-90, 90, (4, 4, 1)).astype(np.float32)
    pattern = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)[..., None]
    noise = rng.normal(0, 6, (height, width, 3))
    return np.clip(np.array(colour, np.float32) + pattern + noise, 0, 255).astype(np.uint8)


def write_image(path: str, rgb: np.ndarray) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image = rgb if rgb.ndim == 2 else cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    assert cv2.imwrite(path, image)


def make_folder(root: str) -> None:
    """root/<split>/<label>/: sizes differ, JPEG and PNG, one grey image, one planted
    cross-split copy (train/crimson/c02.png == eval/lime/leak.png), one copy within
    train and one file that is not an image."""
    rng = np.random.default_rng(7)
    for split, count in (("train", 10), ("eval", 4)):
        for label, colour in CLASS_COLOURS.items():
            for i in range(count):
                # Small images are bright, large ones dark: a mean of means is far off.
                side = int(rng.integers(16, 40)) if i % 2 else int(rng.integers(90, 160))
                shade = 1.0 if i % 2 else 0.35
                rgb = textured(
                    rng, side, int(side * rng.uniform(0.6, 1.7)), [c * shade for c in colour]
                )
                ext = "png" if i % 3 else "jpg"
                write_image(os.path.join(root, split, label, f"{label[0]}{i:02d}.{ext}"), rgb)
    write_image(
        os.path.join(root, "train", "lime", "grey.png"),
        textured(rng, 50, 70, (128, 128, 128))[..., 0],
    )
    shutil.copy(
        os.path.join(root, "train", "crimson", "c02.png"),
        os.path.join(root, "eval", "lime", "leak.png"),
    )
    shutil.copy(
        os.path.join(root, "train", "lime", "l01.png"),
        os.path.join(root, "train", "lime", "l01-copy.png"),
    )
    with open(os.path.join(root, "train", "lime", "broken.jpg"), "wb") as f:
        f.write(b"this is not a jpeg")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("stats")
    root, examples = str(base / "images"), str(base / "examples")
    make_folder(root)
    run_conversion(
        root,
        examples,
        ImageOptions(),
        # The planted copy is under another label: kept, so that it shows as leakage.
        OutputOptions(num_shards=2, gzip=True, on_label_conflict="keep"),
        make_pipeline=make_pipeline,
    )
    options = AnalysisOptions(IMAGE_SIZE, CROP, keep_thumbnails=3, native_resolution=True)
    produced = produce(examples, SPLITS, str(base), options, StatisticsConfig(), make_pipeline)
    # "stats" is the image_stats.json document as a reader of the file sees it.
    return {
        "base": base,
        "examples": examples,
        "produced": produced,
        "stats": json.loads(schema.to_json_text(produced.stats)),
    }


def read_split_images(examples: str, split: str) -> list[bytes]:
    pattern = artifacts.split_shard_pattern(examples, split)
    records = tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(pattern)), compression_type="GZIP")
    encoded = []
    for record in records:
        example = tf.train.Example.FromString(record.numpy())
        encoded.append(example.features.feature[fk.IMAGE_ENCODED_KEY].bytes_list.value[0])
    return encoded


def reference_moments(images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy float64: pixel-weighted mean and std, and the mean of per-image means."""
    pixels = np.concatenate([im.reshape(-1, 3).astype(np.float64) for im in images])
    per_image = np.stack([im.reshape(-1, 3).astype(np.float64).mean(axis=0) for im in images])
    return pixels.mean(axis=0), pixels.std(axis=0), per_image.mean(axis=0)


def test_pixel_statistics_are_exact_against_numpy_float64(dataset):
    stats = dataset["stats"]
    for split in ("train", "eval"):
        encoded = read_split_images(dataset["examples"], split)
        assert stats["splits"][split]["images"] == len(encoded)
        model_view = [eval_image(tf.constant(e), IMAGE_SIZE, CROP).numpy() for e in encoded]
        mean, std, _ = reference_moments(model_view)
        pixels = stats["splits"][split]["pixels"]
        np.testing.assert_allclose(pixels["mean"], mean, rtol=0, atol=1e-6)
        np.testing.assert_allclose(pixels["std"], std, rtol=0, atol=1e-6)
        assert pixels["pixels_per_channel"] == len(encoded) * IMAGE_SIZE**2

        native = [
            tf.io.decode_image(e, channels=3, expand_animations=False).numpy() for e in encoded
        ]
        assert len({im.shape for im in native}) > 5, "the test needs images of many sizes"
        mean, std, mean_of_means = reference_moments(native)
        got = stats["splits"][split]["native_pixels"]
        np.testing.assert_allclose(got["mean"], mean, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got["std"], std, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got["image_weighted_mean"], mean_of_means, atol=1e-9)
        # The articles' mean of per-image means is far from the exact mean here.
        assert np.max(np.abs(mean_of_means - mean)) > 10.0


def test_class_means_are_exact_against_numpy_float64(dataset):
    pattern = artifacts.split_shard_pattern(dataset["examples"], "train")
    by_label: dict[str, list[np.ndarray]] = {}
    for record in tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(pattern)), "GZIP"):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        encoded = feature[fk.IMAGE_ENCODED_KEY].bytes_list.value[0]
        label = feature[fk.LABEL_TEXT_KEY].bytes_list.value[0].decode()
        by_label.setdefault(label, []).append(eval_image(tf.constant(encoded), IMAGE_SIZE, CROP))
    class_means = dataset["produced"].stats.splits["train"].class_means
    assert sorted(class_means) == sorted(by_label) == sorted(CLASS_COLOURS)
    for label, images in by_label.items():
        mean, _, _ = reference_moments([im.numpy() for im in images])
        np.testing.assert_allclose(class_means[label].mean, mean, rtol=0, atol=1e-9)
        assert class_means[label].pixels_per_channel == len(images) * IMAGE_SIZE**2


def test_the_typed_schema_round_trips_and_gives_the_normalization(dataset, tmp_path):
    typed = dataset["produced"].stats
    schema.write(str(tmp_path), typed)
    assert schema.read(str(tmp_path)) == typed
    norm = schema.read(str(tmp_path)).normalization()
    assert norm.image_size == IMAGE_SIZE and norm.crop_fraction == CROP
    assert list(norm.mean) == dataset["stats"]["splits"]["train"]["pixels"]["mean"]
    assert list(norm.std) == dataset["stats"]["splits"]["train"]["pixels"]["std"]
    assert typed.normalization("eval").mean != norm.mean
    # A file of another shape is refused by name, not half-read.
    broken = dict(dataset["stats"], splits={"train": {"images": 1}})
    (tmp_path / layout.IMAGE_STATS_FILE).write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"image_stats\.json.*splits\.train"):
        schema.read(str(tmp_path))
    (tmp_path / layout.IMAGE_STATS_FILE).write_text(json.dumps({**dataset["stats"], "version": 9}))
    with pytest.raises(ValueError, match="schema version 9"):
        schema.read(str(tmp_path))


def test_planted_leak_and_duplicates_are_found(dataset):
    stats = dataset["stats"]
    leakage = stats["leakage"]
    assert leakage["groups"] == 1
    assert leakage["images_by_split"] == {"train": 1, "eval": 1}
    assert leakage["examples"][0]["files"] == [
        {"split": "eval", "path": "eval/lime/leak.png"},
        {"split": "train", "path": "train/crimson/c02.png"},
    ]
    train_dups = stats["splits"]["train"]["duplicates"]
    assert train_dups["groups"] == 1 and train_dups["redundant_images"] == 1
    assert {f["path"] for f in train_dups["examples"][0]["files"]} == {
        "train/lime/l01.png",
        "train/lime/l01-copy.png",
    }
    assert stats["splits"]["eval"]["duplicates"]["groups"] == 0
    codes = {(a["code"], a["split"]) for a in stats["anomalies"]}
    assert (anomaly_lib.LEAKAGE, "eval") in codes
    leak = next(a for a in stats["anomalies"] if a["code"] == anomaly_lib.LEAKAGE)
    assert "eval/lime/leak.png (eval)" in leak["message"]
    assert "train/crimson/c02.png (train)" in leak["message"]
    # broken.jpg was skipped by ImageExampleGen: 1 of 30 files is not usable.
    assert stats["source"]["skipped_by_example_gen"] == 1
    assert (anomaly_lib.LOW_SUPPORTED_FRACTION, None) in codes


@pytest.mark.parametrize("num_buckets", [1, 3])
def test_duplicate_search_gives_the_same_groups_in_any_number_of_buckets(num_buckets):
    from apache_beam.testing.util import assert_that, equal_to

    sha = {name: hashlib.sha256(name.encode()).hexdigest() for name in "abcde"}
    key_lists = [
        [
            ImageKey("train", "x/1.jpg", sha["a"], 11),
            ImageKey("train", "x/2.jpg", sha["b"], 7),
            ImageKey("train", "x/3.jpg", sha["e"], 5),
        ],
        [ImageKey("eval", "y/1.jpg", sha["a"], 11), ImageKey("eval", "y/2.jpg", sha["c"], 7)],
        [ImageKey("eval", "y/3.jpg", sha["d"], 9), ImageKey("train", "x/4.jpg", sha["e"], 5)],
    ]
    DuplicateGroup = stats_transforms.DuplicateGroup
    expected = [
        DuplicateGroup(
            "exact",
            sha["a"],
            (("eval", "y/1.jpg"), ("train", "x/1.jpg")),
            2,
            (("eval", 1), ("train", 1)),
        ),
        DuplicateGroup(
            "exact", sha["e"], (("train", "x/3.jpg"), ("train", "x/4.jpg")), 2, (("train", 2),)
        ),
        # Same dHash, different content: near. Same content (a, e): exact only.
        DuplicateGroup(
            "near",
            f"{7:016x}",
            (("eval", "y/2.jpg"), ("train", "x/2.jpg")),
            2,
            (("eval", 1), ("train", 1)),
        ),
    ]
    with make_pipeline() as pipeline:
        buckets = pipeline | beam.Create(key_lists) | stats_transforms.FindDuplicates(num_buckets)
        assert_that(
            buckets | beam.FlatMapTuple(lambda bucket, groups: groups),
            equal_to(expected),
            label="groups",
        )

        def in_range(bucket_ids):
            assert bucket_ids and all(0 <= b < num_buckets for b in bucket_ids), bucket_ids

        assert_that(
            buckets | beam.MapTuple(lambda bucket, groups: bucket), in_range, label="buckets"
        )


def test_distributions(dataset):
    train = dataset["stats"]["splits"]["train"]
    assert train["labels"]["counts"] == {"crimson": 10, "lime": 12}
    assert train["labels"]["imbalance_ratio"] == pytest.approx(1.2)
    assert sum(train["sizes"]["width"]["counts"]) == train["images"] == 22
    assert train["formats"]["jpeg"] + train["formats"]["png"] == 22
    assert train["color_modes"]["gray"] == 1 and train["channels"]["1"] == 1
    assert train["bytes"]["total"] == sum(
        len(e) for e in read_split_images(dataset["examples"], "train")
    )
    assert sorted(train["thumbnails"]) == ["crimson", "lime"]
    assert all(len(paths) == 3 for paths in train["thumbnails"].values())


def test_eval_labels_differ_and_supported_fraction_anomalies(dataset):
    import dataclasses

    typed = dataset["produced"].stats

    def with_labels(split: str, counts: dict[str, int]) -> schema.SplitStats:
        s = typed.splits[split]
        return dataclasses.replace(
            s, images=sum(counts.values()), labels=dataclasses.replace(s.labels, counts=counts)
        )

    no_leak = dataclasses.replace(typed.leakage, fraction_by_split={"train": 0.0, "eval": 0.0})
    stats = dataclasses.replace(
        typed,
        splits={
            "train": with_labels("train", {"a": 5, "b": 5}),
            "eval": with_labels("eval", {"a": 3, "b": 0}),
        },
        source=dataclasses.replace(typed.source, supported_fraction=0.5),
        leakage=no_leak,
    )
    found = anomaly_lib.check(stats, StatisticsConfig())
    assert [(a.code, a.split) for a in found] == [
        (anomaly_lib.LABELS_DIFFER, "eval"),
        (anomaly_lib.LOW_SUPPORTED_FRACTION, None),
    ]
    assert "missing ['b']" in found[0].message
    # A class of one image cannot be in both splits: ImageExampleGen warned about it,
    # and it is no reason to stop the run.
    stats = dataclasses.replace(
        stats,
        splits={
            "train": with_labels("train", {"a": 5, "b": 5, "c": 1}),
            "eval": with_labels("eval", {"a": 3, "b": 1, "c": 0}),
        },
        source=dataclasses.replace(typed.source, supported_fraction=1.0),
    )
    assert anomaly_lib.check(stats, StatisticsConfig()) == []


def test_copies_across_classes_and_paths_stop_nothing_once_converted(tmp_path):
    """Real photos often hold byte-identical files, in one class and across classes.
    Split by content, the copies in one class share a split (no leakage); the copies
    across classes are skipped as label conflicts, which are listed with the skipped
    files but not counted as unusable images. The gate has nothing to stop."""
    root, examples = str(tmp_path / "images"), str(tmp_path / "examples")
    for label, colour in CLASS_COLOURS.items():
        for i in range(8):
            rgb = textured(np.random.default_rng(i), 30, 40, colour)
            write_image(os.path.join(root, label, f"{i}.png"), rgb)
    for i in range(4):
        shutil.copy(os.path.join(root, "lime", "1.png"), os.path.join(root, "lime", f"c{i}.png"))
    shutil.copy(os.path.join(root, "lime", "2.png"), os.path.join(root, "crimson", "green.png"))
    run_conversion(root, examples, ImageOptions(), OutputOptions(), make_pipeline=make_pipeline)
    options = AnalysisOptions(IMAGE_SIZE, CROP, keep_thumbnails=0)
    produced = produce(examples, SPLITS, str(tmp_path), options, StatisticsConfig(), make_pipeline)
    assert produced.anomalies == ()
    assert produced.stats.leakage.groups == 0
    assert produced.stats.source.skipped_by_example_gen == 0
    assert produced.stats.source.supported_fraction == 1.0
    assert "label conflict: identical bytes under labels [crimson, lime]" in produced.html


def test_combine_fn_is_merge_order_independent(dataset):
    records = []
    for path in sorted(
        tf.io.gfile.glob(artifacts.split_shard_pattern(dataset["examples"], "train"))
    ):
        records.extend(r.numpy() for r in tf.data.TFRecordDataset(path, "GZIP"))
    options = AnalysisOptions(IMAGE_SIZE, CROP, keep_thumbnails=2, native_resolution=True)
    decoder = BatchDecoder(IMAGE_SIZE, CROP)
    batches = [records[i : i + 3] for i in range(0, len(records), 3)]
    partials = [analyze_batch(batch, "train", decoder, options)[0] for batch in batches]
    combine = acc.ImageStatsCombineFn(keep_thumbnails=2)

    def combined(order: list[int], chunks: int) -> schema.ImageStats:
        groups = [order[i::chunks] for i in range(chunks)]
        merged = []
        for group in groups:
            a = combine.create_accumulator()
            for i in group:
                a = combine.add_input(a, partials[i])
            merged.append(a)
        result = combine.extract_output(combine.merge_accumulators(merged))
        return summary.build_stats(
            splits=["train"],
            accumulators={"train": result},
            groups=[],
            labels=["c", "l"],
            options=options,
            examples_uri="x",
            skipped=0,
            leakage_threshold=0.0,
        )

    rng = np.random.default_rng(0)
    reference = combined(list(range(len(partials))), 1)
    for chunks in (2, 3, len(partials)):
        order = list(rng.permutation(len(partials)))
        assert combined(order, chunks) == reference
    assert (
        list(reference.splits["train"].pixels.mean)
        == (dataset["stats"]["splits"]["train"]["pixels"]["mean"])
    )
    # Per-chunk means averaged, as with per-worker means: not the exact mean.
    chunk_means = [acc.exact_moments(p.pixel_hist)[1] for p in partials]
    assert np.mean(chunk_means, axis=0).tolist() != list(reference.splits["train"].pixels.mean)


def test_undecodable_image_is_reported_not_fatal(tmp_path):
    split_dir = tmp_path / "Split-train"
    split_dir.mkdir()
    good = cv2.imencode(".png", np.full((20, 30, 3), 200, np.uint8))[1].tobytes()
    jpeg = imagegen.jpeg_bytes(imagegen.photo_like(64, 64))
    # A complete header and end marker around a corrupt body: only a decode finds it.
    corrupt = jpeg[: len(jpeg) // 2] + b"\x00" * 64 + b"\xff\xd9"
    with tf.io.TFRecordWriter(str(split_dir / "data_tfrecord-00000-of-00001")) as writer:
        for name, data in (("good.png", good), ("corrupt.jpg", corrupt), ("text.jpg", b"hi")):
            example = tf.train.Example()
            feature = example.features.feature
            feature[fk.IMAGE_ENCODED_KEY].bytes_list.value.append(data)
            feature[fk.FILENAME_KEY].bytes_list.value.append(name.encode())
            feature[fk.LABEL_KEY].int64_list.value.append(0)
            writer.write(example.SerializeToString())
    label_map.write(str(tmp_path), ["a"])
    manifest.write(
        str(tmp_path), manifest.describe(str(tmp_path), fileio.list_files(str(tmp_path)))
    )
    produced = produce(
        str(tmp_path),
        ["train"],
        str(tmp_path),
        AnalysisOptions(16, CROP),
        StatisticsConfig(),
        make_pipeline,
    )
    stats = config_loader.to_dict(produced.stats)
    train = stats["splits"]["train"]
    assert train["images"] == 1
    assert {f["path"]: f["reason"] for f in train["undecodable_files"]} == {
        "corrupt.jpg": "corrupt jpeg: Corrupt JPEG data: premature end of data segment",
        "text.jpg": "not an image: unrecognised content starting b'hi'",
    }
    # By default they are an anomaly that names them; verify_images: false leaves them
    # to min_supported_fraction.
    (unusable,) = [a for a in produced.stats.anomalies if a.code == anomaly_lib.UNUSABLE_IMAGES]
    assert "corrupt.jpg: corrupt jpeg" in unusable.message and "text.jpg" in unusable.message
    lenient = anomaly_lib.check(produced.stats, StatisticsConfig(verify_images=False))
    assert anomaly_lib.UNUSABLE_IMAGES not in {a.code for a in lenient}
    assert train["pixels"]["mean"] == [200.0, 200.0, 200.0]
    assert stats["source"]["supported_fraction"] == pytest.approx(1 / 3)


def test_bad_properties_are_rejected_by_name():
    properties = {
        spec.IMAGE_SIZE_KEY: 224,
        spec.CROP_FRACTION_KEY: 1.5,
        spec.STATISTICS_CONFIG_KEY: config_loader.to_json(StatisticsConfig()),
    }
    with pytest.raises(ValueError, match=spec.CROP_FRACTION_KEY):
        options_from_properties(properties)
    properties.update(
        {spec.CROP_FRACTION_KEY: 0.875, spec.STATISTICS_CONFIG_KEY: '{"leakage_threshold": 2.0}'}
    )
    with pytest.raises(ValueError, match="leakage_threshold"):
        options_from_properties(properties)
    properties[spec.STATISTICS_CONFIG_KEY] = '{"leakage": 0.1}'
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['leakage'\].*leakage_threshold"):
        options_from_properties(properties)


class _ReportParser(html.parser.HTMLParser):
    """Collects chart bars, pixel polylines and thumbnails per split."""

    def __init__(self):
        super().__init__()
        self.bars: dict[tuple[str, str], dict[str, int]] = {}
        self.lines: dict[tuple[str, str], list[int]] = {}
        self.thumbs: dict[str, list[str]] = {}
        self._chart: tuple[str, str] | None = None
        self._thumb_split = None
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for attr in ("src", "href"):
            if attr in a and not a[attr].startswith("data:"):
                self.external.append(a[attr])
        if tag == "svg":
            self._chart = (a["data-split"], a["data-chart"])
        elif tag == "rect" and self._chart:
            self.bars.setdefault(self._chart, {})[a["data-key"]] = int(a["data-value"])
        elif tag == "polyline" and self._chart:
            self.lines[(self._chart[0], a["data-channel"])] = [
                int(c) for c in a["data-counts"].split(",")
            ]
        elif tag == "div" and a.get("class") == "thumbnails":
            self._thumb_split = a["data-split"]
        elif tag == "img" and a.get("class") == "thumb":
            self.thumbs.setdefault(self._thumb_split, []).append(a["title"])

    def handle_endtag(self, tag):
        if tag == "svg":
            self._chart = None


def test_report_figures_match_the_json(dataset):
    stats = dataset["stats"]
    parser = _ReportParser()
    parser.feed(dataset["produced"].html)
    assert parser.external == []
    for split, s in stats["splits"].items():
        assert parser.bars[(split, "labels")] == s["labels"]["counts"]
        assert list(parser.bars[(split, "width")].values()) == s["sizes"]["width"]["counts"]
        assert (
            list(parser.bars[(split, "aspect_ratio")].values())
            == (s["sizes"]["aspect_ratio"]["counts"])
        )
        assert list(parser.bars[(split, "bytes")].values()) == s["bytes"]["counts"]
        for channel, name in enumerate(("red", "green", "blue")):
            assert parser.lines[(split, name)] == s["pixels"]["histogram"][channel]
        assert sorted(parser.thumbs[split]) == sorted(
            p for paths in s["thumbnails"].values() for p in paths
        )
    page = dataset["produced"].html
    assert "lime/leak.png" in page and "broken.jpg" in page


def _run_chromium(args: list[str], profile: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        timeout=waiting.COMMAND_S,
        check=True,
    )


@pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK),
    reason=f"{CHROMIUM} not found: the report cannot be rendered in a browser",
)
def test_report_renders_in_headless_chromium(dataset):
    base = dataset["base"]
    page = base / layout.REPORT_FILE
    page.write_text(dataset["produced"].html, encoding="utf-8")
    shot = base / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        _run_chromium(["--window-size=1200,2000", f"--screenshot={shot}", page.as_uri()], profile)
    with tempfile.TemporaryDirectory() as profile:
        dom = _run_chromium(["--dump-dom", page.as_uri()], profile).stdout.decode()
    parser = _ReportParser()
    parser.feed(dom)
    assert ("train", "labels") in parser.bars and ("eval", "width") in parser.bars
    assert ("eval", "red") in parser.lines
    assert len(parser.thumbs["train"]) == 6 and len(parser.thumbs["eval"]) == 6

    image = cv2.cvtColor(cv2.imread(str(shot)), cv2.COLOR_BGR2RGB).astype(np.int16)
    assert image.shape[:2] == (2000, 1200)
    assert image.std() > 20, "the screenshot is (nearly) a single colour"
    for name, colour in CLASS_COLOURS.items():
        near = np.abs(image - np.array(colour)).max(axis=-1) < 40
        assert near.sum() > 500, f"no {name} thumbnail pixels in the screenshot"
    # The chart bars' colour is there too.
    bar = np.array([0x4C, 0x72, 0xB0])  # report.BAR_COLOUR
    assert (np.abs(image - bar).max(axis=-1) < 4).sum() > 2000


def test_executor_writes_outputs_then_gates(dataset, tmp_path):
    from tfx.types import artifact_utils, standard_artifacts

    from imgpipe.components.common.formats.artifact_types import ImageStatisticsArtifact

    examples = standard_artifacts.Examples()
    examples.uri = dataset["examples"]
    examples.split_names = artifact_utils.encode_split_names(SPLITS)
    for fail, uri in ((True, tmp_path / "gated"), (False, tmp_path / "warned")):
        config = StatisticsConfig(
            sample_thumbnails=2, min_supported_fraction=0.5, fail_on_anomalies=fail
        )
        properties = {
            spec.IMAGE_SIZE_KEY: IMAGE_SIZE,
            spec.CROP_FRACTION_KEY: CROP,
            spec.STATISTICS_CONFIG_KEY: config_loader.to_json(config),
        }
        output = ImageStatisticsArtifact()
        output.uri = str(uri)
        uri.mkdir()
        executor = Executor(
            Executor.Context(beam_pipeline_args=["--direct_num_workers=1"], tmp_dir=str(tmp_path))
        )
        args = ({spec.EXAMPLES_KEY: [examples]}, {spec.STATISTICS_KEY: [output]}, properties)
        if fail:
            with pytest.raises(
                anomaly_lib.AnomaliesFoundError,
                match=r"(?s)1 data anomaly.*leakage.*eval/lime/leak.png",
            ):
                executor.Do(*args)
        else:
            executor.Do(*args)
        written = json.loads((uri / layout.IMAGE_STATS_FILE).read_text())
        if fail:  # TFX deletes a failed execution's outputs; this copy is kept.
            rejected = tmp_path / f"gated{layout.REJECTED_SUFFIX}"
            assert json.loads((rejected / layout.IMAGE_STATS_FILE).read_text()) == written
            assert (rejected / layout.REPORT_FILE).exists()
        assert written["splits"]["train"]["native_pixels"] is None
        assert [a["code"] for a in written["anomalies"]] == [anomaly_lib.LEAKAGE]
        assert (uri / layout.REPORT_FILE).stat().st_size > 10_000
        assert output.get_int_custom_property(spec.ANOMALY_COUNT_PROPERTY) == 1
        assert not [p for p in os.listdir(uri) if p.startswith(".imgpipe")]


def test_executor_retried_into_a_dirty_uri_writes_what_a_clean_run_writes(dataset, tmp_path):
    from tfx.types import artifact_utils, standard_artifacts

    from imgpipe.components.common.formats.artifact_types import ImageStatisticsArtifact

    examples = standard_artifacts.Examples()
    examples.uri = dataset["examples"]
    examples.split_names = artifact_utils.encode_split_names(SPLITS)
    properties = {
        spec.IMAGE_SIZE_KEY: IMAGE_SIZE,
        spec.CROP_FRACTION_KEY: CROP,
        spec.STATISTICS_CONFIG_KEY: config_loader.to_json(
            StatisticsConfig(sample_thumbnails=2, fail_on_anomalies=False)
        ),
    }
    clean, dirty = tmp_path / "clean", tmp_path / "dirty"
    # What a killed attempt leaves: its work folder, stale outputs and manifest, and the
    # rejected copy of an attempt that found anomalies.
    for stale in (".imgpipe-stats-0/stats-train.pkl", layout.IMAGE_STATS_FILE, "old.html"):
        imagegen.write(str(dirty / stale), b"old")
    manifest.write(str(dirty), manifest.describe(str(dirty), fileio.list_files(str(dirty))))
    imagegen.write(str(tmp_path / f"dirty{layout.REJECTED_SUFFIX}" / layout.REPORT_FILE), b"old")
    for uri in (clean, dirty):
        output = ImageStatisticsArtifact()
        output.uri = str(uri)
        Executor(Executor.Context(beam_pipeline_args=["--direct_num_workers=1"])).Do(
            {spec.EXAMPLES_KEY: [examples]}, {spec.STATISTICS_KEY: [output]}, properties
        )
    assert tree(str(dirty)) == tree(str(clean))
    assert sorted(tree(str(clean))) == [
        layout.IMAGE_STATS_FILE,
        layout.MANIFEST_FILE,
        "report.html",
    ]
    manifest.verify(str(clean), checksums=True)
    assert not (tmp_path / f"dirty{layout.REJECTED_SUFFIX}").exists()


def test_cli_stats_writes_json_and_html(dataset, tmp_path, capsys):
    from imgpipe.pipelines import cli

    out_json, out_html = tmp_path / "s.json", tmp_path / "r.html"
    # The same data as its own baseline: checked, and no drift.
    baseline = schema.write_file(str(tmp_path / "baseline.json"), dataset["produced"].stats)
    code = cli.main(
        [
            "stats",
            dataset["examples"],
            "--json",
            str(out_json),
            "--html",
            str(out_html),
            "--image-size",
            str(IMAGE_SIZE),
            "--fail-on-anomalies",
            "--baseline",
            baseline,
            "--direct_running_mode=in_memory",
            "--direct_num_workers=1",
        ]
    )
    assert code == 1  # the planted leak
    written = json.loads(out_json.read_text())
    assert (
        written["splits"]["train"]["pixels"]["mean"]
        == (dataset["stats"]["splits"]["train"]["pixels"]["mean"])
    )
    assert "<svg" in out_html.read_text()
    assert written["drift"]["checked"] and written["drift"]["baseline_uri"] == baseline
    assert not [c for c in written["drift"]["checks"] if c["drifted"]]
    assert f"drift      none (baseline {baseline})" in capsys.readouterr().out


def test_resize_skips_only_an_identity_resize():
    """A batch whose crops are all at the output size skips the resize; the pixels are
    the ones the resize would give, as in a batch that needs it."""
    from imgpipe.components.common.images.preprocessing import eval_images

    rng = np.random.default_rng(1)
    exact = rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    larger = rng.integers(0, 256, (IMAGE_SIZE + 8, IMAGE_SIZE + 8, 3), dtype=np.uint8)
    encoded = [
        cv2.imencode(".png", cv2.cvtColor(p, cv2.COLOR_RGB2BGR))[1].tobytes()
        for p in (exact, larger)
    ]
    skipped = eval_images(tf.constant(encoded[:1]), IMAGE_SIZE, 1.0).numpy()[0]
    resized = eval_images(tf.constant(encoded), IMAGE_SIZE, 1.0).numpy()
    np.testing.assert_array_equal(skipped, exact)
    np.testing.assert_array_equal(resized[0], exact)
    full = tf.image.resize(tf.cast(larger, tf.float32), [IMAGE_SIZE, IMAGE_SIZE])
    np.testing.assert_array_equal(resized[1], tf.cast(full + 0.5, tf.uint8).numpy())


def test_dhash_matches_a_reencoded_copy_and_tells_images_apart():
    rng = np.random.default_rng(11)
    original = textured(rng, 120, 160, (120, 90, 60))
    other = textured(rng, 120, 160, (120, 90, 60))

    def jpeg(rgb: np.ndarray, quality: int) -> bytes:
        ok, data = cv2.imencode(
            ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality]
        )
        assert ok
        return data.tobytes()

    pixels = BatchDecoder(224, CROP).eval_pixels(  # the Trainer's default size
        [jpeg(original, 95), jpeg(original, 70), jpeg(other, 95)]
    )
    hashes = difference_hashes(pixels)
    assert hashes[0] == hashes[1], "a re-encoded copy looks the same"
    assert bin(hashes[0] ^ hashes[2]).count("1") > 8, "different images hash apart"


@pytest.mark.parametrize("size", [224, 299, 96])
def test_dhash_is_the_area_mean_thumbnail_whatever_the_batch(size):
    rng = np.random.default_rng(size)
    images = np.stack(
        [textured(rng, size, size, (120, 90, 60)) for _ in range(5)]
        + [np.full((size, size, 3), 77, np.uint8)]
    )
    hashes = difference_hashes(images)
    assert hashes == [difference_hashes(image[None])[0] for image in images]
    assert hashes[-1] == 0, "a flat image has equal cells: no cell is brighter"

    def reference(image: np.ndarray) -> int:
        """Halvings as OpenCV does them one image at a time, then the 9x8 area mean of
        the grey image in float64."""
        while min(image.shape[:2]) >= 112:
            height, width = image.shape[0] // 2 * 2, image.shape[1] // 2 * 2
            image = cv2.resize(
                image[:height, :width], (width // 2, height // 2), interpolation=cv2.INTER_AREA
            )
        grey = image.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
        cells = cv2.resize(grey, (9, 8), interpolation=cv2.INTER_AREA)
        bits = (cells[:, 1:] > cells[:, :-1]).reshape(-1)
        return int("".join("1" if bit else "0" for bit in bits), 2)

    assert hashes[:-1] == [reference(image) for image in images[:-1]]


@pytest.mark.parametrize("size", [384, 224, 150, 97])
def test_thumbnail_keeps_the_picture(size):
    pixels = np.zeros((size, size, 3), np.uint8)
    pixels[:, : size // 2] = (200, 30, 30)  # red left half
    pixels[:, size // 2 :] = (30, 30, 200)  # blue right half
    thumbnail = cv2.cvtColor(
        cv2.imdecode(np.frombuffer(thumbnail_jpeg(pixels), np.uint8), cv2.IMREAD_COLOR),
        cv2.COLOR_BGR2RGB,
    )
    assert thumbnail.shape == (THUMBNAIL_SIZE, THUMBNAIL_SIZE, 3)
    left, right = thumbnail[:, : THUMBNAIL_SIZE // 3], thumbnail[:, -THUMBNAIL_SIZE // 3 :]
    np.testing.assert_allclose(left.reshape(-1, 3).mean(0), (200, 30, 30), atol=6)
    np.testing.assert_allclose(right.reshape(-1, 3).mean(0), (30, 30, 200), atol=6)


@pytest.mark.parametrize("gzip", [False, True])
def test_record_batches_read_every_record_and_name_a_truncated_shard(tmp_path, gzip):
    from apache_beam.testing.util import assert_that, equal_to

    suffix = layout.GZIP_SUFFIX if gzip else ""
    options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
    rng = np.random.default_rng(5)
    records = [rng.integers(0, 256, 300, dtype=np.uint8).tobytes() for _ in range(5)]
    for shard, part in enumerate((records[:3], records[3:])):
        with tf.io.TFRecordWriter(str(tmp_path / f"data-{shard}{suffix}"), options) as writer:
            for record in part:
                writer.write(record)
    shards = [
        ("eval" if shard else "train", str(tmp_path / f"data-{shard}{suffix}")) for shard in (0, 1)
    ]
    with make_pipeline() as pipeline:
        batches = pipeline | stats_transforms.ReadRecordBatches(shards, batch_size=2)
        assert_that(
            batches | beam.MapTuple(lambda split, batch: (split, len(batch))),
            equal_to([("train", 2), ("train", 1), ("eval", 2)]),
            label="sizes",
        )
        assert_that(
            batches | beam.FlatMapTuple(lambda split, batch: batch),
            equal_to(records),
            label="records",
        )

    truncated = tmp_path / f"data-1{suffix}"
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) * 2 // 3])  # mid-record, mid-stream
    with pytest.raises(Exception, match=f"data-1{suffix}: corrupt or truncated"):
        with make_pipeline() as pipeline:
            _ = pipeline | stats_transforms.ReadRecordBatches(shards, batch_size=2)


def test_a_shard_cut_at_a_record_boundary_is_caught_by_the_manifest_then_the_counts(
    dataset, tmp_path
):
    examples = str(tmp_path / "examples")
    shutil.copytree(dataset["examples"], examples)
    shard = sorted(tf.io.gfile.glob(artifacts.split_shard_pattern(examples, "train")))[0]
    records = list(tf.data.TFRecordDataset(shard, "GZIP").as_numpy_iterator())
    with tf.io.TFRecordWriter(shard, tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for record in records[:-1]:  # a valid shard, one record short
            writer.write(record)
    args = (SPLITS, str(tmp_path), AnalysisOptions(IMAGE_SIZE, CROP), StatisticsConfig())
    with pytest.raises(
        manifest.IncompleteOutputError, match=f"{shard} has \\d+ bytes, but .* says \\d+"
    ):
        produce(examples, *args, make_pipeline)
    # Were the manifest to list the short shard, the record counts still catch it.
    listed = manifest.read(examples).files
    manifest.write(
        examples, {**listed, **manifest.describe(examples, [os.path.relpath(shard, examples)])}
    )
    with pytest.raises(
        artifacts.ShardReadError, match=r"split 'train': read \d+ records but ImageExampleGen wrote"
    ):
        produce(examples, *args, make_pipeline)


def test_executor_checks_drift_against_the_served_models_training_data(tmp_path):
    """A first run with nothing served, then a fabricated push of its statistics as the
    champion's: more images of the same classes pass, their grayscale copies drift, and
    fail_on_drift decides between stopping and warning."""
    from tfx.types import artifact_utils, standard_artifacts

    from imgpipe.components.common.formats import served_models, serving_history, spans
    from imgpipe.components.common.formats.artifact_types import ImageStatisticsArtifact
    from imgpipe.components.image_statistics import drift
    from tests import imagegen

    serving = tmp_path / "serving"
    serving.mkdir()
    executor = Executor(
        Executor.Context(beam_pipeline_args=["--direct_num_workers=1"], tmp_dir=str(tmp_path))
    )

    def run(
        name: str,
        per_class: int,
        fail_on_drift: bool = True,
        grayscale: bool = False,
        span: int | None = None,
        accept: int | None = None,
    ):
        images, converted = tmp_path / name, str(tmp_path / f"{name}-examples")
        imagegen.make_colour_folder(str(images), per_class, grayscale=grayscale)
        run_conversion(
            str(images), converted, ImageOptions(), OutputOptions(num_shards=1), make_pipeline
        )
        examples = standard_artifacts.Examples()
        examples.uri = converted
        examples.split_names = artifact_utils.encode_split_names(SPLITS)
        if span is not None:
            examples.set_int_custom_property("span", span)
        output = ImageStatisticsArtifact()
        output.uri = str(tmp_path / f"{name}-statistics")
        config = StatisticsConfig(sample_thumbnails=0, fail_on_drift=fail_on_drift)
        properties = {
            spec.IMAGE_SIZE_KEY: 32,
            spec.CROP_FRACTION_KEY: 1.0,
            spec.STATISTICS_CONFIG_KEY: config_loader.to_json(config),
            spec.ACCEPT_DRIFT_SPAN_KEY: spec.NO_SPAN if accept is None else accept,
        }
        th.run_image_statistics(
            executor, examples, output, properties, str(tmp_path / f"{name}-run"), str(serving)
        )
        return output.uri

    first = run("span1", 12)
    stats = schema.read(first)
    assert not stats.drift.checked and not stats.anomalies
    assert stats.drift.reason.startswith(f"no model has been pushed to {serving} yet")
    report = (tmp_path / "span1-statistics" / layout.REPORT_FILE).read_text()
    assert f"Not checked: no model has been pushed to {serving} yet" in report

    # The push the Trainer and Pusher would make: the statistics beside the model.
    extra = serving / "1700000000" / served_models.ASSETS_EXTRA_DIR
    extra.mkdir(parents=True)
    shutil.copy(os.path.join(first, layout.IMAGE_STATS_FILE), extra)
    (extra / layout.LABELS_TXT_FILE).write_text("\n".join(sorted(imagegen.COLOUR_CLASSES)) + "\n")
    (serving / "1700000000" / served_models.PUSH_COMPLETE_FILE).touch()

    stats = schema.read(run("span2", 24))
    assert stats.drift.checked and stats.drift.baseline_uri == str(extra / layout.IMAGE_STATS_FILE)
    assert stats.drift.baseline.images == 36 and stats.drift.current.images == 72
    assert not [c for c in stats.drift.checks if c.drifted] and not stats.anomalies

    with pytest.raises(anomaly_lib.AnomaliesFoundError) as stopped:
        run("span4", 24, grayscale=True)
    message = str(stopped.value)
    assert "the run stops before training (statistics.fail_on_drift: true)" in message
    drift_lines = [line for line in message.splitlines() if line.startswith("  - [drift]")]
    assert drift_lines and any(drift.STD_RATIO in line for line in drift_lines)
    assert all("the served model's data" in line and "threshold" in line for line in drift_lines)

    warned = schema.read(run("span4-warned", 24, fail_on_drift=False, grayscale=True))
    drifted = {c.metric for c in warned.drift.checks if c.drifted}
    assert {drift.STD_RATIO, drift.CLASS_MEAN_SHIFT} <= drifted
    assert drift.MEAN_SHIFT not in drifted
    assert [a.code for a in warned.anomalies] == [anomaly_lib.DRIFT] * len(drifted)
    assert len(drift_lines) == len(drifted)
    report = (tmp_path / "span4-warned-statistics" / layout.REPORT_FILE).read_text()
    assert f'data-metric="{drift.STD_RATIO}" data-drifted="true"' in report

    # Accepted for span 5, the change is recorded beside champion 1700000000: span 6,
    # grey too, passes as that change, said so, until another model is pushed.
    accepted = schema.read(run("span5", 24, grayscale=True, span=5, accept=5))
    assert accepted.drift.accepted.startswith("span 5: accepted by accept_drift_span: ")
    assert os.listdir(serving / ".accepted-drift") == ["1700000000-span-5.json"]
    again = schema.read(run("span6", 24, grayscale=True, span=6))
    assert again.drift.accepted.startswith(
        "span 6: the change accepted at span 5 against champion 1700000000, not served yet: "
    )
    # A span let through by an acceptance waits, in the window, for a push trained on it.
    admitted = {s.span: s.accepted for s in spans.admitted(str(serving))}
    assert admitted == {5: True, 6: True}
    shutil.copytree(serving / "1700000000", serving / "1700000100")
    with pytest.raises(anomaly_lib.AnomaliesFoundError):
        run("span7", 24, grayscale=True, span=7)  # another champion: the change is new to it
    assert 7 not in {s.span for s in spans.admitted(str(serving))}

    # Each stop is in the serving folder's history, the champion still serving.
    stops, problems = serving_history.read(str(serving))
    assert problems == []
    assert [(d.kind, d.span, d.served_version) for d in stops] == [
        (serving_history.STOPPED, None, 1700000000),
        (serving_history.STOPPED, 7, 1700000100),
    ]
    assert all(d.reason.startswith("data gate: [drift] ") for d in stops)


def test_the_strict_jpeg_check_finds_what_tensorflow_passes_over_and_can_be_turned_off():
    photo = imagegen.jpeg_bytes(imagegen.photo_like(96, 96, seed=5))
    corrupt = bytearray(photo)
    middle = len(corrupt) // 2
    corrupt[middle : middle + 60] = (
        np.random.default_rng(1).integers(1, 255, 60, np.uint8).tobytes()
    )
    tf.io.decode_jpeg(bytes(corrupt))  # TensorFlow: no error, wrong pixels
    records = []
    for name, data in (("good.jpg", photo), ("corrupt.jpg", bytes(corrupt))):
        example = tf.train.Example()
        example.features.feature[fk.IMAGE_ENCODED_KEY].bytes_list.value.append(data)
        example.features.feature[fk.FILENAME_KEY].bytes_list.value.append(name.encode())
        records.append(example.SerializeToString())
    decoder = BatchDecoder(IMAGE_SIZE, CROP)
    strict, _ = analyze_batch(records, "train", decoder, AnalysisOptions(IMAGE_SIZE, CROP))
    assert (strict.images, strict.failed) == (1, 1)
    assert strict.failures == [
        ("corrupt.jpg", "corrupt jpeg: Corrupt JPEG data: 124 extraneous bytes before marker 0xd9")
    ]
    lenient, _ = analyze_batch(
        records, "train", decoder, AnalysisOptions(IMAGE_SIZE, CROP, verify_images=False)
    )
    assert (lenient.images, lenient.failed) == (2, 0)


def test_the_strict_check_trusts_a_conversion_that_decoded_every_image(dataset, tmp_path):
    options = AnalysisOptions(IMAGE_SIZE, CROP)
    assert strict_check_needed(str(tmp_path), options)  # no summary: records from elsewhere
    assert strict_check_needed(dataset["examples"], options)  # pass-through
    summary = conversion_summary.read(dataset["examples"])
    conversion_summary.write(str(tmp_path), dataclasses.replace(summary, decoded_every_image=True))
    assert not strict_check_needed(str(tmp_path), options)
    assert not strict_check_needed(
        dataset["examples"], AnalysisOptions(16, CROP, verify_images=False)
    )
