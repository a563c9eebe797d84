"""Generated data for the Trainer and Evaluator tests: visually separable classes,
converted by ImageExampleGen's run_conversion, plus a made-up image_stats.json."""

from __future__ import annotations

import glob
import os

import apache_beam as beam
import numpy as np

from imgpipe.components.common.formats import manifest
from imgpipe.components.common.formats.conversion_summary import ConversionSummary
from imgpipe.components.common.formats.layout import IMAGE_STATS_FILE
from imgpipe.components.image_example_gen.convert import run_conversion
from imgpipe.components.image_example_gen.options import ImageOptions, OutputOptions
from tests.imagegen import jpeg_bytes, png_bytes, write

CLASSES = ("blue", "red", "stripes")


def class_image(label: str, index: int, size: int = 40) -> np.ndarray:
    """Noisy images of a class that a tiny CNN separates: two colours and a stripe pattern."""
    rng = np.random.default_rng(hash((label, index)) % (1 << 32))
    noise = rng.normal(0, 18, (size, size, 3))
    if label == "red":
        base = np.array([200, 40, 40]) + rng.uniform(-30, 30, 3)
        image = np.broadcast_to(base, (size, size, 3)) + noise
    elif label == "blue":
        base = np.array([40, 60, 200]) + rng.uniform(-30, 30, 3)
        image = np.broadcast_to(base, (size, size, 3)) + noise
    else:
        period = int(rng.integers(4, 8))
        rows = (np.arange(size) // (period // 2)) % 2
        stripes = np.where(rows[:, None, None] == 1, 230.0, 25.0)
        image = np.broadcast_to(stripes, (size, size, 3)) + noise
    return np.clip(image, 0, 255).astype(np.uint8)


def make_class_folder(root: str, per_class: int, size: int = 40, png_every: int = 5) -> str:
    """root/<class>/<i>.jpg (every `png_every`-th a PNG, so both decoders are exercised)."""
    for label in CLASSES:
        for i in range(per_class):
            pixels = class_image(label, i, size)
            if png_every and i % png_every == 0:
                write(os.path.join(root, label, f"{i:03d}.png"), png_bytes(pixels))
            else:
                write(os.path.join(root, label, f"{i:03d}.jpg"), jpeg_bytes(pixels))
    return root


def convert(
    image_root: str, examples_dir: str, gzip: bool = False, num_shards: int = 2
) -> ConversionSummary:
    result = run_conversion(
        image_root,
        examples_dir,
        ImageOptions(),
        OutputOptions(
            splits=(("train", 0.75), ("eval", 0.25)),
            stratify=True,
            num_shards=num_shards,
            gzip=gzip,
        ),
        make_pipeline=lambda: beam.Pipeline(),
    )
    return result.summary


def write_stats(
    statistics_dir: str,
    image_size: int,
    mean=(110.0, 80.0, 110.0),
    std=(70.0, 60.0, 70.0),
    crop_fraction: float = 0.875,
) -> str:
    """An ImageStatistics artifact (image_stats.json and the manifest) whose train and eval
    pixels have this mean and std."""
    from imgpipe.components.common.formats import image_stats as schema

    empty = schema.Histogram(edges=(), counts=())
    pixels = schema.PixelStats(
        mean=tuple(mean),
        std=tuple(std),
        pixels_per_channel=1,
        image_weighted_mean=tuple(mean),
        histogram=(),
    )
    split = schema.SplitStats(
        images=1,
        undecodable=0,
        undecodable_files=(),
        pixels=pixels,
        native_pixels=None,
        sizes=schema.Sizes(empty, empty, empty),
        bytes=schema.ByteStats(edges=(), counts=(), total=0, mean=None),
        formats={},
        channels={},
        color_modes={},
        labels=schema.LabelStats(counts={}, imbalance_ratio=None, missing=(), unknown_ids={}),
        duplicates=schema.Duplicates(0, 0, ()),
        near_duplicates=schema.NearDuplicates(0, ()),
        thumbnails={},
    )
    os.makedirs(statistics_dir, exist_ok=True)
    schema.write(
        statistics_dir,
        schema.ImageStats(
            version=schema.SCHEMA_VERSION,
            preprocessing=schema.Preprocessing(image_size, crop_fraction, "test", "test"),
            notes={},
            labels=(),
            source=schema.Source("test", 1, 0, 0, 1.0, False),
            splits={"train": split, "eval": split},
            leakage=schema.Leakage(0, {}, {}, 0.0, ()),
        ),
    )
    manifest.write(statistics_dir, manifest.describe(statistics_dir, [IMAGE_STATS_FILE]))
    return statistics_dir


def evaluate(tmp_path, name: str, examples, model_dir: str, serving_dir: str, **config):
    """Resolves the champion in serving_dir and runs the Evaluator executor on `model_dir`
    (a Format-Serving folder), then gives the serving lease back as the Pusher would;
    returns (Evaluation, ModelBlessing)."""
    from tfx import types
    from tfx.types import standard_artifacts

    from imgpipe.components.common.storage import serving_lock
    from imgpipe.components.evaluator import evaluation
    from imgpipe.components.evaluator.component import ImageEvaluator
    from imgpipe.components.evaluator.config import EvaluatorConfig
    from imgpipe.components.evaluator.executor import Executor

    model = standard_artifacts.Model()
    model.uri = os.path.dirname(model_dir)
    result, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    result.uri, blessing.uri = str(tmp_path / name / "evaluation"), str(tmp_path / name / "b")
    component = ImageEvaluator(
        types.Channel(type=standard_artifacts.Examples),
        types.Channel(type=standard_artifacts.Model),
        EvaluatorConfig(**config),
    )
    champion = resolve_champion(str(tmp_path / f"{name}-run"), serving_dir)
    Executor().Do(
        {"examples": [examples], "model": [model], "champion": [champion]},
        {"evaluation": [result], "blessing": [blessing]},
        component.exec_properties,
    )
    if blessing.has_custom_property(serving_lock.LEASE_PROPERTY):
        serving_lock.release(
            serving_dir, blessing.get_string_custom_property(serving_lock.LEASE_PROPERTY)
        )
    return evaluation.read(result.uri), blessing


def photo_pixels(folder: str, labels: tuple[str, ...], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Every folder/<label>/*.jpg resized to size x size RGB, with its label's index."""
    import cv2

    images, ids = [], []
    for index, label in enumerate(labels):
        for path in sorted(glob.glob(os.path.join(folder, label, "*.jpg"))):
            photo = cv2.cvtColor(cv2.imread(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
            images.append(cv2.resize(photo, (size, size), interpolation=cv2.INTER_AREA))
            ids.append(index)
    return np.stack(images), np.array(ids)


def trained_photo_model(
    folder: str, labels: tuple[str, ...], path: str, size: int, training: dict | None = None
) -> str:
    """tiny_cnn trained on every photo of `folder` at `size` px, exported to `path` (a
    Format-Serving folder) as the Trainer exports, with `training` as its record of what
    it was trained on (served_models.TRAINING_FILE); returns `path`."""
    import tensorflow as tf

    from imgpipe.components.common.images.model_input import ModelInput
    from imgpipe.components.common.storage import outputs
    from imgpipe.components.trainer import export
    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer.config import TrainerConfig

    tf.keras.utils.set_random_seed(0)
    config = TrainerConfig(backbone="tiny_cnn", image_size=size, learning_rate=0.01)
    pixels, ids = photo_pixels(folder, labels, size)
    mean = tuple(float(v) for v in pixels.reshape(-1, 3).mean(0))
    std = tuple(float(v) for v in pixels.reshape(-1, 3).std(0))
    model_input = ModelInput(mean, std, size, crop_fraction=1.0)
    model = model_lib.build_model(config, len(labels), model_input)
    model_lib.compile_model(model, config, total_steps=12 * len(pixels) // 16)
    model.fit(pixels, ids, batch_size=16, epochs=12, verbose=0, shuffle=True)
    parent, name = os.path.split(path)
    outputs.publish_folder(
        parent,
        name,
        lambda out: export.export_serving_model(
            model, out, list(labels), model_input, training=training
        ),
    )
    return path


def resolve_champion(work: str, serving_dir: str):
    """The ChampionResolver's executor on `serving_dir`: the ServedChampion artifact a run
    hands its steps (it holds the serving lease when serving_dir is set)."""
    from imgpipe.components.champion import executor as resolver
    from imgpipe.components.common.formats.artifact_types import ChampionArtifact

    artifact = ChampionArtifact()
    artifact.uri = os.path.join(work, "champion")
    resolver.Executor().Do({}, {"champion": [artifact]}, {"serving_dir": serving_dir})
    return artifact


def release_lease(champion_artifact) -> None:
    """Gives back the serving lease a resolved champion holds (as a run's last step does)."""
    from imgpipe.components.common.formats import champion
    from imgpipe.components.common.storage import serving_lock

    resolved = champion.read(champion_artifact.uri)
    if resolved.lease_token:
        serving_lock.release(resolved.serving_dir, resolved.lease_token)


def run_image_statistics(executor, examples, output, properties: dict, work: str, serving: str):
    """ImageStatistics' executor as a run calls it: the champion in `serving` resolved
    first (into `work`), its serving lease given back after, whatever the step did."""
    from imgpipe.components.image_statistics import spec

    champion = resolve_champion(work, serving)
    try:
        executor.Do(
            {spec.EXAMPLES_KEY: [examples], spec.CHAMPION_KEY: [champion]},
            {spec.STATISTICS_KEY: [output]},
            properties,
        )
    finally:
        release_lease(champion)
