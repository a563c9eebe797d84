"""A year in an hour: 52 small spans through `imgpipe run local`, as an operator runs them.

`make bench BENCH_ARGS="--only year"`, or on its own:
`python -m benchmarks.year_bench --spans 52 --per-class 15 --workdir DIR --out FILE.json
--html FILE`. The spans (benchmarks/year_schedule.py) are colour classes with noise:
three at first, a class added at spans 10 and 30, a grey span at 15, 40% of labels moved
at 20, a new camera from 25 (another image size and a colour cast), three times the data
at 35-40, and a missed day at 45 (spans 45 and 46 land together; the run after 46 runs
both in turn); and two faults: span 12's run is killed (SIGKILL to its process group)
once its Trainer starts, then run again, as the scheduler's next firing would, and span
13's push is rolled back by the person on call (`imgpipe rollback`), so span 14's
candidate meets the model served before it. Shorter runs take the events in that order
from span 2 on.

After each span lands, `imgpipe run local --data DATA/span-{SPAN}` runs; where a gate
stops it for an intended change, the operator reruns with the flag the stop names (as
benchmarks/retraining_bench.py does); the mislabelled span is left stopped. Then:
the decisions (`imgpipe history --json`), the served model's accuracy (the version
models.config names) on held-back images of the current camera and the day's classes,
an oracle's accuracy on the same images (the project's model builder, the same trainer
settings, trained in-process on every clean image landed so far), McNemar's test of each
push against the model it replaced and against the best model served so far (the
record), the bytes of the pipeline root (without MLMD), the serving folder and MLMD, and
the run's wall time. year_schedule.judge holds them to the targets.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import year_schedule as ys
from benchmarks.retraining_bench import ACCEPT_FLAG, _line, predictions

HELD_BACK_PER_CLASS = 40
EPOCHS = 6
IMAGE_SIZE = 32
BATCH_SIZE = 16  # a span of 3 classes x 10 images must fill a batch
# Short training: a year of runs in hours on 2 cores; the oracle trains the same way.
MIN_TRAIN_STEPS = 120
SIGNIFICANCE = 0.05
PIPELINE_SETTINGS = (
    f"trainer.epochs={EPOCHS}",
    f"trainer.image_size={IMAGE_SIZE}",
    f"trainer.batch_size={BATCH_SIZE}",
    f"trainer.min_train_steps={MIN_TRAIN_STEPS}",
)


def colour_image(label: str, index: int, size: int, new_camera: bool) -> np.ndarray:
    """A noisy RGB image of the class's colour, from the old or the new camera."""
    rng = np.random.default_rng([index, list(ys.COLOURS).index(label), int(new_camera)])
    height, width = (int(v) for v in rng.integers(size * 3 // 4, size * 5 // 4, 2))
    tint = np.array(ys.COLOURS[label]) + rng.uniform(-40, 40, 3)
    if new_camera:
        tint = tint + np.array(ys.NEW_CAST)
    pixels = tint + rng.normal(0, 25, (height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def write_span(data: str, span: ys.Span) -> str:
    """Writes data/span-N/<label>/*.jpg, whole at once (a staging folder renamed)."""
    from tests.imagegen import jpeg_bytes, write
    from tests.retraining_data import grey

    folder = os.path.join(data, f"span-{span.span}")
    staging = folder + ".tmp"
    rng = np.random.default_rng(span.span)
    for label in span.classes:
        for i in range(span.per_class):
            pixels = colour_image(label, span.span * 10_000 + i, span.size, span.new_camera)
            if span.grey:
                pixels = grey(pixels)
            filed = label
            if span.mislabelled and rng.random() < ys.MISLABELLED_FRACTION:
                others = [c for c in span.classes if c != label]
                filed = others[int(rng.integers(len(others)))]
            write(os.path.join(staging, filed, f"{label}-{i:04d}.jpg"), jpeg_bytes(pixels))
    os.rename(staging, folder)
    return folder


def held_back(new_camera: bool) -> tuple[list[bytes], list[str]]:
    """Images no span holds, of every class, from one camera."""
    from tests.imagegen import jpeg_bytes

    size = ys.NEW_SIZE if new_camera else ys.OLD_SIZE
    images, labels = [], []
    for label in ys.COLOURS:
        for i in range(HELD_BACK_PER_CLASS):
            images.append(jpeg_bytes(colour_image(label, 900_000 + i, size, new_camera)))
            labels.append(label)
    return images, labels


# The imgpipe command, in a process of its own, as an operator's scheduler runs it.
IMGPIPE = (sys.executable, "-m", "imgpipe.pipelines.cli")


def cli(*args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [*IMGPIPE, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def run_command(work: str, accepted: list[str]) -> list[str]:
    settings = [arg for setting in PIPELINE_SETTINGS for arg in ("--set", setting)]
    return [
        *IMGPIPE,
        "run",
        "local",
        "--data",
        os.path.join(work, "data", "span-{SPAN}"),
        "--pipeline-root",
        os.path.join(work, "root"),
        "--serving-dir",
        os.path.join(work, "serving"),
        *settings,
        *accepted,
    ]


def run_span(work: str, accepted: list[str]) -> tuple[int, str]:
    done = subprocess.run(run_command(work, accepted), capture_output=True, text=True)
    return done.returncode, done.stdout + "\n" + done.stderr


TRAINER_STARTED = "step  Trainer"


def killed_in_training(work: str) -> str:
    """Runs the span and kills the run's whole process group with SIGKILL as soon as its
    Trainer starts (a node lost mid-training). Returns what happened, in a few words."""
    started = time.monotonic()
    process = subprocess.Popen(
        run_command(work, []),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(TRAINER_STARTED) and line.rstrip().endswith("started"):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return f"killed in its Trainer after {time.monotonic() - started:.0f} s"
    return f"not killed: the run ended (exit {process.wait()}) before its Trainer started"


def operate(work: str, span: ys.Span) -> tuple[int, str, list[str], float, str]:
    """Runs the span as the operator does: reruns with the flag a stop names, only for an
    intended change, once per flag; for the schedule's faults, the run killed first, or
    the push rolled back after. Returns the exit code, output, flags, seconds and the
    fault's outcome ("" for none)."""
    started = time.monotonic()
    fault = killed_in_training(work) if span.event == ys.KILLED else ""
    accepted: list[str] = []
    code, output = run_span(work, accepted)
    while code == 1 and span.intended and len(accepted) < 4:
        named = ACCEPT_FLAG.search(_line(output, "imgpipe: error:"))
        if named is None or named.group(1) in accepted:
            break
        accepted += [named.group(1), named.group(2)]
        code, output = run_span(work, accepted)
    if span.event == ys.ROLLBACK:
        rolled, out, err = cli("rollback", "--serving-dir", os.path.join(work, "serving"))
        said = (out.strip() or err.strip() or "nothing said").splitlines()[-1]
        fault = f"rollback (exit {rolled}): {said[:200]}"
    return code, output, accepted, time.monotonic() - started, fault


def history(serving: str) -> list[dict]:
    if not os.path.isdir(serving):
        return []
    code, out, err = cli("history", "--serving-dir", serving, "--json")
    if code != 0:
        raise RuntimeError(f"imgpipe history failed ({code}): {err.strip()[-2000:]}")
    return list(json.loads(out)["decisions"])


def served_path(serving: str) -> tuple[int | None, str | None]:
    """The version models.config names and its folder; the newest sound push without it."""
    from imgpipe.components.common.formats import model_config, served_models

    version = model_config.served_version(serving) if os.path.isdir(serving) else None
    if version is not None:
        return version, os.path.join(serving, str(version))
    model = served_models.latest(serving)
    return (model.version, model.path) if model else (None, None)


def folder_bytes(folder: str, skip_mlmd: bool = False) -> int:
    """What `du --apparent-size` counts: the files, and the folders themselves (an empty
    folder holds a block of its own, 4 KB on ext4: a run leaving one is a leak too)."""
    total = 0
    for parent, _, files in os.walk(folder):
        total += os.path.getsize(parent)
        for name in files:
            if skip_mlmd and name.startswith("metadata.sqlite"):
                continue
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


def mlmd_bytes(root: str) -> int:
    return sum(
        os.path.getsize(os.path.join(parent, name))
        for parent, _, files in os.walk(root)
        for name in files
        if name.startswith("metadata.sqlite")
    )


class Oracle:
    """Trains, at each span, on every clean image landed so far, as the Trainer would
    (its model builder and schedule, the bench's settings), and predicts held-back images."""

    def __init__(self, data: str) -> None:
        self.data = data
        self.decoded: dict[int, tuple[np.ndarray, list[str]]] = {}

    def _span(self, span: int) -> tuple[np.ndarray, list[str]]:
        if span not in self.decoded:
            folder = os.path.join(self.data, f"span-{span}")
            pixels, labels = [], []
            for label in sorted(os.listdir(folder)):
                for name in sorted(os.listdir(os.path.join(folder, label))):
                    with open(os.path.join(folder, label, name), "rb") as f:
                        pixels.append(decode(f.read()))
                    labels.append(label)
            self.decoded[span] = (np.stack(pixels), labels)
        return self.decoded[span]

    def accuracy(self, spans: list[ys.Span], images: list[bytes], labels: list[str]) -> float:
        from imgpipe.components.common.images.model_input import ModelInput
        from imgpipe.components.trainer import model as model_lib
        from imgpipe.components.trainer.config import TrainerConfig

        parts = [self._span(s.span) for s in spans if s.clean]
        pixels = np.concatenate([p for p, _ in parts])
        names = [n for _, ns in parts for n in ns]
        classes = sorted(set(names))
        y = np.array([classes.index(n) for n in names])
        config = TrainerConfig(
            image_size=IMAGE_SIZE,
            epochs=EPOCHS,
            batch_size=BATCH_SIZE,
            min_train_steps=MIN_TRAIN_STEPS,
        )
        config = dataclasses.replace(config, backbone=config.resolved_backbone)
        mean = tuple(float(v) for v in pixels.reshape(-1, 3).mean(axis=0))
        std = tuple(float(v) + 1e-3 for v in pixels.reshape(-1, 3).std(axis=0))
        model = model_lib.build_model(
            config, len(classes), ModelInput(mean, std, IMAGE_SIZE), load_weights=False
        )
        per_epoch = math.ceil(len(y) / config.batch_size)
        epochs = max(config.epochs, math.ceil(config.min_train_steps / per_epoch))
        model_lib.compile_model(model, config, total_steps=epochs * per_epoch)
        model.fit(pixels, y, batch_size=config.batch_size, epochs=epochs, verbose=0, shuffle=True)
        test = np.stack([decode(b) for b in images])
        guessed = np.argmax(model.predict(test, batch_size=64, verbose=0), axis=-1)
        return float(np.mean([classes[g] == t for g, t in zip(guessed, labels, strict=True)]))


def decode(encoded: bytes) -> np.ndarray:
    import cv2

    bgr = cv2.imdecode(np.frombuffer(encoded, np.uint8), cv2.IMREAD_COLOR)
    small = cv2.resize(bgr, (IMAGE_SIZE, IMAGE_SIZE), interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(small, cv2.COLOR_BGR2RGB)


def mcnemar_worse(new: list[str], old: list[str], labels: list[str], shared: list[int]) -> bool:
    """The new model significantly worse than the old on the shared images (exact, 0.05)."""
    from imgpipe.components.evaluator import paired

    new_right = np.array([new[i] == labels[i] for i in shared], bool)
    old_right = np.array([old[i] == labels[i] for i in shared], bool)
    compared = paired.Paired(
        len(shared), int(np.sum(new_right & ~old_right)), int(np.sum(old_right & ~new_right))
    )
    return compared.champion_only > compared.candidate_only and compared.p_worse <= SIGNIFICANCE


def _labels(model_dir: str) -> set[str]:
    with open(os.path.join(model_dir, "assets.extra", "labels.txt")) as f:
        return set(f.read().split())


class Year:
    """The state the bench carries from span to span."""

    def __init__(self, work: str) -> None:
        self.work = work
        self.serving = os.path.join(work, "serving")
        self.root = os.path.join(work, "root")
        self.oracle = Oracle(os.path.join(work, "data"))
        self.sets = {camera: held_back(camera) for camera in (False, True)}
        self.cache: dict[tuple[str, bool], list[str]] = {}
        self.served_before: list[str] = []  # every model served so far, in order
        self.decisions_seen = 0

    def resume(self, rows: list[dict]) -> None:
        """The state after `rows`: the models served in turn (the bench's copies) and
        the decisions already counted."""
        for row in rows:
            version = row["served_version"]
            if version is not None:
                kept = self.kept_path(str(version))
                if not self.served_before or self.served_before[-1] != kept:
                    self.served_before.append(kept)
        self.decisions_seen = sum(len(row["decisions"]) for row in rows)

    def kept_path(self, version: str) -> str:
        return os.path.join(self.work, "bench-served", version)

    def keep(self, model_dir: str) -> str:
        """A copy of a served version outside the serving folder (not counted in its bytes)."""
        kept = self.kept_path(os.path.basename(model_dir))
        if not os.path.isdir(kept):
            shutil.copytree(model_dir, kept)
        return kept

    def guesses(self, model_dir: str, camera: bool) -> list[str]:
        if (model_dir, camera) not in self.cache:
            self.cache[(model_dir, camera)] = predictions(model_dir, self.sets[camera][0])
        return self.cache[(model_dir, camera)]

    def accuracy(self, model_dir: str, camera: bool, index: list[int]) -> float:
        guessed, labels = self.guesses(model_dir, camera), self.sets[camera][1]
        return float(np.mean([guessed[i] == labels[i] for i in index]))

    def measure(self, span: ys.Span, landed: list[ys.Span], ran: tuple | None) -> dict:
        camera = span.new_camera
        images, labels = self.sets[camera]
        index = [i for i, t in enumerate(labels) if t in span.classes]
        version, path = served_path(self.serving)
        if path:
            # The bench's own copy: retention deletes served versions a rollback no longer
            # needs, and the record and the replaced model are re-scored on later sets.
            path = self.keep(path)
        decisions = history(self.serving)
        new, self.decisions_seen = decisions[self.decisions_seen :], len(decisions)
        row: dict = {
            "span": span.span,
            "event": span.event,
            "classes": len(span.classes),
            "images": span.per_class * len(span.classes),
            "decisions": [
                {k: d.get(k) for k in ("span", "kind", "model_version", "served_version")}
                | {"reason": str(d.get("reason", ""))[:300]}
                for d in new
            ],
            "served_version": version,
            "served_accuracy": self.accuracy(path, camera, index) if path else None,
            "oracle_accuracy": self.oracle.accuracy(
                landed, [images[i] for i in index], [labels[i] for i in index]
            ),
            "worse_than_replaced": 0,
            "worse_than_record": 0,
        }
        if path and (not self.served_before or self.served_before[-1] != path):
            known = _labels(path)
            # A rollback serves an earlier model again: not a push to hold to the rules.
            if self.served_before and span.event != ys.ROLLBACK:
                row |= self.compare(path, camera, index, known)
            self.served_before.append(path)
        if ran is not None:
            code, output, accepted, seconds, fault = ran
            row |= {
                "exit_code": code,
                "fault": fault,
                "accepted": " ".join(accepted),
                "error": _line(output, "imgpipe: error:")[:400]
                or _line(output, "imgpipe: internal error:")[:2000],
                "seconds": round(seconds, 1),
            }
        else:
            row |= {"exit_code": None, "fault": "", "accepted": "", "error": "", "seconds": None}
        row |= {
            "root_bytes": folder_bytes(self.root, skip_mlmd=True),
            "serving_bytes": folder_bytes(self.serving),
            "mlmd_bytes": mlmd_bytes(self.work),
            # What the schedule itself grows (classes, the new camera, more data).
            "span_data_bytes": folder_bytes(os.path.join(self.work, "data", f"span-{span.span}")),
        }
        row["disk_bytes"] = row["root_bytes"] + row["serving_bytes"] + row["mlmd_bytes"]
        return row

    def compare(self, path: str, camera: bool, index: list[int], known: set[str]) -> dict:
        """The new served model against the one it replaced and the record (the best
        served so far on these images), each on the images of classes both know."""
        labels = self.sets[camera][1]
        new = self.guesses(path, camera)

        def shared(other: str) -> list[int]:
            both = known & _labels(other)
            return [i for i in index if labels[i] in both]

        replaced = self.served_before[-1]
        record = max(self.served_before, key=lambda p: self.accuracy(p, camera, index))
        return {
            "worse_than_replaced": int(
                mcnemar_worse(new, self.guesses(replaced, camera), labels, shared(replaced))
            ),
            "worse_than_record": int(
                mcnemar_worse(new, self.guesses(record, camera), labels, shared(record))
            ),
            "record_version": os.path.basename(record),
        }


ROWS_FILE = "rows.jsonl"


def rows_so_far(work: str) -> list[dict]:
    """The rows of a year cut short (a restart, a kill), as run_year kept them."""
    path = os.path.join(work, ROWS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_year(work: str, spans: int, per_class: int) -> dict:
    """Runs the schedule's spans in `work`, continuing after the last span whose row
    rows.jsonl holds: the spans before it landed already, and the run cut short in the
    span after it (its data maybe written, its run maybe killed) is run again, as an
    operator's rerun would."""
    year = Year(work)
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    rows = rows_so_far(work)
    year.resume(rows)
    measured = {row["span"] for row in rows}
    landed: list[ys.Span] = []
    for span in ys.schedule(spans, per_class):
        landed.append(span)
        if span.span in measured:
            continue
        if not os.path.isdir(os.path.join(data, f"span-{span.span}")):
            write_span(data, span)
        ran = operate(work, span) if span.runs else None
        rows.append(year.measure(span, landed, ran))
        # One line a span, kept as it comes: a year cut short still has its figures.
        with open(os.path.join(work, ROWS_FILE), "a") as f:
            f.write(json.dumps(rows[-1]) + "\n")
        print(table_line(rows[-1]), flush=True)
        for note in (rows[-1]["fault"], rows[-1]["error"][:300]):
            if note:
                print(f"     {note}", flush=True)
    return {
        "spans": spans,
        "per_class": per_class,
        "settings": list(PIPELINE_SETTINGS),
        "rows": rows,
        "targets": ys.judge(rows),
        "longest_without_push": ys.longest_without_push(rows),
    }


HEADER = (
    f"{'span':>4} {'event':<12} {'decisions':<28} {'served':>6} {'oracle':>6} "
    f"{'w/repl':>6} {'w/rec':>5} {'root MB':>7} {'serv MB':>7} {'mlmd MB':>7} {'secs':>6}"
)


def table_line(row: dict) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}"

    decisions = (
        ",".join(
            d["kind"] if d["span"] is None else f"{d['kind']}:{d['span']}" for d in row["decisions"]
        )
        or "-"
    )
    seconds = "-" if row["seconds"] is None else f"{row['seconds']:.0f}"
    return (
        f"{row['span']:>4} {row['event']:<12} {decisions[:28]:<28} "
        f"{pct(row['served_accuracy']):>6} {pct(row['oracle_accuracy']):>6} "
        f"{row['worse_than_replaced']:>6} {row['worse_than_record']:>5} "
        f"{row['root_bytes'] / 1e6:>7.1f} {row['serving_bytes'] / 1e6:>7.1f} "
        f"{row['mlmd_bytes'] / 1e6:>7.2f} {seconds:>6} {row['exit_code']} {row['accepted']}"
    )


MARKS = {"pushed": "#2a7", "refused": "#e90", "stopped": "#d33", "rollback": "#64c"}


def svg(rows: list[dict]) -> str:
    """Served and oracle accuracy per span, each decision a coloured dot at its span."""
    width, height, pad = 760, 320, 40
    last = max((r["span"] for r in rows), default=1)

    def x(span: float) -> float:
        return pad + (width - 2 * pad) * (span - 1) / max(last - 1, 1)

    def y(accuracy: float) -> float:
        return height - pad - (height - 2 * pad) * accuracy

    def line(key: str, colour: str) -> str:
        points = " ".join(f"{x(r['span']):.1f},{y(r[key]):.1f}" for r in rows if r[key] is not None)
        return f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line x1="{pad}" x2="{width - pad}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            f'stroke="#ddd"/><text x="4" y="{y(tick) + 4:.1f}" font-size="10">'
            f"{int(tick * 100)}%</text>"
        )
    parts += [line("oracle_accuracy", "#999"), line("served_accuracy", "#15c")]
    for r in rows:
        at = r["served_accuracy"] if r["served_accuracy"] is not None else 0.0
        for k, d in enumerate(r["decisions"]):
            colour = MARKS.get(d["kind"], "#000")
            title = html.escape(f"span {r['span']} ({r['event']}): {d['kind']} {d['reason']}")
            parts.append(
                f'<circle cx="{x(r["span"]):.1f}" cy="{y(at) + 8 * k:.1f}" r="4" '
                f'fill="{colour}"><title>{title}</title></circle>'
            )
        if r["event"] != ys.NORMAL:
            parts.append(
                f'<text x="{x(r["span"]):.1f}" y="{height - 8}" font-size="9" '
                f'text-anchor="middle">{html.escape(r["event"])}</text>'
            )
    legend = [("served", "#15c"), ("oracle", "#999"), *MARKS.items()]
    for k, (name, colour) in enumerate(legend):
        parts.append(
            f'<rect x="{pad + 90 * k}" y="8" width="10" height="10" fill="{colour}"/>'
            f'<text x="{pad + 90 * k + 14}" y="17" font-size="11">{name}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def page(result: dict) -> str:
    targets = html.escape(json.dumps(result["targets"], indent=2))
    stall = html.escape(json.dumps(ys.longest_without_push(result["rows"])))
    return (
        "<!doctype html><meta charset='utf-8'><title>A year in an hour</title>"
        f"<h1>A year in an hour: {result['spans']} spans</h1>{svg(result['rows'])}"
        f"<h2>Targets</h2><pre>{targets}</pre>"
        f"<h2>The longest run of spans without a push</h2><pre>{stall}</pre>"
    )


def run(
    spans: int = 52, per_class: int = 15, workdir: str | None = None, resume: bool = False
) -> dict:
    """The bench for benchmarks/run.py: a temporary workdir unless one is given; a given
    one is emptied first unless `resume`."""
    work = workdir or tempfile.mkdtemp(prefix="imgpipe-year-bench-")
    if workdir and os.path.exists(workdir) and not resume:
        shutil.rmtree(workdir)
    print(HEADER, flush=True)
    try:
        return run_year(work, spans, per_class)
    finally:
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=52)
    parser.add_argument("--per-class", type=int, default=15)
    parser.add_argument(
        "--workdir", help="kept after the run (emptied first unless --resume); default a temp"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the year in --workdir after the last span its rows.jsonl holds",
    )
    parser.add_argument("--out", help="the JSON result")
    parser.add_argument("--html", help="a page with the SVG plot of served vs oracle accuracy")
    args = parser.parse_args()
    if args.resume and not args.workdir:
        parser.error("--resume continues a --workdir")
    result = run(args.spans, args.per_class, args.workdir, args.resume)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    if args.html:
        with open(args.html, "w") as f:
            f.write(page(result))
    print(json.dumps(result["targets"], indent=2))
    print("longest run of spans without a push:", json.dumps(result["longest_without_push"]))


if __name__ == "__main__":
    main()
