"""The pipeline in containers against the pipeline in one process, on the same photos.

Runs, one after the other and each as the command users type (a fresh process):
  imgpipe run local --data D --config C     LocalDagRunner, every step in one process
  imgpipe kfp compile --config C -o P.yaml  (timed apart)
  imgpipe kfp run-local --config C --package P.yaml --network none
                                            kfp.local's DockerRunner, a container a step
and prints the wall times and their ratio as one JSON object.

  bin/in-env python -m benchmarks.container_bench [--image REF] [--per-class N | --data DIR]

The image defaults to IMGPIPE_TEST_IMAGE, else the one `make image` tags
(pipelines/images.py), as in the container tier.
With `--training tiny` (the default) the settings are the container tier's
(tests/test_kubeflow_docker.py): tiny training, so the figure is mostly the cost of a
process and an image start per step. `--training default` leaves the Trainer at the
settings a user gets who sets none (on these photos: tiny_cnn at 128 px, 5 epochs, at
least 300 steps). `--training production` is the README's production Trainer
(`weights`, 5 epochs: MobileNetV3Small at 224 px, fine-tuned), its notop weights a file
of the backbone's own initial values written here, as no hub is reachable: the same
work as ImageNet's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import images, sample_photos
from imgpipe.pipelines.cli.errors import NOT_PUSHED_EXIT_CODE

IMAGE_ENV = "IMGPIPE_TEST_IMAGE"  # the container tier's (tests/containers.py)
CLASSES = ("animal", "chessboard")
TINY_TRAINING = {
    "image_size": 32,
    "batch_size": 8,
    "epochs": 2,
    "min_train_steps": 40,
    "tensorboard_images": 0,
}
PRODUCTION = "production"
TRAINING = {"tiny": TINY_TRAINING, "default": {}, PRODUCTION: {"epochs": 5}}
SETTINGS = {
    "pipeline_name": "container-bench",
    "example_gen": {"output": {"num_shards": 1, "splits": [["train", 0.75], ["eval", 0.25]]}},
    "evaluator": {"accuracy_threshold": 0.6, "significance": 0.1},
}


# kfp.local's log lines around each task: "HH:MM:SS.mmm - INFO - Executing task 'X'" and
# "... Task 'X' finished with status ...", with colour codes.
TASK_LINE = re.compile(
    r"^(\d\d):(\d\d):(\d\d\.\d+) - \w+ - (?:Executing task '([^']+)'|Task '([^']+)' finished)"
)
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def task_seconds(log: str) -> dict[str, float]:
    """Each task's wall time, from kfp.local's log: its start to its end line."""
    started: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for line in COLOUR.sub("", log).splitlines():
        found = TASK_LINE.match(line)
        if found is None:
            continue
        hours, minutes, secs, begun, ended = found.groups()
        at = int(hours) * 3600 + int(minutes) * 60 + float(secs)
        if begun:
            started[begun] = at
        elif ended in started:
            seconds[ended] = round((at - started[ended]) % 86400, 1)
    return seconds


def local_step_seconds(metadata_path: str, pipeline_name: str) -> dict[str, float]:
    """Each step's wall time in a local run, from its latest execution in TFX's MLMD:
    registered (inputs resolved) to last updated (outputs published)."""
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path
    connection.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    store = metadata_store.MetadataStore(connection)
    prefix = f"{pipeline_name}."
    seconds = {}
    for context in store.get_contexts_by_type("node"):
        executions = store.get_executions_by_context(context.id)
        if context.name.startswith(prefix) and executions:
            latest = max(executions, key=lambda e: e.id)
            elapsed = latest.last_update_time_since_epoch - latest.create_time_since_epoch
            seconds[context.name.removeprefix(prefix)] = round(elapsed / 1000, 1)
    return seconds


def _timed(args: list[str]) -> tuple[float, str]:
    """The command's wall time and its output. A run whose model was not pushed (a tiny
    model on the bench's nine classes) is a whole run too."""
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "imgpipe.pipelines.cli", *args],
        check=False,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - start
    if result.returncode not in (0, NOT_PUSHED_EXIT_CODE):
        sys.exit(f"imgpipe {' '.join(args[:2])} failed:\n{result.stderr[-3000:]}")
    return seconds, result.stdout + result.stderr


