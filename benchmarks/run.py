"""`make bench`: every benchmark, baseline and ours side by side, on one dataset.

Writes bench-results/latest.json and prints it, with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time

from benchmarks.photos import make_photo_dataset
from benchmarks.scale import DEFAULT_SIZES

DEFAULT_DATA = os.path.join(tempfile.gettempdir(), "imgpipe-bench", "photos")


def machine() -> dict:
    cpu = "unknown"
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(mem_gb, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument(
        "--only",
        choices=[
            "convert",
            "stats",
            "input",
            "validation",
            "scale",
            "cli",
            "startup",
            "containers",
            "retraining",
            "equal_models",
            "year",
            "distributed",
        ],
        action="append",
    )
    parser.add_argument(
        "--scale",
        type=_sizes,
        default=DEFAULT_SIZES,
        help="the synthetic sizes of the scale benchmark, e.g. 3000,30000,300000",
    )
    parser.add_argument(
        "--flink",
        action="store_true",
        help="also run the scale benchmark on a local Flink cluster (started and stopped here)",
    )
    parser.add_argument(
        "--scale-photos",
        type=int,
        default=0,
        help="a second, larger photo set for the scale benchmark (e.g. 30000), whose marginal "
        "cost over the first gives the per-byte and resize costs without the fixed cost",
    )
    parser.add_argument("--out", default="bench-results/latest.json")
    args = parser.parse_args()
    selected = set(args.only or ["convert", "stats", "input", "validation", "scale", "cli"])

    # Whatever the benchmarks or the libraries they call leave in the temporary folder
    # (Beam's runners leave empty folders there) goes with this one.
    scratch = tempfile.mkdtemp(prefix="imgpipe-bench-scratch-")
    os.environ["TMPDIR"] = tempfile.tempdir = scratch
    try:
        _run(args, selected)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(args: argparse.Namespace, selected: set[str]) -> None:
    # As the pipeline's own stages do; set once here, so every baseline gets it too.
    from imgpipe.components.common.runtime import allocator

    malloc_tuned = allocator.tune_malloc()
    photos = make_photo_dataset(DEFAULT_DATA + f"-{args.images}", count=args.images)
    results: dict = {
        "machine": machine() | {"glibc_malloc_tuned": malloc_tuned},
        "dataset": {"folder": photos, "images": args.images},
    }
    start = time.time()
    if "retraining" in selected:
        from benchmarks import retraining_bench

        results["retraining"] = retraining_bench.run()
    if "equal_models" in selected:
        from benchmarks import equal_models

        results["equal_models"] = equal_models.run()
    if "year" in selected:
        from benchmarks import year_bench

        results["year"] = year_bench.run()
    if "cli" in selected:
        from benchmarks import cli_start

        results["cli_start"] = cli_start.run()
    if "startup" in selected:
        from benchmarks import step_startup

        results["step_startup"] = step_startup.run([step_startup.default_image()])
    if "containers" in selected:
        from benchmarks import container_bench, flink_containers

        # The bench's photos for both: DockerRunner against LocalDagRunner, then Flink
        # in containers against the local Flink cluster on as many images.
        results["containers"] = {
            "docker_runner": container_bench.main(["--data", photos]),
            "flink": flink_containers.main(["--images", str(args.images), "--repeats", "1"]),
        }
    if "convert" in selected:
        from benchmarks import convert_bench

        results["image_example_gen"] = convert_bench.run(photos)
    if "distributed" in selected:
        from benchmarks import distributed_bench

        shards = convert_bench_shards(photos)
        results["distributed_training"] = {
            backbone: distributed_bench.run(shards, backbone=backbone)
            for backbone in distributed_bench.BACKBONES
        }
    if selected & {"stats", "input", "validation"}:
        shards = convert_bench_shards(photos)
        if "stats" in selected:
            from benchmarks import stats_bench

            results["image_statistics"] = stats_bench.run(
                shards, passthrough_dir=passthrough_bench_shards(photos)
            )
        if "input" in selected:
            from benchmarks import input_bench

            results["trainer_input_fn"] = input_bench.run(shards, photos)
            results["gpu_feed"] = input_bench.gpu_feed(shards, batch_size=16, steps=4)
        if "validation" in selected:
            from benchmarks import input_bench

            results["validation_epochs"] = input_bench.validation_epochs(shards)
    if "scale" in selected:
        from benchmarks import scale

        large_photos = None
        if args.scale_photos:
            if args.scale_photos <= args.images:
                raise SystemExit(
                    f"imgpipe: error: --scale-photos must be more than --images ({args.images})"
                )
            count = args.scale_photos
            large_photos = make_photo_dataset(DEFAULT_DATA + f"-{count}", count=count)
        results["scale"] = scale.run_engines(
            photos, args.scale, flink=args.flink, large_photos=large_photos
        )
    results["seconds"] = round(time.time() - start)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(sorted(int(size) for size in text.split(",")))
    if len(sizes) < 2 or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"give at least two positive sizes, got {text!r}")
    return sizes


def convert_bench_shards(photos: str) -> str:
    """Shards of the photos converted at 256 (resize + center crop, q90), made once."""
    from imgpipe.components.image_example_gen.options import ImageOptions

    return _bench_shards(
        photos, "shards-256", ImageOptions(resize=256, center_crop=True, quality=90)
    )


def passthrough_bench_shards(photos: str) -> str:
    """Shards of the photos as they are (the default options), made once."""
    from imgpipe.components.image_example_gen.options import ImageOptions

    return _bench_shards(photos, "shards-passthrough", ImageOptions())


def _bench_shards(photos: str, name: str, image_options) -> str:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from imgpipe.components.common.formats.layout import DALI_INDEX_DIR, MANIFEST_FILE
    from imgpipe.components.image_example_gen.convert import run_conversion
    from imgpipe.components.image_example_gen.options import OutputOptions

    out = f"{photos.rstrip('/')}-{name}"
    # Complete, and with the DALI index files that the DALI pipeline reads.
    if os.path.exists(os.path.join(out, MANIFEST_FILE)) and os.path.isdir(
        os.path.join(out, DALI_INDEX_DIR)
    ):
        return out
    run_conversion(
        photos,
        out,
        image_options,
        OutputOptions(num_shards=8),
        lambda: beam.Pipeline(options=PipelineOptions(["--direct_num_workers=1"])),
    )
    return out


if __name__ == "__main__":
    main()
