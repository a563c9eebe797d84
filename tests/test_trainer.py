"""The Trainer: config, memory and device decisions, the input_fn, the model, export,
learning, checkpoint resume and MirroredStrategy, on small generated images."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from tfx.components.trainer.fn_args_utils import FnArgs

from imgpipe.components.common.formats import artifacts, layout, manifest
from imgpipe.components.common.formats.features import TFDS_KEY_MAP
from imgpipe.components.common.images import preprocessing
from imgpipe.components.common.images.model_input import MIN_STD, ModelInput
from imgpipe.components.common.storage import fileio
from imgpipe.components.trainer import (
    backbones,
    datasets,
    devices,
    export,
    memory,
    read_errors,
    task,
    training,
)
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import model as model_lib
from imgpipe.components.trainer.config import TrainerConfig, from_custom_config
from tests import imagegen, waiting
from tests import trainer_helpers as th

SIZE = 32
MEAN, STD = (110.0, 80.0, 110.0), (70.0, 60.0, 70.0)
NO_CACHE = memory.plan_memory(0, 0, 1 << 30, cache="off", shuffle_buffer=16)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainer")
    images = th.make_class_folder(str(root / "images"), per_class=40)
    examples = str(root / "examples")
    summary = th.convert(images, examples)
    stats = th.write_stats(str(root / "stats"), SIZE, MEAN, STD)
    return {
        "root": root,
        "images": images,
        "examples": examples,
        "summary": summary,
        "stats": stats,
    }


def fn_args(data, out: str, train_steps: int, **custom) -> FnArgs:
    examples = data["examples"]
    config = {
        "backbone": "tiny_cnn",
        "image_size": SIZE,
        "batch_size": 16,
        "epochs": 2,
        "learning_rate": 0.01,
        "image_statistics_uri": data["stats"],
        **custom,
    }
    return FnArgs(
        train_files=[os.path.join(examples, "Split-train", "*")],
        eval_files=[os.path.join(examples, "Split-eval", "*")],
        train_steps=train_steps,
        eval_steps=None,
        serving_model_dir=os.path.join(out, "model", "Format-Serving"),
        # LocalDagRunner's layout, which puts the backups in <out>/Trainer/.backups.
        model_run_dir=os.path.join(out, "Trainer", "model_run", "1"),
        custom_config=config,
    )


def eval_records(examples: str) -> list[bytes]:
    """The eval split's records in the order EVAL mode reads them."""
    source = input_lib.split_source(examples, "eval")
    return [r.numpy() for r in input_lib.read_records(source, input_lib.EVAL)]


# --- configuration and decisions -----------------------------------------------------


@pytest.mark.unit
def test_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['epoch'\].*allowed: .*'epochs'"):
        from_custom_config({"epoch": 3})
    with pytest.raises(ValueError, match="backbone 'vgg'"):
        from_custom_config({"backbone": "vgg"})
    with pytest.raises(ValueError, match="mixed_precision"):
        from_custom_config({"mixed_precision": "yes"})
    with pytest.raises(ValueError, match=r"mean needs 3 values"):
        from_custom_config({"mean": [1, 2]})
    config = from_custom_config(
        {"backbone": "resnet50", "mean": [1, 2, 3], "image_statistics_uri": "/x"}
    )
    assert config.backbone == "resnet50" and config.mean == (1.0, 2.0, 3.0)


@pytest.mark.unit
def test_plan_memory_caches_only_what_fits():
    fits = memory.plan_memory(
        encoded_bytes=100 * memory.MB, records=10_000, available_bytes=4096 * memory.MB
    )
    assert fits.cache and "fits" in fits.reason
    # 20% of the 2 GB budget / 10 KB per record, bounded by the record count.
    assert fits.shuffle_buffer == 10_000
    big = memory.plan_memory(
        encoded_bytes=3000 * memory.MB, records=300_000, available_bytes=4096 * memory.MB
    )
    assert not big.cache and "does not fit" in big.reason
    assert big.shuffle_buffer == int(2048 * memory.MB * 0.2) // (3000 * memory.MB // 300_000)
    budgeted = memory.plan_memory(
        100 * memory.MB, 10_000, 4096 * memory.MB, ram_budget_bytes=100 * memory.MB
    )
    assert not budgeted.cache and budgeted.budget_bytes == 100 * memory.MB
    forced = memory.plan_memory(3000 * memory.MB, 10, 1, cache="on", shuffle_buffer=5)
    assert forced.cache and forced.shuffle_buffer == 5 and not forced.decoded
    # EVAL's decoded pixels are cached instead when they fit, unless caching is off.
    args = (100 * memory.MB, 10_000, 4096 * memory.MB)
    decoded = memory.plan_memory(*args, decoded_bytes=500 * memory.MB)
    assert decoded.cache and decoded.decoded and "decoded" in decoded.reason
    assert decoded.autotune_ram_budget == 2048 * memory.MB - 500 * memory.MB - 10_000 * 10_485
    too_big = memory.plan_memory(*args, decoded_bytes=1500 * memory.MB)
    assert too_big.cache and not too_big.decoded and "encoded" in too_big.reason
    assert not memory.plan_memory(*args, cache="off", decoded_bytes=1).cache
    assert memory.available_memory_bytes() > 0


