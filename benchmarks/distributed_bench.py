"""Training on one worker and on two (trainer.workers, docs/distributed-training.md):
steps per second and epoch time of each, in one run, on the bench photos' 256 px shards.

Three trainings of the same backbone, data and number of steps, each a Trainer run_fn in
its own process (as TFX runs it), read from the chief's epoch lines (Keras' `N/N - Xs -
Yms/step`):
- 1 worker at the global batch;
- 1 worker at half of it: what each of two workers computes per step;
- 2 workers at half each: the same global batch as the first.
The second against the third is what two workers add to a step beyond their own
compute: the all-reduce of the gradients and metrics, and, on one machine, the two
processes sharing its cores. The first epoch traces the functions and is left out; the
steady state is the mean of the others.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

RUN_FN = """
import json, sys
from absl import logging
logging.set_verbosity(logging.INFO)
from tfx.components.trainer.fn_args_utils import FnArgs
from imgpipe.components.trainer import task
task.run_fn(FnArgs(**json.loads(sys.argv[1])))
"""
# The two: a small CNN whose all-reduce is tiny, and the default backbone with
# weights (here from scratch: no hub), whose gradients are 37 times larger.
BACKBONES = ("tiny_cnn", "mobilenet_v3_small")
EPOCH_LINE = re.compile(r"^(\d+)/\1 - (\d+)s - (\d+(?:\.\d+)?)(ms|s)/step")
# Normalization constants near the photos' own: the statistics step is not what is timed.
MEAN, STD = (118.0, 112.0, 104.0), (66.0, 64.0, 66.0)


def run(
    shards: str,
    backbone: str = "tiny_cnn",
    image_size: int = 128,
    global_batch: int = 32,
    steps_per_epoch: int = 30,
    epochs: int = 3,
) -> dict:
    """Steps/s and epoch time of 1 and 2 workers on `shards` (an Examples folder)."""
    import tensorflow as tf

    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer.config import TrainerConfig

    config = TrainerConfig(backbone=backbone, image_size=image_size)
    model = model_lib.build_model(config, 10, _model_input(image_size))
    gradient_bytes = sum(int(tf.size(w)) * 4 for w in model.trainable_weights)
    results: dict = {
        "backbone": backbone,
        "image_size": image_size,
        "global_batch": global_batch,
        "steps": steps_per_epoch * epochs,
        "gradient_mb": round(gradient_bytes / 1e6, 2),
        "cores": os.cpu_count(),
    }
    for name, workers, batch in (
        ("1_worker", 1, global_batch),
        ("1_worker_half_batch", 1, global_batch // 2),
        ("2_workers", 2, global_batch // 2),
    ):
        results[name] = _train(
            shards, backbone, image_size, workers, batch, steps_per_epoch, epochs
        )
    one, half, two = (
        results[k]["steps_per_s"] for k in ("1_worker", "1_worker_half_batch", "2_workers")
    )
    results["2_workers_over_1"] = round(two / one, 2)
    # Of a two-worker step, the time beyond one worker's own half-batch compute.
    results["2_worker_step_overhead_share"] = round(1 - two / half, 2)
    return results


def _model_input(image_size: int):
    from imgpipe.components.common.images.model_input import ModelInput

    return ModelInput(MEAN, STD, image_size)


def _train(
    shards: str,
    backbone: str,
    image_size: int,
    workers: int,
    batch: int,
    steps_per_epoch: int,
    epochs: int,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="imgpipe-bench-distributed-") as out:
        args = {
            "train_files": [os.path.join(shards, "Split-train", "*")],
            "eval_files": [os.path.join(shards, "Split-eval", "*")],
            "train_steps": steps_per_epoch * epochs,
            "eval_steps": None,
            "serving_model_dir": os.path.join(out, "model", "Format-Serving"),
            "model_run_dir": os.path.join(out, "Trainer", "model_run", "1"),
            "custom_config": {
                "backbone": backbone,
                "image_size": image_size,
                "batch_size": batch,
                "epochs": epochs,
                "workers": workers,
                "tensorboard_images": 0,
                "early_stopping_patience": 0,
                "mean": list(MEAN),
                "std": list(STD),
            },
        }
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", RUN_FN, json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=3600,
        )
        wall = time.monotonic() - started
    if done.returncode:
        raise RuntimeError(f"{workers} worker(s) failed: {done.stderr[-3000:]}")
    epochs_seen = []
    for line in (done.stdout + done.stderr).splitlines():
        match = EPOCH_LINE.match(line.strip())
        if match:
            per_step = float(match.group(3)) / (1000 if match.group(4) == "ms" else 1)
            epochs_seen.append((int(match.group(2)), per_step))
    if len(epochs_seen) != epochs:
        raise RuntimeError(f"{workers} worker(s): {len(epochs_seen)} epoch lines, not {epochs}")
    steady = epochs_seen[1:]
    seconds_per_step = sum(s for _, s in steady) / len(steady)
    return {
        "workers": workers,
        "batch_per_replica": batch,
        "steps_per_s": round(1 / seconds_per_step, 2),
        "images_per_s": round(batch * workers / seconds_per_step, 1),
        "epoch_s": round(seconds_per_step * steps_per_epoch, 2),
        "first_epoch_s": epochs_seen[0][0],
        "wall_s": round(wall, 1),
    }
