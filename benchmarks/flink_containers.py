"""Flink in containers against the local Flink cluster, on the same input, in one run.

`bin/in-env python -m benchmarks.flink_containers [--images N] [--repeats R] [--build]`

Times `imgpipe convert` (its whole wall time, as a user sees it: start-up, staging,
the Flink job, publishing) on the container cluster of tests/flink_containers.py
(two TaskManagers, each with its worker pool container) and on `imgpipe engine flink`'s
cluster (pipelines/engines/flink.py: one TaskManager, processes on this machine), both at
parallelism 2, runs interleaved; and each cluster's start-up. Checks that both outputs
are the DirectRunner's bytes. Also the Flink image's size and, with --build, the time of
a build of its top layer with no cache (the base's debootstrap is timed by
bin/flink-image's log). Prints a table and the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from imgpipe.pipelines import images
from imgpipe.pipelines.engines import flink
from tests import flink_containers, flink_image, imagegen, outputs

# The project image whose Python runs the SDK worker pools, as the container tier's.
TEST_IMAGE_ENV = "IMGPIPE_TEST_IMAGE"


def _convert(src: str, out: str, beam_args: list[str]) -> float:
    """Runs `imgpipe convert` (umask 0: the containers' users write into what it makes);
    returns its wall time."""
    argv = ["convert", src, out, "--resize", "16", "--shards", "2", "--no-progress"]
    if beam_args:
        argv += ["--", *beam_args]
    command = [
        "sh",
        "-c",
        'umask 0 && exec "$@"',
        "sh",
        sys.executable,
        "-m",
        "imgpipe.pipelines.cli",
    ]
    start = time.monotonic()
    result = subprocess.run([*command, *argv], capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"imgpipe convert failed:\n{result.stderr[-3000:]}")
    return elapsed


def _image_size_mb(image: str) -> float:
    return int(flink_containers.docker("image", "inspect", "--format", "{{.Size}}", image)) / 1e6


def _build_seconds() -> float:
    """A no-cache build of the Flink image's Dockerfile on its base, to a throwaway tag."""
    context = tempfile.mkdtemp(prefix="imgpipe-flink-context-")
    tag = f"{flink_image.IMAGE_NAME}:bench-{os.getpid()}"
    try:
        flink_image.write_context(context)
        start = time.monotonic()
        flink_containers.docker(
            "build",
            "-q",
            "--no-cache",
            f"--build-arg=BASE={flink_image.base_tag()}",
            "-t",
            tag,
            context,
            timeout=1800,
        )
        return time.monotonic() - start
    finally:
        flink_containers.docker("image", "rm", tag, check=False)
        shutil.rmtree(context, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000, help="images in the input")
    parser.add_argument("--repeats", type=int, default=2, help="runs on each cluster")
    parser.add_argument("--build", action="store_true", help="also time an image build")
    args = parser.parse_args(argv)

    if problem := flink_containers.engine_problem():
        sys.exit(f"imgpipe: error: {problem}")
    image = flink_image.image_tag()
    worker = os.environ.get(TEST_IMAGE_ENV) or images.RUNTIME_IMAGE
    for needed, fix in ((image, "make flink-image"), (worker, "make image")):
        if not flink_containers.image_exists(needed):
            sys.exit(f"imgpipe: error: the image {needed} is not built: run '{fix}'")

    results: dict = {
        "images": args.images,
        "flink_image": image,
        "flink_image_mb": round(_image_size_mb(image), 1),
        "flink_base_mb": round(_image_size_mb(flink_image.base_tag()), 1),
    }
    if args.build:
        results["flink_image_build_s"] = round(_build_seconds(), 1)

    work = tempfile.mkdtemp(prefix="imgpipe-flinkc-bench-")
    container_s: list[float] = []
    local_s: list[float] = []
    try:
        start = time.monotonic()
        with flink_containers.container_cluster(image, worker) as containers:
            results["containers_startup_s"] = round(time.monotonic() - start, 1)
            src = os.path.join(containers.shared_dir, "src")
            counts = {"a": args.images // 2, "b": args.images - args.images // 2}
            imagegen.make_image_folder(src, counts, size=(48, 64))
            direct = os.path.join(containers.shared_dir, "direct")
            _convert(src, direct, [])
            expected = outputs.tree(direct)
            start = time.monotonic()
            with flink.flink_cluster(os.path.join(work, "local")) as local:
                results["local_startup_s"] = round(time.monotonic() - start, 1)
                for repeat in range(args.repeats):
                    for name, cluster, times in (
                        ("containers", containers, container_s),
                        ("local", local, local_s),
                    ):
                        out = os.path.join(containers.shared_dir, f"{name}-{repeat}")
                        times.append(_convert(src, out, cluster.beam_args()))
                        if outputs.tree(out) != expected:
                            sys.exit(
                                f"imgpipe: error: the {name} output differs from the DirectRunner's"
                            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["containers_convert_s"] = [round(t, 1) for t in container_s]
    results["local_convert_s"] = [round(t, 1) for t in local_s]
    results["ratio_best"] = round(min(container_s) / min(local_s), 2)
    results["load_average"] = os.getloadavg()
    print(f"{'':28}{'containers':>12}{'local':>10}")
    print(
        f"{'start-up, s':28}{results['containers_startup_s']:>12}{results['local_startup_s']:>10}"
    )
    print(f"{'imgpipe convert (best), s':28}{min(container_s):>12.1f}{min(local_s):>10.1f}")
    print(f"containers / local: {results['ratio_best']}x; outputs identical to the DirectRunner's")
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
