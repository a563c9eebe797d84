"""ImageExampleGen at growing sizes, measured on each runner, and extrapolated to ImageNet-1k.

Each size is converted (pass-through, the default options; the photos also resized as
convert_bench does) in a fresh interpreter, which reports:
- `listing_s`: the safe walk and classification of the input folder (listing.py);
- the plan handed to Beam: `task_file_bytes` (the task files, which scale with the
  images) and `pipeline_proto_bytes` (the pipeline proto the runner receives, which must
  not);
- `shuffled_bytes`: the bytes of every PCollection that enters a GroupByKey (or a side
  input), from Beam's own per-PCollection counters (element count × sampled mean
  encoded size), on runners that report them;
- `peak_worker_rss_mb`: the peak RSS of the processes that run the DoFns (the
  interpreter itself in-process; the SDK worker processes on Flink, sampled);
- `wall_s`, end to end as `imgpipe convert` runs it.

The sizes are tiny synthetic JPEGs (one distinct image each, about 800 bytes,
removed after): their per-image cost is the fixed
cost of an image, without the per-byte cost. The bench's photos measure the per-byte
cost, so a model `fixed + images × per_image + bytes × per_byte` can be fitted and
extrapolated to ImageNet-1k (`extrapolate`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable

DEFAULT_SIZES = (3000, 30000)
IMAGENET_IMAGES = 1_281_167
IMAGENET_BYTES = 140e9  # about 110 KB a JPEG
ONE_HOUR_S = 3600.0
SYNTHETIC_CLASSES = 10
_GROUP_BY_KEY_URN = "beam:transform:group_by_key:v1"
_RSS_SAMPLE_S = 0.2


def make_synthetic_dataset(out_dir: str, count: int, classes: int = SYNTHETIC_CLASSES) -> str:
    """Writes out_dir/class_<k>/<n>.jpg: `count` distinct 32x24 JPEGs, and returns out_dir.

    Each image's pixels encode its index, so no two files are the same content (the
    conversion finds duplicates by content).
    """
    import cv2
    import numpy as np

    for k in range(classes):
        os.makedirs(os.path.join(out_dir, f"class_{k}"), exist_ok=True)
    base = np.full((24, 32, 3), 128, np.uint8)
    base[:, :16] = (40, 160, 220)
    for n in range(count):
        image = base.copy()
        image[0, :24] = [[255 * ((n >> bit) & 1)] * 3 for bit in range(24)]
        ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        with open(os.path.join(out_dir, f"class_{n % classes}", f"{n:07d}.jpg"), "wb") as f:
            f.write(encoded.tobytes())
    return out_dir


# ---------------------------------------------------------------------------------------
# One measurement, in a fresh interpreter (`python -m benchmarks.scale --measure ...`).


def _shuffled_bytes(pipeline_proto, result) -> dict | None:
    """Bytes entering each GroupByKey and side input, from the runner's per-PCollection
    counters; None when the runner does not report them."""
    monitoring_infos = getattr(result, "monitoring_infos", None)
    if monitoring_infos is None:
        return None
    from apache_beam.metrics import monitoring_infos as mi

    crossing: dict[str, str] = {}  # PCollection id -> what it feeds
    for transform in pipeline_proto.components.transforms.values():
        if transform.spec.urn == _GROUP_BY_KEY_URN:
            for pcoll in transform.inputs.values():
                crossing[pcoll] = transform.unique_name
        for side in _side_inputs(transform):
            crossing[transform.inputs[side]] = transform.unique_name + " (side input)"
    elements: dict[str, int] = {}
    mean_size: dict[str, float] = {}
    for info in monitoring_infos():
        pcoll = info.labels.get("PCOLLECTION")
        if pcoll not in crossing:
            continue
        if info.urn == mi.ELEMENT_COUNT_URN:
            elements[pcoll] = elements.get(pcoll, 0) + mi.extract_counter_value(info)
        elif info.urn == mi.SAMPLED_BYTE_SIZE_URN:
            count, total, _, _ = mi.extract_distribution(info)
            if count:
                mean_size[pcoll] = total / count
    by_step: dict[str, int] = {}
    for pcoll, step in crossing.items():
        if pcoll in elements:
            by_step[step] = by_step.get(step, 0) + round(elements[pcoll] * mean_size.get(pcoll, 0))
    if not by_step:
        return None
    return {"total": sum(by_step.values()), "by_step": dict(sorted(by_step.items()))}


def _side_inputs(transform) -> list[str]:
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    if transform.spec.urn != common_urns.primitives.PAR_DO.urn:
        return []
    payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
    return list(payload.side_inputs)


def measure(folder: str, beam_args: list[str], resize: bool = False) -> dict:
    """Converts `folder` once (pass-through, or the bench's resize to 256 + centre crop +
    q90) and returns the figures of the module doc."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from benchmarks.convert_bench import QUALITY, RESIZE
    from imgpipe.components.common.runtime import allocator
    from imgpipe.components.image_example_gen import labels, listing, tasks
    from imgpipe.components.image_example_gen.convert import plan_tasks, run_conversion
    from imgpipe.components.image_example_gen.options import ImageOptions, OutputOptions

    allocator.tune_malloc()
    output_options = OutputOptions()
    start = time.perf_counter()
    listed = listing.list_images(folder)
    listing_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="imgpipe-scale-plan-") as plan_dir:
        planned = plan_tasks(listed, labels.build_labels(listed.labels, None, ""), output_options)
        pattern = tasks.write_task_files(planned, plan_dir)
        task_file_bytes = sum(os.path.getsize(p) for p in glob.glob(pattern))
    planned_rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    captured: dict = {}

    class MeasuredPipeline(beam.Pipeline):
        def run(self, test_runner_api="AUTO"):
            proto = self.to_runner_api()
            captured["proto_bytes"] = len(proto.SerializeToString())
            result = super().run(test_runner_api)
            result.wait_until_finish()
            captured["shuffled"] = _shuffled_bytes(proto, result)
            return result

    with tempfile.TemporaryDirectory(prefix="imgpipe-scale-out-") as out:
        start = time.perf_counter()
        result = run_conversion(
            folder,
            out,
            ImageOptions(resize=RESIZE, center_crop=True, quality=QUALITY)
            if resize
            else ImageOptions(),
            output_options,
            lambda: MeasuredPipeline(options=PipelineOptions(beam_args)),
        )
        wall_s = time.perf_counter() - start
    peak_kb = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    return {
        "images": result.summary.written,
        "source_bytes": result.summary.bytes_in,
        "listing_s": round(listing_s, 3),
        "task_file_bytes": task_file_bytes,
        "pipeline_proto_bytes": captured["proto_bytes"],
        "shuffled_bytes": captured["shuffled"],
        "launcher_peak_rss_mb": round(peak_kb / 1024),
        # The listing and plan, held by the launcher on any runner.
        "launcher_rss_after_plan_mb": round(planned_rss_kb / 1024),
        "wall_s": round(wall_s, 3),
    }