@pytest.mark.unit
def test_the_model_input_is_resolved_once_from_the_statistics_and_the_config(tmp_path):
    stats = th.write_stats(str(tmp_path / "stats"), SIZE, MEAN, STD, crop_fraction=0.8)
    config = TrainerConfig(backbone="tiny_cnn", image_size=SIZE)
    resolved = task.resolve_model_input(config, stats)
    assert resolved == ModelInput(MEAN, STD, SIZE, 0.8, normalize_on_host=False)
    assert resolved.model_normalization == (MEAN, STD) and resolved.host_normalization is None
    assert resolved.decoded_image_bytes == SIZE * SIZE * 3
    overridden = dataclasses.replace(
        config, mean=(1.0, 2.0, 3.0), crop_fraction=1.0, normalize_on_host=True
    )
    on_host = task.resolve_model_input(overridden, stats)
    assert (on_host.mean, on_host.std, on_host.crop_fraction) == ((1.0, 2.0, 3.0), STD, 1.0)
    assert on_host.model_normalization is None
    assert on_host.host_normalization == ((1.0, 2.0, 3.0), STD)
    assert on_host.decoded_image_bytes == SIZE * SIZE * 3 * 4  # float32
    with pytest.raises(ValueError, match="connect an ImageStatistics artifact"):
        task.resolve_model_input(config, None)
    with pytest.raises(ValueError, match="std must be positive"):
        ModelInput(MEAN, (1.0, 0.0, 1.0))
    # A channel that never varies (all-black blue, say) is floored, not divided by zero;
    # the config's std still wins over the floor.
    flat = th.write_stats(str(tmp_path / "flat"), SIZE, MEAN, (0.0, 0.3, 40.0))
    assert task.resolve_model_input(config, flat).std == (MIN_STD, MIN_STD, 40.0)
    chosen = dataclasses.replace(config, std=(0.5, 0.5, 0.5))
    assert task.resolve_model_input(chosen, flat).std == (0.5, 0.5, 0.5)


@pytest.mark.unit
def test_an_auto_side_is_the_statistics_side_resolved_once(tmp_path):
    """The pipeline computes the statistics at TrainerConfig.input_size; the Trainer
    takes the side from them rather than resolving `auto` again; without statistics it
    resolves `auto` itself, and a side the config sets wins."""
    stats = th.write_stats(str(tmp_path / "stats"), 48, MEAN, STD)
    auto = TrainerConfig(backbone="tiny_cnn")
    assert task.resolve_model_input(auto, stats).image_size == 48
    assert auto.resolved(48).image_size == 48 and auto.resolved().image_size == auto.input_size
    given = dataclasses.replace(auto, mean=MEAN, std=STD)
    assert task.resolve_model_input(given, None).image_size == auto.input_size
    sized = dataclasses.replace(auto, image_size=SIZE)
    assert task.resolve_model_input(sized, stats).image_size == SIZE
    assert sized.resolved(48).image_size == SIZE


@pytest.mark.unit
def test_plan_devices():
    gpus = ["/device:GPU:0", "/device:GPU:1"]
    cpu = ["/device:CPU:0"]
    plan = devices.plan_devices(gpus, cpu)
    assert (plan.strategy, plan.replicas, plan.precision_policy) == (
        devices.MIRRORED,
        2,
        devices.MIXED_FLOAT16,
    )
    one = devices.plan_devices(gpus, cpu, num_gpus=1)
    assert (one.strategy, one.devices, one.precision_policy) == (
        devices.SINGLE,
        ("/device:GPU:0",),
        devices.MIXED_FLOAT16,
    )
    assert devices.plan_devices(gpus, cpu, mixed_precision="off").precision_policy == "float32"
    on_cpu = devices.plan_devices([], cpu)
    assert (on_cpu.strategy, on_cpu.precision_policy) == (devices.SINGLE, devices.FLOAT32)
    assert devices.plan_devices(gpus, cpu, num_gpus=0).precision_policy == devices.FLOAT32
    assert devices.plan_devices([], ["/cpu:0", "/cpu:1"]).strategy == devices.MIRRORED
    with pytest.raises(ValueError, match="needs a GPU"):
        devices.plan_devices([], cpu, mixed_precision="on")
    with pytest.raises(ValueError, match="num_gpus=3"):
        devices.plan_devices(gpus, cpu, num_gpus=3)


# --- the input_fn ----------------------------------------------------------------------


@pytest.mark.component
def test_input_fn_shapes_and_dtypes(data):
    source = input_lib.split_source(data["examples"], "train")
    assert source.records == data["summary"].splits["train"].records == 90
    train = input_lib.make_dataset(
        source, input_lib.TRAIN, image_size=SIZE, batch_size=16, memory=NO_CACHE
    )
    for images, labels in train.take(7):  # 7 x 16 > 90: crosses an epoch boundary
        assert images.shape == (16, SIZE, SIZE, 3) and images.dtype == tf.uint8
        assert labels.shape == (16,) and labels.dtype == tf.int32
        assert set(labels.numpy()) <= {0, 1, 2}
    normalized = input_lib.make_dataset(
        source,
        input_lib.EVAL,
        image_size=SIZE,
        batch_size=16,
        memory=NO_CACHE,
        normalization=(MEAN, STD),
    )
    plain = input_lib.make_dataset(
        source, input_lib.EVAL, image_size=SIZE, batch_size=16, memory=NO_CACHE
    )
    batches = list(normalized)
    assert [b[0].shape[0] for b in batches] == [16] * 5 + [10]
    assert plain.cardinality() == 6  # Keras sizes an eval pass by it
    assert batches[0][0].dtype == tf.float32
    raw = next(iter(plain))[0].numpy().astype(np.float32)
    np.testing.assert_allclose(batches[0][0].numpy(), (raw - MEAN) / STD, rtol=1e-5, atol=1e-5)


