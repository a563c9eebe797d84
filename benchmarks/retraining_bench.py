"""A retraining schedule run as an operator runs it, from the CLI, one span at a time.

`make bench BENCH_ARGS="--only retraining"`. Seven spans land one at a time in one data
folder, and `imgpipe run local --data root/span-{SPAN}` runs after each, against one
serving folder. The images are hard on purpose: each class is a hue, and the hues of
neighbouring classes overlap (a spread of 30 degrees around centres 90 degrees apart),
so even a perfect model is right about 87% of the time and two good models disagree on
some images, as on real data:

  1-2  three classes            3  a fourth class added    4  40% of labels moved
  5    four classes             6  every image grey         7  four classes

The operator accepts a stop only where the change is intended (the class added, the
camera turned grey), with the flag the stop message names, as often as a message names
one; the mislabelled span is left stopped. After each span: whether it pushed, the spans
it trained on, and the served model's accuracy on held-back images (no span holds them)
of the classes it knows. A push is *worse* when the new model is significantly worse than
the one it replaced on the held-back images of the classes both know (McNemar's exact
test at 0.05); pushes that are lower at all are counted too. Measured besides: the paired
rules' false-refusal rate on two models of equal quality (simulated: independent errors,
the sets' sizes; benchmarks/equal_models.py measures it at more sizes and agreements).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

# Class -> hue centre in degrees.
HUES = {"red": 0, "lime": 90, "cyan": 180, "violet": 270}
HUE_SPREAD = 30.0
ALL_CLASSES = tuple(HUES)
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
HELD_BACK_PER_CLASS = 100
SIZE = 40
# The changes the operator means to make, and so accepts.
INTENDED = ("class added", "grey")
ACCEPT_FLAG = re.compile(r"(--accept-(?:drift|label-issues)) (\d+)")


def hue_image(label: str, rng: np.random.Generator) -> np.ndarray:
    """A textured image of the class's hue, drawn around its centre (BGR)."""
    import cv2

    hue = (HUES[label] + rng.normal(0.0, HUE_SPREAD)) % 360.0
    hsv = np.empty((SIZE, SIZE, 3), np.float32)
    hsv[..., 0] = hue / 2.0  # OpenCV's hue is 0..180
    hsv[..., 1] = rng.uniform(140, 255)
    hsv[..., 2] = np.clip(rng.uniform(120, 230) + rng.normal(0, 20, (SIZE, SIZE)), 0, 255)
    return cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2BGR)


def write_images(folder: str, classes, per_class: int, seed: int, grey: bool = False) -> None:
    import cv2

    rng = np.random.default_rng(seed)
    for label in classes:
        os.makedirs(os.path.join(folder, label), exist_ok=True)
        for i in range(per_class):
            image = hue_image(label, rng)
            if grey:
                image = cv2.cvtColor(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
            cv2.imwrite(os.path.join(folder, label, f"{seed}-{i:04d}.jpg"), image)


def write_span(root: str, span: int, classes: tuple[str, ...], special: str) -> str:
    folder = os.path.join(root, f"span-{span}")
    staging = folder + ".tmp"
    write_images(staging, classes, PER_CLASS, seed=span, grey=special == "grey")
    if special == "mislabelled":
        rng = np.random.default_rng(span)
        for label in classes:
            for name in sorted(os.listdir(os.path.join(staging, label))):
                if rng.random() < 0.4:
                    others = [c for c in classes if c != label]
                    other = others[int(rng.integers(len(others)))]
                    shutil.move(
                        os.path.join(staging, label, name),
                        os.path.join(staging, other, f"moved-{label}-{name}"),
                    )
    os.rename(staging, folder)  # a span lands whole
    return folder


def held_back(root: str) -> tuple[list[bytes], list[str]]:
    folder = os.path.join(root, "held-back")
    write_images(folder, ALL_CLASSES, HELD_BACK_PER_CLASS, seed=999)
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


def run_span(data: str, root: str, serving: str, accepted: list[str]) -> tuple[int, str]:
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
        "trainer.image_size=32",
        *accepted,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + "\n" + done.stderr


def _line(output: str, key: str) -> str:
    for line in output.splitlines():
        if line.startswith(key):
            return line[len(key) :].strip()
    return ""


def _labels(model_dir: str) -> set[str]:
    with open(os.path.join(model_dir, "assets.extra", "labels.txt")) as f:
        return set(f.read().split())


def run_schedule(work: str) -> dict:
    from imgpipe.components.evaluator import paired

    data, root, serving = (os.path.join(work, name) for name in ("data", "root", "serving"))
    images, labels = held_back(work)
    rows, worse, lower = [], 0, 0
    for span, classes, special in SCHEDULE:
        write_span(data, span, classes, special)
        before = served(serving)
        started = time.monotonic()
        accepted: list[str] = []
        code, output = run_span(data, root, serving, accepted)
        while code == 1 and special in INTENDED and len(accepted) < 4:
            named = ACCEPT_FLAG.search(_line(output, "imgpipe: error:"))
            if named is None or named.group(1) in accepted:
                break
            accepted += [named.group(1), named.group(2)]
            code, output = run_span(data, root, serving, accepted)
        after = served(serving)
        pushed = after is not None and after != before
        accuracy = None
        if after is not None:
            guessed = predictions(after, images)
            known = _labels(after)
            right = [g == t for g, t in zip(guessed, labels, strict=True) if t in known]
            accuracy = float(np.mean(right))
            if pushed and before is not None:
                shared = [i for i, t in enumerate(labels) if t in _labels(before)]
                old = predictions(before, images)
                new_right = np.array([guessed[i] == labels[i] for i in shared])
                old_right = np.array([old[i] == labels[i] for i in shared])
                compared = paired.Paired(
                    len(shared),
                    int(np.sum(new_right & ~old_right)),
                    int(np.sum(old_right & ~new_right)),
                )
                lower += compared.champion_only > compared.candidate_only
                worse += compared.champion_only > compared.candidate_only and (
                    compared.p_worse <= 0.05
                )
        rows.append(
            {
                "span": span,
                "special": special,
                "accepted": " ".join(accepted),
                "exit_code": code,
                "pushed": pushed,
                "spans_trained": _line(output, "spans trained"),
                "blessing": _line(output, "blessing")[:400],
                "error": _line(output, "imgpipe: error:")[:400]
                or _line(output, "imgpipe: internal error:")[:2000],
                "served_held_back_accuracy": accuracy,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
        print(rows[-1], flush=True)
    return {
        "spans": len(SCHEDULE),
        "pushed": sum(r["pushed"] for r in rows),
        "worse_pushes": worse,
        "lower_pushes": lower,
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
        tested, _ = blessing.tested(sets, (), config)
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