# ---------------------------------------------------------------------------------------
# The driver: one fresh interpreter per (runner, size), worker memory sampled from outside.


@dataclasses.dataclass(frozen=True)
class Engine:
    """Where a measurement runs.

    beam_args: the runner and its options.
    worker_pids: the processes whose trees run the SDK workers, when they are not the
      launcher's own (a worker pool); empty when the DoFns run in the launcher.
    exchanged_bytes: after a run, the bytes the runner itself counted between its tasks
      (None if it counts none), for runners whose results carry no per-PCollection
      counters.
    """

    beam_args: list[str]
    worker_pids: list[int] = dataclasses.field(default_factory=list)
    exchanged_bytes: Callable[[], int | None] | None = None


DIRECT = Engine(["--direct_num_workers=1"])


def _tree_rss_mb(roots: Iterable[int]) -> tuple[float, float]:
    """(largest, total) RSS in MB of the processes under (and including) the given pids."""
    import psutil

    sizes = []
    for pid in roots:
        try:
            root = psutil.Process(pid)
            for process in [root, *root.children(recursive=True)]:
                sizes.append(process.memory_info().rss)
        except psutil.Error:
            continue
    return max(sizes, default=0) / 2**20, sum(sizes) / 2**20


def _run_measurement(folder: str, engine: Engine, resize: bool = False) -> dict:
    """Runs `measure` in a fresh interpreter, sampling the RSS of its process tree and of
    the engine's worker processes meanwhile."""
    mode = "--measure-resize" if resize else "--measure"
    command = [sys.executable, "-m", "benchmarks.scale", mode, folder, "--", *engine.beam_args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    load_average = os.getloadavg()[0]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    workers = engine.worker_pids or [child.pid]
    peak = {"launcher": 0.0, "worker": 0.0, "workers_total": 0.0}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(_RSS_SAMPLE_S):
            largest, total = _tree_rss_mb(workers)
            peak["worker"] = max(peak["worker"], largest)
            peak["workers_total"] = max(peak["workers_total"], total)
            peak["launcher"] = max(peak["launcher"], _tree_rss_mb([child.pid])[1])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = child.communicate()
    finally:
        done.set()
        sampler.join()
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"scale measurement failed:\n{err.decode()[-3000:]}")
    figures = json.loads(out.decode().strip().splitlines()[-1])
    if figures["shuffled_bytes"] is None and engine.exchanged_bytes is not None:
        figures["exchanged_bytes"] = engine.exchanged_bytes()
    return figures | {
        "peak_worker_rss_mb": round(peak["worker"]),
        "peak_workers_total_rss_mb": round(peak["workers_total"]),
        "peak_launcher_tree_rss_mb": round(peak["launcher"]),
        "load_average_at_start": round(load_average, 2),
    }


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line y = a + b·x through the points; returns (a, b)."""
    n = len(points)
    if n < 2:
        raise ValueError("a line needs at least two points")
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        raise ValueError("a line needs two different x values")
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return mean_y - slope * mean_x, slope


def extrapolate(runs: dict, cores: int, images: int = IMAGENET_IMAGES) -> dict:
    """ImageNet-1k from one runner's runs (see `run`).

    The model: wall = fixed + images × per_image + bytes × per_byte (+ images × per_resize
    when resizing). fixed and per_image are the line through the synthetic runs (tiny
    images: their bytes cost nothing measurable); per_byte is the photos run's time over
    the synthetic run of as many images, per extra byte; per_resize is the photos' resize
    run over their pass-through run, per image (ImageNet's images have about the photos'
    pixels: ~400×350 against 500×375). Listing, task files and shuffled bytes are lines
    through the synthetic runs too; the pipeline proto is the largest measured. Workers
    for one hour: the work over the hour less the fixed cost, in workers of this
    machine's `cores` cores running this runner.
    """
    synthetic = sorted(runs["synthetic"], key=lambda m: m["images"])
    photos, resized = runs["photos"], runs["photos_resize"]
    fixed_s, per_image_s = fit([(m["images"], m["wall_s"]) for m in synthetic])
    if per_image_s <= 0:
        return {
            "error": "the wall time did not grow with the images: the fixed cost's "
            "variation hides the per-image cost at these sizes; measure larger ones"
        }
    if "photos_large" in runs:
        # Marginal costs between two photo runs: the fixed cost cancels out (a minute on
        # Flink, where it lands in the per-byte cost otherwise). Its variation between the
        # two runs does not: seconds, over the extra images.
        large, large_resized = runs["photos_large"], runs["photos_resize_large"]
        extra_images = large["images"] - photos["images"]
        if extra_images <= 0 or large["source_bytes"] <= photos["source_bytes"]:
            raise ValueError("the larger photo run must have more images and bytes")
        per_photo_s = (large["wall_s"] - photos["wall_s"]) / extra_images
        photo_bytes = (large["source_bytes"] - photos["source_bytes"]) / extra_images
        per_byte_s = (per_photo_s - per_image_s) / photo_bytes
        per_resized_photo_s = (large_resized["wall_s"] - resized["wall_s"]) / extra_images
        per_resize_s = per_resized_photo_s - per_photo_s
    else:
        same_count = [m for m in synthetic if m["images"] == photos["images"]]
        if same_count:
            per_byte_s = (photos["wall_s"] - same_count[0]["wall_s"]) / (
                photos["source_bytes"] - same_count[0]["source_bytes"]
            )
        else:
            rest = photos["wall_s"] - fixed_s - photos["images"] * per_image_s
            per_byte_s = rest / photos["source_bytes"]
        per_resize_s = (resized["wall_s"] - photos["wall_s"]) / photos["images"]
    per_byte_s = max(0.0, per_byte_s)
    per_resize_s = max(0.0, per_resize_s)
    avg_bytes = IMAGENET_BYTES / IMAGENET_IMAGES
    listing_fixed, listing_per = fit([(m["images"], m["listing_s"]) for m in synthetic])
    _, task_per = fit([(m["images"], m["task_file_bytes"]) for m in synthetic])
    shuffled = [m for m in synthetic if m.get("shuffled_bytes")]
    shuffled_per = (
        fit([(m["images"], m["shuffled_bytes"]["total"]) for m in shuffled])[1]
        if len(shuffled) >= 2
        else None
    )
    budget_s = ONE_HOUR_S - max(0.0, fixed_s)

    def conversion(per_image: float) -> dict:
        work_s = images * per_image
        workers = math.ceil(work_s / budget_s)
        return {
            "img_s_here": round(1 / per_image),
            "wall_s_here": round(max(0.0, fixed_s) + work_s),
            f"{cores}_core_workers_for_one_hour": workers,
        }

    passthrough = per_image_s + avg_bytes * per_byte_s
    return {
        "fixed_s": round(fixed_s, 2),
        "per_image_ms": round(per_image_s * 1e3, 4),
        "per_mb_ms": round(per_byte_s * 2**20 * 1e3, 3),
        "resize_per_image_ms": round(per_resize_s * 1e3, 3),
        "imagenet_1k": {
            "images": images,
            "source_gb": IMAGENET_BYTES / 1e9,
            "listing_s": round(listing_fixed + listing_per * images, 1),
            "task_file_mb": round(task_per * images / 2**20, 1),
            "pipeline_proto_kb": round(max(m["pipeline_proto_bytes"] for m in synthetic) / 1024),
            "shuffled_mb": round(shuffled_per * images / 2**20) if shuffled_per else None,
            "peak_worker_rss_mb_largest_run": max(m["peak_worker_rss_mb"] for m in synthetic),
            "passthrough": conversion(passthrough),
            "resize_256": conversion(passthrough + per_resize_s),
        },
    }


def run(
    photos: str,
    sizes: Iterable[int] = DEFAULT_SIZES,
    engines: dict[str, Engine] | None = None,
    work_root: str | None = None,
    large_photos: str | None = None,
) -> dict:
    """Measures every size on every engine and extrapolates; the synthetic data is removed.

    Args:
      photos: the bench's photo folder (real ImageNet-sized JPEGs), for the per-byte and
        the resize costs.
      large_photos: a larger folder of such photos, for those costs at the margin.
      sizes: the synthetic sizes.
      engines: by name; the in-process DirectRunner by default.
      work_root: where the synthetic data is written (a temporary folder by default).
    """
    engines = engines or {"direct": DIRECT}
    runs: dict[str, dict] = {name: {"synthetic": []} for name in engines}
    work = tempfile.mkdtemp(prefix="imgpipe-scale-", dir=work_root)
    try:
        for size in sorted(sizes):
            folder = os.path.join(work, f"synthetic-{size}")
            start = time.perf_counter()
            make_synthetic_dataset(folder, size)
            generated_s = time.perf_counter() - start
            for name, engine in engines.items():
                measured = _run_measurement(folder, engine)
                runs[name]["synthetic"].append(measured | {"generated_s": round(generated_s, 1)})
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cores = os.cpu_count() or 1
    for name, engine in engines.items():
        runs[name]["photos"] = _run_measurement(photos, engine)
        runs[name]["photos_resize"] = _run_measurement(photos, engine, resize=True)
        if large_photos is not None:
            runs[name]["photos_large"] = _run_measurement(large_photos, engine)
            runs[name]["photos_resize_large"] = _run_measurement(large_photos, engine, resize=True)
        synthetic = runs[name]["synthetic"]
        last, before = synthetic[-1], synthetic[-2]
        runs[name]["marginal_img_s"] = round(
            (last["images"] - before["images"]) / (last["wall_s"] - before["wall_s"])
        )
        runs[name]["model"] = extrapolate(runs[name], cores)
    figures: dict = {"sizes": sorted(sizes), "runs": runs}
    if "direct" in runs and "flink" in runs:
        direct, flink = runs["direct"], runs["flink"]
        figures["flink_over_direct_wall"] = {
            "photos_passthrough": round(direct["photos"]["wall_s"] / flink["photos"]["wall_s"], 2),
            "photos_resize": round(
                direct["photos_resize"]["wall_s"] / flink["photos_resize"]["wall_s"], 2
            ),
            "marginal": round(flink["marginal_img_s"] / direct["marginal_img_s"], 2),
        }
    return figures


def run_engines(
    photos: str, sizes: Iterable[int], flink: bool = False, large_photos: str | None = None
) -> dict:
    """`run` on the in-process DirectRunner, and on a local Flink cluster too if asked
    (started here, and stopped however the run ends).

    Raises:
      SystemExit: a one-line set-up error when the Flink cluster cannot be started.
    """
    if not flink:
        return run(photos, sizes, {"direct": DIRECT}, large_photos=large_photos)
    from imgpipe.pipelines.engines import artifacts
    from imgpipe.pipelines.engines import flink as flink_engine

    with (
        tempfile.TemporaryDirectory(prefix="imgpipe-scale-flink-") as work,
        contextlib.ExitStack() as stack,
    ):
        try:
            cluster = stack.enter_context(flink_engine.flink_cluster(work))
        except artifacts.MissingArtifact as e:
            raise SystemExit(f"imgpipe: error: {e}") from None
        assert cluster.supervisor is not None
        pool = [s.process.pid for s in cluster.supervisor.servers if s.name == "worker-pool"]
        flink_run = Engine(cluster.beam_args(), pool, lambda: _flink_exchanged_bytes(cluster))
        engines = {"direct": DIRECT, "flink": flink_run}
        return run(photos, sizes, engines, large_photos=large_photos)


def _flink_exchanged_bytes(cluster) -> int | None:
    """The bytes Flink's tasks sent each other in the cluster's latest job (its vertices'
    `write-bytes`): every edge that is not chained, the GroupByKeys' among them."""
    import urllib.request

    def get(path: str) -> dict:
        with urllib.request.urlopen(cluster.rest_url + path, timeout=10) as response:
            return json.loads(response.read())

    jobs = get("/jobs/overview")["jobs"]
    if not jobs:
        return None
    latest = max(jobs, key=lambda job: job["start-time"])
    vertices = get(f"/jobs/{latest['jid']}")["vertices"]
    return sum(vertex["metrics"]["write-bytes"] for vertex in vertices)


def _measure_main(argv: list[str]) -> None:
    mode, folder, beam_args = argv[0], argv[1], argv[3:]
    print(json.dumps(measure(folder, beam_args, resize=mode == "--measure-resize")))


if __name__ == "__main__":
    if sys.argv[1:2] in (["--measure"], ["--measure-resize"]):
        _measure_main(sys.argv[1:])
    else:
        from benchmarks.photos import make_photo_dataset

        print(json.dumps(run(make_photo_dataset("/tmp/imgpipe-bench/photos-3000")), indent=2))
