"""How long `imgpipe` takes to answer before any work: help, a version, a path error.

Each command runs as a user runs it (a new Python process, `python -m
imgpipe.pipelines.cli`), beside its baseline, a bare `python -c pass` and a Python that
imports TensorFlow (what every command paid before its arguments were checked). Best of
REPEATS wall times, each in seconds, with the ratio to the TensorFlow import.

  bin/in-env python -m benchmarks.cli_start
"""

from __future__ import annotations

import json
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


def run() -> dict:
    with tempfile.TemporaryDirectory() as cwd:
        seconds = {name: best_seconds(argv, cwd) for name, argv in COMMANDS.items()}
    before = seconds["python -c 'import tensorflow' (before)"]
    return {
        name: {"seconds": round(s, 3), "of_tensorflow_import": round(s / before, 3)}
        for name, s in seconds.items()
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