@pytest.mark.unit
def test_random_crop_windows_stay_inside_and_span_the_ranges():
    shapes = tf.constant([[48, 64], [256, 256], [30, 200]] * 2000, tf.int32)
    windows = preprocessing.random_crop_windows(shapes).numpy()
    heights, widths = shapes.numpy().T
    offset_y, offset_x, crop_h, crop_w = windows.T
    assert (crop_h >= 1).all() and (crop_w >= 1).all()
    assert (offset_y >= 0).all() and (offset_x >= 0).all()
    assert (offset_y + crop_h <= heights).all() and (offset_x + crop_w <= widths).all()
    square = slice(1, None, 3)  # the 256 x 256 images: no side is ever clipped
    area = (crop_h * crop_w / (heights * widths))[square]
    assert 0.07 < area.min() < 0.1 and area.max() > 0.98
    aspect = (crop_w / crop_h)[square]
    assert 0.7 < aspect.min() < 0.77 and 1.3 < aspect.max() < 1.4
    assert offset_x[square].min() == 0 and (offset_x + crop_w)[square].max() == 256


@pytest.mark.unit
def test_train_images_crop_flip_and_formats():
    # Dark on the left, bright on the right: a flipped output is brighter on the left.
    ramp = np.repeat(np.linspace(0, 255, 64, dtype=np.float32)[None, :], 48, axis=0)
    pixels = np.stack([ramp] * 3, axis=-1).round().astype(np.uint8)
    jpeg, png = imagegen.jpeg_bytes(pixels), imagegen.png_bytes(pixels)
    shapes = tf.constant([[48, 64]] * 64)
    for batch in ([jpeg] * 64, [jpeg, png] * 32):
        for given in (shapes, None):
            images = preprocessing.train_images(tf.constant(batch), SIZE, given).numpy()
            assert images.shape == (64, SIZE, SIZE, 3) and images.dtype == np.uint8
            flipped = images[:, :, :4].mean(axis=(1, 2, 3)) > images[:, :, -4:].mean(axis=(1, 2, 3))
            assert 10 < flipped.sum() < 54
    # The whole image as the window: each output is the resized PNG, or its mirror.
    whole = preprocessing.train_images(
        tf.constant([png] * 16), SIZE, area_range=(1.0, 1.0), aspect_ratio_range=(64 / 48, 64 / 48)
    ).numpy()
    resized = (
        tf.cast(tf.image.resize(tf.cast(pixels, tf.float32), [SIZE, SIZE]) + 0.5, tf.uint8)
        .numpy()
        .astype(int)
    )
    for image in whole.astype(int):
        assert min(np.abs(image - resized).max(), np.abs(image - resized[:, ::-1]).max()) <= 1
    gif = imagegen.pillow_bytes(Image.fromarray(pixels), "GIF")
    assert (
        preprocessing.image_shapes(tf.constant([jpeg, png, gif])).numpy().tolist() == [[48, 64]] * 3
    )


@pytest.mark.unit
def test_eval_images_center_crop_without_resize_at_the_output_size():
    pixels = imagegen.photo_like(48, 64)
    jpeg, png = imagegen.jpeg_bytes(pixels), imagegen.png_bytes(pixels)
    fraction = SIZE / 48 + 1e-6  # the crop is exactly SIZE x SIZE: no resize
    expected_jpeg = tf.image.decode_and_crop_jpeg(jpeg, [8, 16, SIZE, SIZE], channels=3)
    for batch, expected in (
        ([jpeg, jpeg], [expected_jpeg] * 2),
        ([jpeg, png], [expected_jpeg, pixels[8:40, 16:48]]),
    ):
        images = preprocessing.eval_images(tf.constant(batch), SIZE, fraction).numpy()
        np.testing.assert_array_equal(images, np.stack(expected))


@pytest.mark.component
def test_eval_is_deterministic_and_matches_eval_image(data):
    source = input_lib.split_source(data["examples"], "eval")
    cached = memory.plan_memory(1, 1, 1 << 30, cache="on", shuffle_buffer=1)
    decoded = memory.plan_memory(1, 1, 1 << 30, shuffle_buffer=1, decoded_bytes=1)
    assert decoded.decoded

    def run(plan, passes=1):
        dataset = input_lib.make_dataset(
            source, input_lib.EVAL, image_size=SIZE, batch_size=8, memory=plan
        )
        return [[(x.numpy(), y.numpy()) for x, y in dataset] for _ in range(passes)]

    (first,), (second,), (from_cache,) = run(NO_CACHE), run(NO_CACHE), run(cached)
    from_decoded = run(decoded, passes=2)  # the second pass reads the decoded cache
    for a, *others in zip(first, second, from_cache, *from_decoded, strict=True):
        for other in others:
            np.testing.assert_array_equal(a[0], other[0])
            np.testing.assert_array_equal(a[1], other[1])
    with pytest.raises(ValueError, match="augmented"):
        input_lib.make_dataset(
            source, input_lib.TRAIN, image_size=SIZE, batch_size=8, memory=decoded
        )
    images = np.concatenate([x for x, _ in first])
    labels = np.concatenate([y for _, y in first])
    for i, record in enumerate(eval_records(data["examples"])):
        example = tf.train.Example.FromString(record)
        feature = example.features.feature
        expected = preprocessing.eval_image(feature["image/encoded"].bytes_list.value[0], SIZE)
        np.testing.assert_array_equal(images[i], expected.numpy())
        assert labels[i] == feature["image/class/label"].int64_list.value[0]


