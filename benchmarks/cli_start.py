"""How long `imgpipe` takes to answer before any work: help, a version, a path error.

Each command runs as a user runs it (a new Python process, `python -m
imgpipe.pipelines.cli`), beside its baseline, a bare `python -c pass` and a Python that
imports TensorFlow (what every command paid before its arguments were checked). Best of
REPEATS wall times, each in seconds, with the ratio to the TensorFlow import.

And one command with work after TensorFlow's import, `imgpipe convert` of 10 generated
photos, ended as the command ends (cli.process_exit) and by Python's own exit (its
interpreter teardown), alternately.

  bin/in-env python -m benchmarks.cli_start
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

REPEATS = 5
COMMANDS = {
    "python -c pass (floor)": ["-c", "pass"],
    "python -c 'import tensorflow' (before)": ["-c", "import tensorflow"],
    "imgpipe --help": ["-m", "imgpipe.pipelines.cli", "--help"],
    "imgpipe version": ["-m", "imgpipe.pipelines.cli", "version"],
    "imgpipe convert <missing folder>": ["-m", "imgpipe.pipelines.cli", "convert", "nope", "out"],
    "imgpipe stats <missing folder>": ["-m", "imgpipe.pipelines.cli", "stats", "nope"],
}


def best_seconds(argv: list[str], cwd: str) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return min(times)


CONVERT_PHOTOS = 10
# The same command under Python's own exit: main() returned to sys.exit.
ORDINARY_EXIT = "import sys; from imgpipe.pipelines.cli import main; sys.exit(main(sys.argv[1:]))"


def convert_exits(cwd: str) -> dict:
    """`imgpipe convert` of a few photos ended both ways, alternately: best seconds."""
    from imgpipe.pipelines import sample_photos

    photos = os.path.join(cwd, "photos")
    sample_photos.make_dataset(photos, per_class=CONVERT_PHOTOS // 2, size=64, seed=1)
    ways = {
        "process_exit": ["-m", "imgpipe.pipelines.cli"],
        "python_exit": ["-c", ORDINARY_EXIT],
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    for repeat in range(REPEATS):
        for way, command in ways.items():
            out = os.path.join(cwd, f"out-{way}-{repeat}")
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, *command, "convert", photos, out, "--no-progress"],
                cwd=cwd,
                capture_output=True,
                check=True,
            )
            times[way].append(time.perf_counter() - start)
    best = {way: min(seconds) for way, seconds in times.items()}
    return {
        "photos": CONVERT_PHOTOS,
        "seconds": {way: round(seconds, 3) for way, seconds in best.items()},
        "process_exit_saves_s": round(best["python_exit"] - best["process_exit"], 3),
        "ratio": round(best["process_exit"] / best["python_exit"], 3),
    }


def run() -> dict:
    with tempfile.TemporaryDirectory() as cwd:
        seconds = {name: best_seconds(argv, cwd) for name, argv in COMMANDS.items()}
        convert = convert_exits(cwd)
    before = seconds["python -c 'import tensorflow' (before)"]
    return {
        **{
            name: {"seconds": round(s, 3), "of_tensorflow_import": round(s / before, 3)}
            for name, s in seconds.items()
        },
        "imgpipe convert <10 photos>, both exits": convert,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