# On a given photo folder (--data), the lowest accuracy gate: the runs are timed.
ANY_MODEL_PASSES = {"accuracy_threshold": 0.0, "significance": 0.1}


def _config(folder: str, data: str, image: str, trainer: dict, evaluator: dict | None) -> str:
    os.makedirs(folder)
    os.chmod(folder, 0o777)  # the steps' user writes the root (a claim's fsGroup)
    path = os.path.join(folder, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(
            {
                **SETTINGS,
                "trainer": trainer,
                "evaluator": evaluator or SETTINGS["evaluator"],
                "data_root": data,
                "pipeline_root": os.path.join(folder, "root"),
                "serving_dir": os.path.join(folder, "serving"),
                "metadata_path": os.path.join(folder, "metadata.sqlite"),
                "kubeflow": {"images": {"default": image, ids.TRAINER: image}},
            },
            f,
        )
    for name in ("root", "serving"):
        os.makedirs(os.path.join(folder, name))
        os.chmod(os.path.join(folder, name), 0o777)
    return path


def _backbone_weights(folder: str) -> str:
    """A notop weights file of the pretrained backbone, laid out as its ImageNet file."""
    from imgpipe.components.trainer import backbones
    from imgpipe.components.trainer.config import TrainerConfig

    backbone = backbones.BACKBONES[backbones.PRETRAINED_BACKBONE]
    side = backbone.native_size
    model = backbone.build((side, side, 3), None, TrainerConfig(backbone=backbone.name), True)
    path = os.path.join(folder, "backbone-notop.weights.h5")
    model.save_weights(path)
    os.chmod(path, 0o644)
    return path


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=os.environ.get(IMAGE_ENV) or images.RUNTIME_IMAGE)
    parser.add_argument("--per-class", type=int, default=24)
    parser.add_argument(
        "--data",
        help="an existing folder of root/<label>/<photo> to run on instead of --per-class "
        "generated 64 px photos (make bench passes its photos)",
    )
    parser.add_argument("--training", choices=sorted(TRAINING), default="tiny")
    parser.add_argument("--logs", help="a folder to write both runs' output into")
    args = parser.parse_args(argv)
    trainer = dict(TRAINING[args.training])
    with tempfile.TemporaryDirectory(prefix="container-bench-") as work:
        if args.data:
            data = args.data
            counts = {
                label: len(os.listdir(os.path.join(data, label)))
                for label in os.listdir(data)
                if os.path.isdir(os.path.join(data, label))
            }
        else:
            data = os.path.join(work, "photos")
            counts = sample_photos.make_dataset(
                data, per_class=args.per_class, size=64, seed=1, classes=CLASSES
            )
        gate = ANY_MODEL_PASSES if args.data else None
        if args.training == PRODUCTION:
            # Beside the data, which DockerRunner mounts into every step (read-only).
            weights_folder = os.path.join(work, "weights")
            os.makedirs(weights_folder)
            os.chmod(weights_folder, 0o755)
            trainer["weights"] = _backbone_weights(weights_folder)
        local_config = _config(os.path.join(work, "local"), data, args.image, trainer, gate)
        local_s, local_log = _timed(["run", "local", "--data", data, "--config", local_config])
        local_steps = local_step_seconds(
            os.path.join(os.path.dirname(local_config), "metadata.sqlite"),
            SETTINGS["pipeline_name"],
        )
        docker_config = _config(os.path.join(work, "docker"), data, args.image, trainer, gate)
        package = os.path.join(work, "pipeline.yaml")
        compile_s, _ = _timed(["kfp", "compile", "--config", docker_config, "-o", package])
        docker_s, docker_log = _timed(
            [
                "kfp",
                "run-local",
                "--config",
                docker_config,
                "--package",
                package,
                "--network",
                "none",
            ]
        )
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)
        for name, log in (("local", local_log), ("docker", docker_log)):
            with open(os.path.join(args.logs, f"{name}.log"), "w") as f:
                f.write(log)
    result = {
        "photos": sum(counts.values()),
        "image": args.image,
        "training": args.training,
        "local_dag_runner_s": round(local_s, 1),
        "kfp_compile_s": round(compile_s, 1),
        "docker_runner_s": round(docker_s, 1),
        "docker_over_local": round(docker_s / local_s, 2),
        "local_step_s": local_steps,
        "docker_step_s": task_seconds(docker_log),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
