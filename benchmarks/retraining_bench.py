"""A retraining schedule run as an operator runs it, from the CLI, one span at a time.

`make bench BENCH_ARGS="--only retraining"`. Seven spans of OpenCV's sample photos
(pipelines/sample_photos.py: animal, building, chessboard, fruit; each span new crops)
land one at a time in one data folder, and `imgpipe run local --data root/span-{SPAN}`
runs after each, against one serving folder:

  1-2  three classes            3  fruit added         4  40% of labels moved
  5    four classes             6  every photo grey    7  four classes

The operator accepts a stop only where the change is intended (the class added, the
camera turned grey), with the flag the stop message names; the mislabelled span is left
stopped. After each span: whether it pushed, the spans it trained on, and the served
model's accuracy on held-back photos (crops no span holds) of the classes it knows; a
push that made that accuracy lower on the classes both models know counts as a worse
push. Measured besides: the paired test's false-refusal rate on two models of equal
quality (simulated: both 85% right, independent errors, the sets' sizes).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

# The schedule: span -> (classes, what is special about it).
ALL_CLASSES = ("animal", "building", "chessboard", "fruit")
SCHEDULE = (
    (1, ALL_CLASSES[:3], ""),
    (2, ALL_CLASSES[:3], ""),
    (3, ALL_CLASSES, "class added"),
    (4, ALL_CLASSES, "mislabelled"),
    (5, ALL_CLASSES, ""),
    (6, ALL_CLASSES, "grey"),
    (7, ALL_CLASSES, ""),
)
PER_CLASS = 40
SIZE = 96
HELD_BACK_SEED = 999
# What the operator accepts, by what is special about the span.
ACCEPTED = {"class added": "--accept-drift", "grey": "--accept-drift"}


def write_span(root: str, span: int, classes: tuple[str, ...], special: str) -> str:
    import cv2

    from imgpipe.pipelines import sample_photos

    folder = os.path.join(root, f"span-{span}")
    staging = folder + ".tmp"
    sample_photos.make_dataset(staging, per_class=PER_CLASS, size=SIZE, seed=span, classes=classes)
    os.remove(staging.rstrip("/") + ".sample_photos")
    rng = np.random.default_rng(span)
    for label in classes:
        for name in sorted(os.listdir(os.path.join(staging, label))):
            path = os.path.join(staging, label, name)
            if special == "grey":
                photo = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2GRAY)
                cv2.imwrite(path, cv2.cvtColor(photo, cv2.COLOR_GRAY2BGR))
            if special == "mislabelled" and rng.random() < 0.4:
                other = [c for c in classes if c != label][int(rng.integers(len(classes) - 1))]
                os.makedirs(os.path.join(staging, other), exist_ok=True)
                shutil.move(path, os.path.join(staging, other, f"moved-{label}-{name}"))
    os.rename(staging, folder)  # a span lands whole
    return folder


def held_back(root: str) -> tuple[list[bytes], list[str]]:
    from imgpipe.pipelines import sample_photos

    folder = os.path.join(root, "held-back")
    sample_photos.make_dataset(folder, per_class=60, size=SIZE, seed=HELD_BACK_SEED)
    images, labels = [], []
    for label in sorted(os.listdir(folder)):
        for name in sorted(os.listdir(os.path.join(folder, label))):
            with open(os.path.join(folder, label, name), "rb") as f:
                images.append(f.read())
            labels.append(label)
    return images, labels


def predictions(model_dir: str, images: list[bytes]) -> list[str]:
    import tensorflow as tf

    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    found: list[str] = []
    for start in range(0, len(images), 32):
        batch = tf.constant(images[start : start + 32])
        found += [p.decode() for p in signature(images=batch)["predicted_class"].numpy()]
    return found


def served(serving: str) -> str | None:
    from imgpipe.components.common.formats import served_models

    model = served_models.latest(serving)
    return model.path if model else None


def run_span(data: str, root: str, serving: str, span: int, accept: str | None) -> tuple[int, str]:
    command = [
        sys.executable,
        "-m",
        "imgpipe.pipelines.cli",
        "run",
        "local",
        "--data",
        os.path.join(data, "span-{SPAN}"),
        "--pipeline-root",
        root,
        "--serving-dir",
        serving,
        "--set",
        "trainer.epochs=6",
        "--set",
        "trainer.image_size=64",
    ]
    if accept:
        command += [accept, str(span)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def _line(output: str, key: str) -> str:
    for line in output.splitlines():
        if line.startswith(key):
            return line[len(key) :].strip()
    return ""


def run_schedule(work: str) -> dict:
    data, root, serving = (os.path.join(work, name) for name in ("data", "root", "serving"))
    images, labels = held_back(work)
    rows, worse_pushes = [], 0
    for span, classes, special in SCHEDULE:
        write_span(data, span, classes, special)
        before = served(serving)
        started = time.monotonic()
        code, output = run_span(data, root, serving, span, None)
        accepted = ""
        if code == 1 and special in ACCEPTED:
            accepted = ACCEPTED[special]
            code, output = run_span(data, root, serving, span, accepted)
        after = served(serving)
        pushed = after != before and after is not None
        known = set(
            ALL_CLASSES
            if after is None
            else open(os.path.join(after, "assets.extra", "labels.txt")).read().split()
        )
        accuracy = None
        if after is not None:
            guessed = predictions(after, images)
            mask = [label in known for label in labels]
            accuracy = float(
                np.mean([g == t for g, t, m in zip(guessed, labels, mask, strict=True) if m])
            )
            if pushed and before is not None:
                old_known = set(
                    open(os.path.join(before, "assets.extra", "labels.txt")).read().split()
                )
                old = predictions(before, images)
                shared = [i for i, t in enumerate(labels) if t in old_known]
                new_right = sum(guessed[i] == labels[i] for i in shared)
                old_right = sum(old[i] == labels[i] for i in shared)
                worse_pushes += new_right < old_right
        rows.append(
            {
                "span": span,
                "special": special,
                "accepted": accepted,
                "exit_code": code,
                "pushed": pushed,
                "spans_trained": _line(output, "spans trained"),
                "blessing": _line(output, "blessing")[:300],
                "error": _line(output, "imgpipe: error:")[:300],
                "served_held_back_accuracy": accuracy,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
        print(rows[-1], flush=True)
    return {
        "spans": len(SCHEDULE),
        "pushed": sum(r["pushed"] for r in rows),
        "worse_pushes": worse_pushes,
        "rows": rows,
    }


def false_refusal_rate(runs: int = 4000, accuracy: float = 0.85) -> dict:
    """The rules on two equally good models (independent errors), on a 60-image new
    split and a 54-image reference set of two classes each."""
    from imgpipe.components.common.formats import reference_sets
    from imgpipe.components.evaluator import blessing, paired
    from imgpipe.components.evaluator import evaluation as ev
    from imgpipe.components.evaluator.config import EvaluatorConfig

    config = EvaluatorConfig(significance=0.0)
    champion = ev.Champion(ev.COMPARED, "", "/serving/1", 1)
    rng = random.Random(0)

    def draw(name: str, n: int) -> ev.Comparison:
        by_class, ours, theirs = [], [], []
        for label in ("a", "b"):
            outcomes = [(rng.random() < accuracy, rng.random() < accuracy) for _ in range(n // 2)]
            b = sum(x and not y for x, y in outcomes)
            c = sum(y and not x for x, y in outcomes)
            both = sum(x and y for x, y in outcomes)
            by_class.append(paired.ClassPaired(label, paired.Paired(n // 2, b, c)))
            ours.append(ev.ClassMetrics(label, n // 2, both + b, n // 2))
            theirs.append(ev.ClassMetrics(label, n // 2, both + c, n // 2))
        total = sum((c.paired for c in by_class), paired.Paired(0, 0, 0))
        return ev.Comparison(
            name,
            "",
            True,
            "",
            ("a", "b"),
            ev.ModelMetrics.of(tuple(ours)),
            ev.ModelMetrics.of(tuple(theirs)),
            total,
            tuple(by_class),
        )

    refused = 0
    for _ in range(runs):
        sets = [draw(reference_sets.NEW_SPLIT, 60), draw(reference_sets.CHAMPION_REFERENCE, 54)]
        tested = [blessing.with_tests(c, config) for c in sets]
        refused += not blessing.decide(sets[0].candidate, champion, config, tested).blessed
    return {"runs": runs, "accuracy": accuracy, "false_refusal_rate": refused / runs}


def run() -> dict:
    work = tempfile.mkdtemp(prefix="imgpipe-retraining-bench-")
    try:
        return {
            "schedule": run_schedule(work),
            "equal_models": [false_refusal_rate(accuracy=a) for a in (0.75, 0.85, 0.95)],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
