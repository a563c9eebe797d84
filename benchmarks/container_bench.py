"""The pipeline in containers against the pipeline in one process, on the same photos.

Runs, one after the other and each as the command users type (a fresh process):
  imgpipe run local --data D --config C     LocalDagRunner, every step in one process
  imgpipe kfp compile --config C -o P.yaml  (timed apart)
  imgpipe kfp run-local --config C --package P.yaml --network none
                                            kfp.local's DockerRunner, a container a step
and prints the wall times and their ratio as one JSON object.

  bin/in-env python -m benchmarks.container_bench [--image REF] [--per-class N]

The image defaults to IMGPIPE_TEST_IMAGE, else the one `make image` tags
(pipelines/images.py), as in the container tier.
The settings are the container tier's (tests/test_kubeflow_docker.py): tiny training,
so the figure is mostly the cost of a process and an image start per step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import yaml

from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import images, sample_photos

IMAGE_ENV = "IMGPIPE_TEST_IMAGE"  # the container tier's (tests/containers.py)
CLASSES = ("animal", "chessboard")
SETTINGS = {
    "pipeline_name": "container-bench",
    "trainer": {
        "image_size": 32,
        "batch_size": 8,
        "epochs": 2,
        "min_train_steps": 40,
        "tensorboard_images": 0,
    },
    "example_gen": {"output": {"num_shards": 1, "splits": [["train", 0.75], ["eval", 0.25]]}},
    "evaluator": {"accuracy_threshold": 0.6, "significance": 0.1},
}


def _timed(args: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "imgpipe.pipelines.cli", *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - start


def _config(folder: str, data: str, image: str) -> str:
    os.makedirs(folder)
    os.chmod(folder, 0o777)  # the steps' user writes the root (a claim's fsGroup)
    path = os.path.join(folder, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(
            {
                **SETTINGS,
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=os.environ.get(IMAGE_ENV) or images.RUNTIME_IMAGE)
    parser.add_argument("--per-class", type=int, default=24)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="container-bench-") as work:
        data = os.path.join(work, "photos")
        counts = sample_photos.make_dataset(
            data, per_class=args.per_class, size=64, seed=1, classes=CLASSES
        )
        local_config = _config(os.path.join(work, "local"), data, args.image)
        local_s = _timed(["run", "local", "--data", data, "--config", local_config])
        docker_config = _config(os.path.join(work, "docker"), data, args.image)
        package = os.path.join(work, "pipeline.yaml")
        compile_s = _timed(["kfp", "compile", "--config", docker_config, "-o", package])
        docker_s = _timed(
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
    result = {
        "photos": sum(counts.values()),
        "image": args.image,
        "local_dag_runner_s": round(local_s, 1),
        "kfp_compile_s": round(compile_s, 1),
        "docker_runner_s": round(docker_s, 1),
        "docker_over_local": round(docker_s / local_s, 2),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
