"""The label audit's recall and precision on planted label flips, on photos.

    bin/in-env python -m benchmarks.label_audit_bench [--per-class 60] [--out DIR]

A champion (the project's tiny_cnn, trained on clean crops of OpenCV's sample photos,
pipelines/sample_photos.py, exported by the Trainer's exporter and pushed with its own
held-out rate) audits new spans of other crops of the same classes, in which 0%, 5%,
20% and 40% of the labels were moved to another class. The spans go through
ImageExampleGen's conversion and the audit reads the Examples as ImageStatistics does.
Prints one Markdown table row per rate: flagged fraction, recall and precision against
the planted flips, and whether the default gate stops the span.

The champion helpers are shared with tests/test_label_audit_component.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Sequence

import numpy as np

CLASSES = ("animal", "building", "chessboard", "fruit")
IMAGE_SIZE = 64
RATES = (0.0, 0.05, 0.2, 0.4)
CHAMPION_VERSION = 1700000000


def photo_folder(root: str, per_class: int, seed: int) -> dict[str, list[str]]:
    """Crops of the sample photos, root/<class>/*.jpg; returns the files of each class."""
    from imgpipe.pipelines import sample_photos

    sample_photos.make_dataset(root, per_class=per_class, size=IMAGE_SIZE * 3 // 2, seed=seed)
    return {
        c: sorted(os.path.join(root, c, f) for f in os.listdir(os.path.join(root, c)))
        for c in CLASSES
    }


def moved_copy(source: dict[str, list[str]], target: str, rate: float, seed: int) -> set[str]:
    """Copies the folder to `target` with `rate` of its images filed under another class;
    returns the moved images' new paths relative to target."""
    rng = np.random.default_rng(seed)
    files = [(c, path) for c in CLASSES for path in source[c]]
    moved_indices = set(rng.choice(len(files), int(round(rate * len(files))), replace=False))
    moved = set()
    for i, (label, path) in enumerate(files):
        if i in moved_indices:
            label = CLASSES[
                (CLASSES.index(label) + int(rng.integers(1, len(CLASSES)))) % len(CLASSES)
            ]
        relative = os.path.join(label, os.path.basename(path))
        os.makedirs(os.path.join(target, label), exist_ok=True)
        shutil.copy(path, os.path.join(target, relative))
        if i in moved_indices:
            moved.add(relative)
    return moved


def convert(image_root: str, examples_dir: str, splits=(("train", 0.8), ("eval", 0.2))) -> str:
    """ImageExampleGen's conversion of the folder, as the pipeline runs it."""
    import apache_beam as beam

    from imgpipe.components.image_example_gen.convert import run_conversion
    from imgpipe.components.image_example_gen.options import ImageOptions, OutputOptions

    run_conversion(
        image_root,
        examples_dir,
        ImageOptions(),
        OutputOptions(splits=splits, stratify=True, num_shards=1),
        make_pipeline=lambda: beam.Pipeline(),
    )
    return examples_dir


def _pixels(files: Sequence[str]):
    import tensorflow as tf

    from imgpipe.components.trainer import input as input_lib

    encoded = tf.constant([open(p, "rb").read() for p in files])
    return input_lib.decode_batch(encoded, input_lib.EVAL, IMAGE_SIZE, 1.0)


def train_champion(
    files: dict[str, list[str]], held_out: dict[str, list[str]], serving_dir: str, epochs: int
) -> tuple[str, float]:
    """Trains tiny_cnn on `files`, pushes it to serving_dir with its held-out audit rate
    (what the Trainer records); returns the push and its held-out accuracy."""
    import keras
    import tensorflow as tf

    from imgpipe.components.common.formats import served_models
    from imgpipe.components.common.images import label_audit
    from imgpipe.components.common.images import label_audit_scoring as scoring
    from imgpipe.components.common.images.model_input import ModelInput
    from imgpipe.components.trainer import export
    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer.config import TINY_CNN, TrainerConfig

    paths = [p for c in CLASSES for p in files[c]]
    labels = np.array([i for i, c in enumerate(CLASSES) for _ in files[c]])
    images = _pixels(paths)
    config = TrainerConfig(backbone=TINY_CNN, image_size=IMAGE_SIZE, dropout=0.0, seed=0)
    mean = tf.reduce_mean(tf.cast(images, tf.float32), axis=(0, 1, 2)).numpy().tolist()
    model_input = ModelInput(tuple(mean), (64.0, 64.0, 64.0), IMAGE_SIZE, crop_fraction=1.0)
    model = model_lib.build_model(config, len(CLASSES), model_input)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    flipped = tf.image.flip_left_right(images)
    model.fit(
        tf.concat([images, flipped], 0),
        np.concatenate([labels, labels]),
        epochs=epochs,
        batch_size=32,
        shuffle=True,
        verbose=0,
    )
    push = os.path.join(serving_dir, str(CHAMPION_VERSION))
    export.export_serving_model(model, push, list(CLASSES), model_input)
    held_paths = [p for c in CLASSES for p in held_out[c]]
    held_labels = [c for c in CLASSES for _ in held_out[c]]
    probabilities = model.predict(_pixels(held_paths), verbose=0)
    accuracy = float(np.mean(probabilities.argmax(1) == [CLASSES.index(c) for c in held_labels]))
    found = label_audit.audit(CLASSES, held_labels, probabilities)
    reference = scoring.Reference(found.flagged_fraction, len(found.flagged), found.audited, "eval")
    from imgpipe.components.common.runtime import config_loader
    from imgpipe.components.common.storage import fileio

    fileio.write_text(
        os.path.join(push, served_models.ASSETS_EXTRA_DIR, scoring.REFERENCE_FILE),
        config_loader.to_document(reference),
    )
    open(os.path.join(push, served_models.PUSH_COMPLETE_FILE), "w").close()
    return push, accuracy


def measure(work: str, per_class: int, epochs: int, champion_per_class: int) -> list[str]:
    from imgpipe.components.common.formats import champion
    from imgpipe.components.image_statistics import label_gate
    from imgpipe.components.image_statistics.config import StatisticsConfig

    start = time.perf_counter()
    clean = photo_folder(os.path.join(work, "champion-data"), champion_per_class, seed=0)
    held_out = photo_folder(os.path.join(work, "champion-eval"), per_class // 3, seed=7)
    serving = os.path.join(work, "serving")
    push, accuracy = train_champion(clean, held_out, serving, epochs)
    from imgpipe.components.common.formats import served_models
    from imgpipe.components.common.images import label_audit_scoring as scoring

    reference = scoring.read_reference(served_models.latest(serving))
    span = photo_folder(os.path.join(work, "span-photos"), per_class, seed=1)
    config = StatisticsConfig()
    rows = [
        f"champion: tiny_cnn at {IMAGE_SIZE} px, {champion_per_class} crops per class x "
        f"{len(CLASSES)} classes, {epochs} epochs; spans of {per_class} per class; held-out "
        f"accuracy {accuracy:.3f}, held-out flagged "
        f"{reference.flagged_fraction:.1%} ({reference.flagged}/{reference.audited})",
        "",
        "| labels moved | images | flagged | recall | precision | gate | decision | audit s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate in RATES:
        name = f"span-{int(rate * 100)}"
        moved = moved_copy(span, os.path.join(work, name), rate, seed=int(rate * 1000) + 3)
        examples = convert(os.path.join(work, name), os.path.join(work, name + "-examples"))
        started = time.perf_counter()
        resolved = champion.resolve(serving)
        audited = label_gate.before_training(resolved, examples, ["train", "eval"], config)
        seconds = time.perf_counter() - started
        result = audited.result
        flagged = {i.path for i in result.issues}
        hits = len(flagged & moved)
        recall = hits / len(moved) if moved else float("nan")
        precision = hits / len(flagged) if flagged else float("nan")
        rows.append(
            f"| {rate:.0%} ({len(moved)}) | {result.audited} | {result.flagged_fraction:.1%} "
            f"({result.flagged}) | {recall:.2f} | {precision:.2f} | {result.threshold:.1%} | "
            f"{'stop' if result.exceeded else 'pass'} | {seconds:.1f} |"
        )
        print(rows[-1], flush=True)
    rows.append("")
    rows.append(f"{time.perf_counter() - start:.0f} s in all")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-class", type=int, default=60)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument(
        "--champion-per-class",
        type=int,
        help="the champion's training crops (default: --per-class)",
    )
    parser.add_argument("--out", help="a folder to keep the data in (default: a temporary one)")
    args = parser.parse_args(argv)
    work = args.out or tempfile.mkdtemp(prefix="imgpipe-label-audit-bench-")
    try:
        print(
            "\n".join(
                measure(
                    work, args.per_class, args.epochs, args.champion_per_class or args.per_class
                )
            )
        )
    finally:
        if not args.out:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