@pytest.mark.component
def test_gzip_shards_in_tfds_layout(data, tmp_path):
    """TFDS-style records ({"image", "label"}) in GZIP shards, read through the key map."""
    records = eval_records(data["examples"])
    paths = []
    for shard in range(2):
        path = str(tmp_path / f"{layout.SHARD_PREFIX}-{shard:05d}-of-00002.gz")
        with tf.io.TFRecordWriter(path, "GZIP") as writer:
            for record in records[shard::2]:
                feature = tf.train.Example.FromString(record).features.feature
                writer.write(
                    tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "image": feature["image/encoded"],
                                "label": feature["image/class/label"],
                            }
                        )
                    ).SerializeToString()
                )
        paths.append(path)
    source = input_lib.SplitSource(tuple(paths), records=len(records), name="tfds")
    assert source.compression == layout.GZIP
    dataset = input_lib.make_dataset(
        source,
        input_lib.EVAL,
        image_size=SIZE,
        batch_size=64,
        memory=NO_CACHE,
        key_map=TFDS_KEY_MAP,
    )
    images, labels = next(iter(dataset))
    assert images.shape == (len(records), SIZE, SIZE, 3)
    assert sorted(np.bincount(labels.numpy())) == [10, 10, 10]
    # No size features in this layout: TRAIN reads the sizes from the images.
    train = input_lib.make_dataset(
        source,
        input_lib.TRAIN,
        image_size=SIZE,
        batch_size=16,
        memory=NO_CACHE,
        key_map=TFDS_KEY_MAP,
    )
    for images, _ in train.take(3):
        assert images.shape == (16, SIZE, SIZE, 3) and images.dtype == tf.uint8


