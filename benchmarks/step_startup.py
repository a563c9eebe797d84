"""Each pipeline step's start-up in the image: from `docker run` to the executor's first
line of work.

For every step of the compiled pipeline (its executor class, as tests/golden/pipeline.yaml
holds it), a container of the image runs what the step's entrypoint runs before the
executor's `Do` (imgpipe.pipelines.container.entrypoint.load_executor: TFX's patched
helpers, the executor's modules, what TFX's entrypoint needs), then prints the time.
Measured from just before `docker run` on the host to that line (the kernel's clock is
the container's); beside it, the floor: a container that starts Python and prints at
once. With several --image, the images' runs are interleaved, step by step.

  bin/in-env python -m benchmarks.step_startup [--image REF ...] [--repeats N]

Also the same load in a process of the development environment (what LocalDagRunner
pays once for all steps). Prints a table and the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

from imgpipe.pipelines import images

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden", "pipeline.yaml")
IMAGE_ENV = "IMGPIPE_TEST_IMAGE"
# The heavy libraries a step may or may not load: which ones each step loads is reported.
LIBRARIES = (
    "tensorflow",
    "apache_beam",
    "tensorflow_data_validation",
    "tensorflow_model_analysis.api",
    "tensorflow_transform",
    "tfx_bsl.tfxio",
    "nltk",
    "boto3",
)
MARK = "IMGPIPE_STARTUP"
PROBE = f"""
import json, sys, time
start = time.perf_counter()
from imgpipe.pipelines.container import entrypoint
if hasattr(entrypoint, "load_executor"):
    entrypoint.load_executor(sys.argv[1])
else:  # an image built before load_executor: what its entrypoint loaded
    from imgpipe.pipelines import tfx_patches
    from tfx.utils import import_utils
    tfx_patches.patch_tfx_entrypoint()
    import_utils.import_class_by_path(sys.argv[1])
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor
loaded = time.perf_counter()
print("{MARK}", json.dumps({{"at": time.time(), "python_s": loaded - start,
    "modules": len(sys.modules), "libraries": [m for m in {LIBRARIES!r} if m in sys.modules]}}),
    flush=True)
"""
FLOOR = f'import json, time; print("{MARK}", json.dumps({{"at": time.time()}}), flush=True)'


def step_executors() -> dict[str, str]:
    """{step's executor module's component: executor class path}, from the compiled
    pipeline."""
    text = open(GOLDEN).read()
    paths = sorted(set(re.findall(r"--executor_class_path\n\s*- (\S+)", text)))
    return {path.split(".")[-3]: path for path in paths}


def _marked(command: list[str]) -> tuple[float, dict]:
    start = time.time()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    for line in result.stdout.splitlines():
        if line.startswith(MARK + " "):
            fields = json.loads(line[len(MARK) + 1 :])
            return fields["at"] - start, fields
    sys.exit(f"imgpipe: error: {' '.join(command[:6])} failed:\n{result.stderr[-3000:]}")


def _in_container(image: str, code: str, *args: str) -> tuple[float, dict]:
    return _marked(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", image]
        + ["-c", code, *args]
    )


def run(image_refs: list[str], repeats: int = 3) -> dict:
    executors = step_executors()
    results: dict = {"repeats": repeats, "load_average_start": os.getloadavg(), "images": {}}
    for image in image_refs:
        results["images"][image] = {"floor_s": [], "steps": {}}
    for _ in range(repeats):
        for image in image_refs:
            floor, _fields = _in_container(image, FLOOR)
            results["images"][image]["floor_s"].append(round(floor, 2))
        for step, path in executors.items():
            for image in image_refs:
                seconds, fields = _in_container(image, PROBE, path)
                entry = results["images"][image]["steps"].setdefault(
                    step, {"executor": path, "start_s": [], "python_s": []}
                )
                entry["start_s"].append(round(seconds, 2))
                entry["python_s"].append(round(fields["python_s"], 2))
                entry["modules"] = fields["modules"]
                entry["libraries"] = fields["libraries"]
    dev: dict = {}
    for step, path in executors.items():
        _seconds, fields = _marked([sys.executable, "-c", PROBE, path])
        dev[step] = {"python_s": round(fields["python_s"], 2), "modules": fields["modules"]}
    results["development_environment"] = dev
    results["load_average_end"] = os.getloadavg()
    return results


def print_table(results: dict) -> None:
    for image, data in results["images"].items():
        print(f"\n{image}: floor (docker run + python, best) {min(data['floor_s']):.1f} s")
        print(f"{'step':22}{'start, best':>12}{'first':>8}{'imports':>9}{'modules':>9}  libraries")
        for step, entry in data["steps"].items():
            libraries = ",".join(lib.split(".")[0] for lib in entry["libraries"][1:])
            print(
                f"{step:22}{min(entry['start_s']):>12.1f}{entry['start_s'][0]:>8.1f}"
                f"{min(entry['python_s']):>9.1f}{entry['modules']:>9}  {libraries}"
            )


def default_image() -> str:
    return os.environ.get(IMAGE_ENV) or images.RUNTIME_IMAGE


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", action="append", help="an image to measure (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    refs = args.image or [default_image()]
    results = run(refs, args.repeats)
    print_table(results)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