@pytest.mark.component
@pytest.mark.parametrize("cut", ["mid_record", "record_boundary"])
def test_truncated_shard_error_names_the_file(data, tmp_path, cut):
    examples = str(tmp_path / "examples")
    shutil.copytree(data["examples"], examples)
    source = input_lib.split_source(examples, "train")
    victim = source.files[1]
    records = [r.numpy() for r in tf.data.TFRecordDataset(victim)]
    with open(victim, "rb") as f:
        content = f.read()
    # A TFRecord is 16 bytes of framing around each payload.
    boundary = sum(len(r) + 16 for r in records[: len(records) // 2])
    with open(victim, "wb") as f:
        f.write(content[: boundary + 40] if cut == "mid_record" else content[:boundary])
    dataset = input_lib.make_dataset(
        source, input_lib.TRAIN, image_size=SIZE, batch_size=16, memory=NO_CACHE
    )
    message = victim if cut == "mid_record" else os.path.basename(victim)
    with pytest.raises(read_errors.ShardReadError, match=message):
        with read_errors.named_read_errors(source):
            for _ in dataset.take(20):
                pass
    if cut == "record_boundary":
        error = read_errors.find_read_error(source)
        assert (
            f"the shards hold {90 - len(records) + len(records) // 2} records but "
            "ImageExampleGen wrote 90" in str(error)
        )


@pytest.mark.component
def test_missing_split_names_the_pattern(data):
    with pytest.raises(FileNotFoundError, match="Split-test"):
        input_lib.split_source(data["examples"], "test")


# --- the model and the export ----------------------------------------------------------


@pytest.mark.component
@pytest.mark.parametrize("scheme", ["", "file://"])
def test_backbone_weights_from_a_local_or_remote_file(tmp_path, monkeypatch, scheme):
    temp = tmp_path / "temp"  # where a remote file's local copy goes, for the build only
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    config = TrainerConfig(backbone="mobilenet_v3_small", image_size=SIZE, width_multiplier=0.75)
    # A weights file of the backbone as pretrained weights lay it out.
    source = backbones.BACKBONES[config.backbone].build((SIZE, SIZE, 3), None, config, True)
    path = str(tmp_path / "notop.weights.h5")
    source.save_weights(path)
    loaded = model_lib.build_model(
        TrainerConfig(**{**config.__dict__, "weights": scheme + path, "seed": 7}),
        3,
        ModelInput(MEAN, STD, SIZE),
    )
    backbone = loaded.get_layer(source.name)
    for a, b in zip(source.weights, backbone.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert os.listdir(temp) == []


@pytest.mark.component
def test_mixed_precision_keeps_the_head_float32():
    keras.mixed_precision.set_global_policy(devices.MIXED_FLOAT16)
    try:
        model = model_lib.build_model(
            TrainerConfig(backbone="tiny_cnn", image_size=SIZE), 3, ModelInput(MEAN, STD, SIZE)
        )
        assert model.get_layer("tiny_cnn").layers[1].compute_dtype == "float16"
        assert model.get_layer(model_lib.PROBABILITIES).dtype_policy.name == "float32"
        assert model(np.zeros((1, SIZE, SIZE, 3), np.uint8)).dtype == "float32"
    finally:
        keras.mixed_precision.set_global_policy(devices.FLOAT32)


@pytest.mark.component
@pytest.mark.parametrize("on_host", [False, True])
def test_serving_signature_matches_the_eval_pipeline(data, tmp_path, on_host):
    labels = artifacts.load_labels(data["examples"])
    model_input = ModelInput(MEAN, STD, SIZE, 0.875, normalize_on_host=on_host)
    model = model_lib.build_model(
        TrainerConfig(backbone="tiny_cnn", image_size=SIZE), len(labels), model_input
    )
    export_dir = str(tmp_path / "serving")
    score_examples = export.export_serving_model(model, export_dir, labels, model_input)
    source = input_lib.split_source(data["examples"], "eval")
    dataset = input_lib.make_dataset(
        source,
        input_lib.EVAL,
        image_size=SIZE,
        batch_size=8,
        memory=NO_CACHE,
        normalization=model_input.host_normalization,
    )
    expected = np.concatenate([model.predict_on_batch(x) for x, _ in dataset])
    # An untrained net whose outputs still depend on the pixels: parity is not trivial.
    assert np.ptp(expected, axis=0).max() > 1e-4

    loaded = tf.saved_model.load(export_dir)
    records = eval_records(data["examples"])
    encoded = [
        tf.train.Example.FromString(r).features.feature["image/encoded"].bytes_list.value[0]
        for r in records
    ]
    served = loaded.signatures[export.SERVING_DEFAULT](images=tf.constant(encoded))
    np.testing.assert_allclose(served[export.PROBABILITIES].numpy(), expected, atol=1e-6)
    assert served[export.CLASS_NAMES].numpy()[0].tolist() == [s.encode() for s in labels]
    by_examples = loaded.signatures[export.SERVING_EXAMPLES](examples=tf.constant(records))
    np.testing.assert_allclose(by_examples[export.PROBABILITIES].numpy(), expected, atol=1e-6)
    # What the export returns (the candidate's label audit scores with it) is that signature.
    in_process = score_examples(tf.constant(records))
    np.testing.assert_allclose(in_process[export.PROBABILITIES].numpy(), expected, atol=1e-6)
    with open(os.path.join(export_dir, "assets.extra", "labels.txt")) as f:
        assert f.read().split() == labels


# --- run_fn ------------------------------------------------------------------------------


@pytest.mark.component
def test_run_fn_learns_separable_classes_into_a_dirty_model_folder(data, tmp_path):
    args = fn_args(data, str(tmp_path), train_steps=40, epochs=2, tensorboard_images=4)
    # A retried Trainer gets the same model folder, with what a killed attempt left.
    model_dir = os.path.dirname(args.serving_model_dir)
    for stale in ("Format-Serving/variables/stale.data", ".imgpipe-work-0/saved_model.pb"):
        imagegen.write(os.path.join(model_dir, stale), b"old")
    manifest.write(model_dir, manifest.describe(model_dir, fileio.list_files(model_dir)))
    task.run_fn(args)
    files = manifest.verify(model_dir, checksums=True).files
    assert "Format-Serving/saved_model.pb" in files
    assert "Format-Serving/assets.extra/labels.txt" in files
    assert fileio.list_files(model_dir) == sorted([*files, layout.MANIFEST_FILE])
    assert not [name for name in files if "stale" in name or name.startswith(".")]
    loaded = tf.saved_model.load(args.serving_model_dir)
    records = eval_records(data["examples"])
    out = loaded.signatures[export.SERVING_EXAMPLES](examples=tf.constant(records))
    truth = [
        tf.train.Example.FromString(r).features.feature["image/class/label"].int64_list.value[0]
        for r in records
    ]
    accuracy = np.mean(np.argmax(out[export.PROBABILITIES].numpy(), axis=-1) == truth)
    assert accuracy > 0.9, accuracy
    # The label audit of the eval split by the trained model, out of sample: in the
    # summary, and in the push as the next span's reference (candidate_audit.py).
    from imgpipe.components.trainer import summary as summary_lib

    audited = summary_lib.read_if_present(args.model_run_dir).label_audit
    assert audited.checked and audited.audited == len(records), audited
    assert audited.flagged_fraction < 0.1 and audited.model_version is None
    assert "Format-Serving/assets.extra/label_audit.json" in files
    assert keras.mixed_precision.global_policy().name == "float32"
    if datasets.tensorboard_available():
        assert glob.glob(os.path.join(args.model_run_dir, "full", "train", "events.out.*"))
        assert glob.glob(os.path.join(args.model_run_dir, datasets.SAMPLES_SUBDIR, "events.*"))
    # The backups are removed once the model is exported.
    assert os.listdir(os.path.join(str(tmp_path), "Trainer")) == ["model_run"]


@pytest.mark.unit
def test_batch_norm_momentum_follows_the_run_length():
    config = TrainerConfig(backbone="mobilenet_v3_small", image_size=SIZE)
    model = model_lib.build_model(config, num_classes=3, model_input=ModelInput(MEAN, STD, SIZE))
    norms = [
        layer
        for layer in model_lib._all_layers(model)
        if isinstance(layer, keras.layers.BatchNormalization)
    ]
    assert norms and {layer.momentum for layer in norms} == {0.999}  # Keras' MobileNetV3
    assert model_lib.fit_batch_norm_to_run(model, total_steps=1_000_000) == 0
    assert model_lib.fit_batch_norm_to_run(model, total_steps=40) == len(norms)
    assert [layer.momentum for layer in norms] == pytest.approx([0.9] * len(norms))


class _Preempted(Exception):
    pass


@pytest.mark.component
def test_preempted_run_resumes_from_its_checkpoint(data, tmp_path, monkeypatch):
    from imgpipe.components.trainer import summary

    checkpoint_dir = str(tmp_path / "ckpt")
    seen: dict[str, list] = {"epochs": [], "start_weights": []}
    saved_at_preemption = []

    class Preempt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 2:
                saved_at_preemption.extend(w.numpy() for w in self.model.weights)
                raise _Preempted()

    class Record(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["start_weights"] = [w.numpy() for w in self.model.weights]

        def on_epoch_begin(self, epoch, logs=None):
            seen["epochs"].append(epoch)

    original = training._callbacks
    monkeypatch.setattr(training, "_callbacks", lambda *a: original(*a) + [Preempt()])

    # Both runs share the checkpoint folder, as a retried run would.
    def run_args(out: str):
        return fn_args(
            data,
            str(tmp_path / out),
            train_steps=16,
            epochs=4,
            checkpoint_dir=checkpoint_dir,
            tensorboard_images=0,
            early_stopping_patience=0,
        )

    with pytest.raises(_Preempted):
        task.run_fn(run_args("first"))
    assert keras.mixed_precision.global_policy().name == "float32"
    # One backup, of the epoch before the preemption, in the training's folder.
    (backup,) = glob.glob(os.path.join(checkpoint_dir, "*", "*", layout.MANIFEST_FILE))
    assert os.path.basename(os.path.dirname(backup)) == "00-0000000008"  # 2 epochs x 4

    monkeypatch.setattr(training, "_callbacks", lambda *a: original(*a) + [Record()])
    second = run_args("second")
    task.run_fn(second)
    assert seen["epochs"] == [2, 3]
    for restored, saved in zip(seen["start_weights"], saved_at_preemption, strict=True):
        np.testing.assert_array_equal(restored, saved)
    assert os.path.exists(os.path.join(second.serving_model_dir, "saved_model.pb"))
    resumed = summary.read_if_present(second.model_run_dir).resume
    assert (resumed.status, resumed.epoch, resumed.step, resumed.optimizer_steps) == (
        "resumed",
        2,
        0,
        8,
    )
    assert os.listdir(checkpoint_dir) == []


MIRRORED_SCRIPT = textwrap.dedent("""
    import os, sys
    import tensorflow as tf
    from absl import logging
    logging.set_verbosity(logging.INFO)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tfx.components.trainer.fn_args_utils import FnArgs
    from imgpipe.components.trainer import devices, task
    plan = devices.plan_devices(*devices.visible_devices())
    assert plan.strategy == devices.MIRRORED and plan.replicas == 2, plan
    examples, stats, out = sys.argv[1:4]
    task.run_fn(FnArgs(
        train_files=[os.path.join(examples, "Split-train", "*")],
        eval_files=[os.path.join(examples, "Split-eval", "*")],
        train_steps=6, eval_steps=None,
        serving_model_dir=os.path.join(out, "Format-Serving"),
        model_run_dir=os.path.join(out, "run"),
        custom_config={"backbone": "tiny_cnn", "image_size": 32, "batch_size": 8,
                       "epochs": 2, "tensorboard_images": 0, "image_statistics_uri": stats}))
    print("REPLICAS", tf.distribute.MirroredStrategy(plan.devices).num_replicas_in_sync)
""")


@pytest.mark.component
@pytest.mark.timeout(waiting.TRAINING_TEST_S)
def test_mirrored_strategy_on_two_logical_cpus(data, tmp_path):
    """Logical devices must be set before TF initializes them: a fresh process."""
    out = str(tmp_path / "mirrored")
    result = subprocess.run(
        [sys.executable, "-c", MIRRORED_SCRIPT, data["examples"], data["stats"], out],
        capture_output=True,
        text=True,
        timeout=waiting.TRAINING_S,
        env={
            **os.environ,
            "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REPLICAS 2" in result.stdout
    assert "Trainer devices: mirrored" in result.stderr
    assert "assert_cardinality` transformation is currently not handled" not in result.stderr
    assert os.path.exists(os.path.join(out, "Format-Serving", "saved_model.pb"))


# --- defaults, fine-tuning and warm start ----------------------------------------------


@pytest.mark.unit
def test_auto_backbone_and_size_follow_the_weights():
    scratch = TrainerConfig().resolved()
    assert (scratch.backbone, scratch.image_size) == ("tiny_cnn", 128)
    pretrained = TrainerConfig(weights="imagenet").resolved()
    assert (pretrained.backbone, pretrained.image_size) == ("mobilenet_v3_small", 224)
    assert TrainerConfig(backbone="resnet50", image_size=160).resolved().image_size == 160
    with pytest.raises(ValueError, match="backbone with ImageNet weights; tiny_cnn has none"):
        TrainerConfig(backbone="tiny_cnn", weights="imagenet").validate()


@pytest.mark.unit
def test_min_train_steps_adds_epochs_to_a_small_data_set():
    assert training._schedule(None, 240, 32, 5, min_steps=300) == (7, 43)
    assert training._schedule(None, 24_000, 32, 5, min_steps=300) == (750, 5)
    assert training._schedule(40, 240, 32, 5, min_steps=300) == (8, 5)  # train_steps rules


@pytest.mark.unit
def test_phases_fine_tune_a_pretrained_backbone():
    from imgpipe.components.trainer import warm_start

    off = warm_start.WarmStart(warm_start.OFF, "")
    scratch = training.plan_phases(TrainerConfig(learning_rate=0.01), 6, off)
    assert [(p.name, p.epochs, p.peak_learning_rate, p.backbone_trainable) for p in scratch] == [
        ("full", 6, 0.01, True)
    ]
    tuned = training.plan_phases(TrainerConfig(weights="imagenet", learning_rate=0.01), 6, off)
    assert [(p.name, p.epochs, p.backbone_trainable) for p in tuned] == [
        ("head", 2, False),
        ("full", 4, True),
    ]
    assert tuned[0].peak_learning_rate == 0.01
    assert tuned[1].peak_learning_rate == pytest.approx(0.001)
    # A warm start with the champion's head skips the head phase.
    full = warm_start.WarmStart(warm_start.FULL, "")
    assert [p.name for p in training.plan_phases(TrainerConfig(), 6, full)] == ["full"]
    fresh_head = warm_start.WarmStart(warm_start.BACKBONE_ONLY, "")
    assert [p.name for p in training.plan_phases(TrainerConfig(), 6, fresh_head)] == [
        "head",
        "full",
    ]


def _push(model, serving: str, labels, version: int, stats: str | None = None) -> str:
    from imgpipe.components.common.formats import served_models

    path = os.path.join(serving, str(version))
    export.export_serving_model(
        model, path, labels, ModelInput(MEAN, STD, SIZE), statistics_uri=stats
    )
    with open(os.path.join(path, served_models.PUSH_COMPLETE_FILE), "w") as f:
        f.write("test")
    return path


@pytest.mark.component
def test_warm_start_takes_what_fits_from_the_champion(tmp_path, data):
    from imgpipe.components.common.formats import served_models
    from imgpipe.components.trainer import warm_start

    config = TrainerConfig(backbone="tiny_cnn", image_size=SIZE, warm_start=True)
    labels = list(th.CLASSES)
    champion = model_lib.build_model(
        dataclasses.replace(config, seed=1), 3, ModelInput(MEAN, STD, SIZE)
    )
    serving = str(tmp_path / "serving")
    pushed = _push(champion, serving, labels, 100, stats=data["stats"])
    extra = os.path.join(pushed, served_models.ASSETS_EXTRA_DIR)
    assert sorted(os.listdir(extra)) == [
        "image_stats.json",
        "label_map.json",
        "labels.txt",
        "model.weights.h5",
        "weight_shapes.json",
    ]

    def weights(model):
        return [w.numpy() for w in model.weights]

    from imgpipe.components.common.formats import champion as champion_lib

    resolved = champion_lib.resolve(serving)  # as the run's ChampionResolver reads it
    same = model_lib.build_model(config, 3, ModelInput(MEAN, STD, SIZE))
    outcome = warm_start.apply(same, config, labels, resolved, ModelInput(MEAN, STD, SIZE))
    assert outcome.status == warm_start.FULL and pushed in outcome.note
    for a, b in zip(weights(champion), weights(same), strict=True):
        np.testing.assert_array_equal(a, b)

    four = model_lib.build_model(config, 4, ModelInput(MEAN, STD, SIZE))
    outcome = warm_start.apply(
        four, config, labels + ["new"], resolved, ModelInput(MEAN, STD, SIZE)
    )
    assert outcome.status == warm_start.BACKBONE_ONLY and "fresh head" in outcome.note
    np.testing.assert_array_equal(
        weights(model_lib.backbone_of(champion))[0], weights(model_lib.backbone_of(four))[0]
    )
    assert four.get_layer("probabilities").get_weights()[0].shape[-1] == 4

    wider = dataclasses.replace(config, backbone="mobilenet_v3_small")
    other = model_lib.build_model(wider, 3, ModelInput(MEAN, STD, SIZE))
    outcome = warm_start.apply(other, wider, labels, resolved, ModelInput(MEAN, STD, SIZE))
    assert outcome.status == warm_start.FRESH
    assert "does not fit this model (another architecture)" in outcome.note
    empty = champion_lib.resolve(str(tmp_path / "empty"))
    outcome = warm_start.apply(same, config, labels, empty, ModelInput(MEAN, STD, SIZE))
    assert outcome.status == warm_start.FRESH and "no champion" in outcome.note


@pytest.mark.component
def test_run_fn_fine_tunes_from_a_weights_file_then_warm_starts(data, tmp_path, monkeypatch):
    """Weights given: a head phase on a frozen backbone, then the whole model at a tenth
    of the rate. The second run warm-starts from the first one's push."""
    from imgpipe.components.trainer import summary

    source = backbones.BACKBONES["tiny_cnn"].build((SIZE, SIZE, 3), None, TrainerConfig(), True)
    weights_file = str(tmp_path / "tiny.weights.h5")
    source.save_weights(weights_file)
    backbone_at: dict[str, list] = {}

    class Watch(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = [w.numpy() for w in model_lib.backbone_of(self.model).weights]

        def on_train_end(self, logs=None):
            end = [w.numpy() for w in model_lib.backbone_of(self.model).weights]
            phase = "head" if not model_lib.backbone_of(self.model).trainable else "full"
            backbone_at[phase] = [self.start, end]

    original = training._callbacks
    monkeypatch.setattr(training, "_callbacks", lambda *a: original(*a) + [Watch()])
    args = fn_args(
        data,
        str(tmp_path / "one"),
        24,
        epochs=3,
        weights=weights_file,
        frozen_epochs=1,
        tensorboard_images=0,
        early_stopping_patience=0,
    )
    task.run_fn(args)
    trained = summary.read_if_present(args.model_run_dir)
    assert [(p.name, p.epochs_run, p.backbone_trainable) for p in trained.phases] == [
        ("head", 1, False),
        ("full", 2, True),
    ]
    assert trained.phases[1].peak_learning_rate == pytest.approx(0.001)
    assert trained.warm_start == "off"
    start, end = backbone_at["head"]  # the frozen phase left the backbone as loaded
    for a, b in zip(start, end, strict=True):
        np.testing.assert_array_equal(a, b)
    start, end = backbone_at["full"]
    assert any(not np.array_equal(a, b) for a, b in zip(start, end, strict=True))

    serving = str(tmp_path / "serving")
    pushed = _push_dir(args.serving_model_dir, serving)
    second = fn_args(
        data,
        str(tmp_path / "two"),
        8,
        epochs=1,
        warm_start=True,
        champion_uri=th.resolve_champion(str(tmp_path / "two-run"), serving).uri,
        tensorboard_images=0,
    )
    task.run_fn(second)
    warm = summary.read_if_present(second.model_run_dir)
    assert warm.warm_start == "full" and pushed in warm.warm_start_note
    assert [p.name for p in warm.phases] == ["full"]


@pytest.mark.component
def test_a_run_with_nothing_new_publishes_the_champions_model_without_training(
    data, tmp_path, monkeypatch
):
    """The same spans and settings as the champion: its model is this run's, byte for
    byte, and no training starts; a changed setting trains again."""
    from imgpipe.components.common.formats import served_models
    from imgpipe.components.trainer import summary, unchanged

    settings = {"epochs": 1, "tensorboard_images": 0}
    first = fn_args(data, str(tmp_path / "one"), 4, **settings)
    task.run_fn(first)
    serving = str(tmp_path / "serving")
    pushed = _push_dir(first.serving_model_dir, serving)

    def no_training(*args, **kwargs):
        raise AssertionError("a run with nothing new trained")

    monkeypatch.setattr(training, "fit_model", no_training)
    champion_uri = th.resolve_champion(str(tmp_path / "two-run"), serving).uri
    again = fn_args(data, str(tmp_path / "two"), 4, champion_uri=champion_uri, **settings)
    task.run_fn(again)
    published = again.serving_model_dir
    files = unchanged.model_files(
        served_models.ServedModel(pushed, int(os.path.basename(pushed)), ())
    )
    assert sorted(fileio.list_files(published)) == sorted(files)
    for relpath in files:
        assert fileio.read_bytes(os.path.join(published, relpath)) == fileio.read_bytes(
            os.path.join(pushed, relpath)
        ), relpath
    manifest.verify(os.path.dirname(published), checksums=True)
    record = summary.read_if_present(again.model_run_dir)
    assert record.phases == () and record.label_audit is not None
    assert record.not_trained.startswith(f"nothing new since champion {os.path.basename(pushed)}")

    # Another setting is another training.
    changed = fn_args(data, str(tmp_path / "three"), 4, champion_uri=champion_uri, epochs=2)
    with pytest.raises(AssertionError, match="nothing new trained"):
        task.run_fn(changed)


@pytest.mark.unit
def test_a_champion_file_changed_after_its_push_is_not_copied_as_its_model(tmp_path):
    from imgpipe.components.trainer import unchanged

    source = tmp_path / "champion"
    source.mkdir()
    (source / "saved_model.pb").write_bytes(b"graph")
    entry = manifest.entry_of(b"graph")
    unchanged.copy_checked(str(source), str(tmp_path / "a"), "saved_model.pb", entry)
    assert (tmp_path / "a" / "saved_model.pb").read_bytes() == b"graph"
    (source / "saved_model.pb").write_bytes(b"grapH")
    with pytest.raises(OSError, match=r"saved_model.pb read as 5 bytes, CRC-32C \w+, but its "):
        unchanged.copy_checked(str(source), str(tmp_path / "b"), "saved_model.pb", entry)


def _push_dir(model_dir: str, serving: str) -> str:
    from imgpipe.components.pusher.executor import publish

    return publish(model_dir, serving)
