"""ImageExampleGen throughput against the articles' approaches, side by side.

Pass-through: ours stores the encoded bytes with the size from the header; the articles
decode every image with TensorFlow to learn its size (one process).
Resize to 256 + center crop + JPEG q90: ours against a multiprocessing pool running
cv2.imread -> resize -> imencode on the same cores.
Memory: peak RSS of a conversion of N and of 10N images, each in a fresh process.

Each comparison also gives `speedup_bound`: the baseline's time over Beam's fixed cost
(a 30-image run) plus the per-image conversion alone (ConvertImageFn's work without
Beam): about the most any run on Beam can reach here.
"""

from __future__ import annotations

import functools
import glob
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import apache_beam as beam
import cv2
import numpy as np
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions

from imgpipe.components.common.formats.conversion_summary import ConversionSummary
from imgpipe.components.common.formats.layout import TRAIN_SPLIT
from imgpipe.components.image_example_gen.convert import run_conversion
from imgpipe.components.image_example_gen.image_codec import convert_image
from imgpipe.components.image_example_gen.options import ImageOptions, OutputOptions, flat_splits
from imgpipe.components.image_example_gen.tasks import ConversionTask
from imgpipe.components.image_example_gen.transforms import convert_task

RESIZE = 256
QUALITY = 90


def _images(folder: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, "*", "*.jpg")))


def _example(encoded: bytes, height: int, width: int, label: int) -> bytes:
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
                "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[height])),
                "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[width])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
        )
    ).SerializeToString()


def baseline_decode_for_size(paths: list[str], out_path: str) -> None:
    """The articles: read, decode with TF to get the shape, write (one process)."""
    with tf.io.TFRecordWriter(out_path) as writer:
        for i, path in enumerate(paths):
            encoded = tf.io.read_file(path)
            shape = tf.io.decode_jpeg(encoded, channels=3).shape
            writer.write(_example(encoded.numpy(), shape[0], shape[1], i % 10))


def _cv2_resize_task(path: str, interpolation: int = cv2.INTER_AREA) -> bytes:
    image = cv2.imread(path)
    height, width = image.shape[:2]
    scale = RESIZE / min(height, width)
    size = (max(RESIZE, round(width * scale)), max(RESIZE, round(height * scale)))
    image = cv2.resize(image, size, interpolation=interpolation)
    top = (image.shape[0] - RESIZE) // 2
    left = (image.shape[1] - RESIZE) // 2
    image = image[top : top + RESIZE, left : left + RESIZE]
    ok, buffer = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, QUALITY])
    return buffer.tobytes()


def baseline_pool_resize(
    paths: list[str], out_path: str, processes: int, interpolation: int = cv2.INTER_AREA
) -> None:
    """The articles: multiprocessing pool of cv2.imread -> resize -> imencode, parent writes."""
    task = functools.partial(_cv2_resize_task, interpolation=interpolation)
    with (
        multiprocessing.get_context("fork").Pool(processes) as pool,
        tf.io.TFRecordWriter(out_path) as writer,
    ):
        for i, encoded in enumerate(pool.imap(task, paths, chunksize=16)):
            writer.write(_example(encoded, RESIZE, RESIZE, i % 10))


def ours(
    folder: str, out_dir: str, image_options: ImageOptions, beam_args: list[str]
) -> ConversionSummary:
    result = run_conversion(
        folder,
        out_dir,
        image_options,
        OutputOptions(splits=flat_splits(0.1)),
        lambda: beam.Pipeline(options=PipelineOptions(beam_args)),
    )
    return result.summary


def conversion_alone(folder: str, options: ImageOptions, threads: int) -> None:
    """ConvertImageFn's per-image work (read, convert, hash, serialize) without Beam:
    inline for pass-through, on `threads` threads when every image is decoded, as the
    DoFn does."""
    tasks = [
        ConversionTask(os.path.relpath(path, folder), "label", 0, TRAIN_SPLIT)
        for path in _images(folder)
    ]
    convert = functools.partial(convert_task, folder, options=options)
    if options.decodes_every_image:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(convert, tasks))
    else:
        list(map(convert, tasks))


QUALITY_SAMPLE = 300


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float(10 * np.log10(255.0**2 / mse)) if mse else float("inf")


def resize_quality(paths: list[str]) -> dict:
    """The resize's output quality, ours and the cv2 pools', as the mean PSNR (dB) over
    `paths` of each stored JPEG, decoded, against the ideal resample of the same window:
    the decoded photo area-resampled in float32 (cv2.INTER_AREA, no rounding), with each
    side's own centre crop (ours crops the centre square, then scales; the pool scales,
    then crops; the two windows differ by under a pixel)."""
    options = ImageOptions(resize=RESIZE, center_crop=True, quality=QUALITY)
    sums = {"ours": 0.0, "cv2_inter_linear": 0.0, "cv2_inter_area": 0.0}
    for path in paths:
        data = open(path, "rb").read()
        original = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).astype(np.float32)
        height, width = original.shape[:2]
        short = min(height, width)
        top, left = (height - short) // 2, (width - short) // 2
        square = original[top : top + short, left : left + short]
        crop_first = cv2.resize(square, (RESIZE, RESIZE), interpolation=cv2.INTER_AREA)
        scale = RESIZE / short
        size = (max(RESIZE, round(width * scale)), max(RESIZE, round(height * scale)))
        scaled = cv2.resize(original, size, interpolation=cv2.INTER_AREA)
        top, left = (size[1] - RESIZE) // 2, (size[0] - RESIZE) // 2
        scale_first = scaled[top : top + RESIZE, left : left + RESIZE]
        image, _ = convert_image(data, options)
        outputs = {
            "ours": (image.data, crop_first),
            "cv2_inter_linear": (_cv2_resize_task(path, cv2.INTER_LINEAR), scale_first),
            "cv2_inter_area": (_cv2_resize_task(path, cv2.INTER_AREA), scale_first),
        }
        for name, (encoded, reference) in outputs.items():
            decoded = cv2.imdecode(np.frombuffer(encoded, np.uint8), cv2.IMREAD_COLOR)
            sums[name] += _psnr(decoded, reference)
    return {f"{name}_psnr_db": round(total / len(paths), 2) for name, total in sums.items()}


def _timed(fn, *args, repeats: int = 1) -> float:
    """The best of `repeats` runs: this machine is shared, so single timings are noisy."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best


def _peak_rss_mb(folder: str, limit: int, beam_args: list[str]) -> float:
    """Peak RSS (MB) of the largest process of one conversion run in a fresh interpreter."""
    with tempfile.TemporaryDirectory(prefix="imgpipe-rss-") as work:
        subset = _subset(folder, limit, os.path.join(work, "subset"))
        code = (
            "import resource\n"
            "from benchmarks.convert_bench import ours\n"
            "from imgpipe.components.image_example_gen.options import ImageOptions\n"
            f"ours({subset!r}, {os.path.join(work, 'out')!r}, ImageOptions(), {beam_args!r})\n"
            "print(max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,\n"
            "          resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        )
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def _subset(folder: str, count: int, subset: str) -> str:
    """Makes `subset`, a folder of hard links to the first `count` images of `folder` in
    the same label layout (symbolic links to files outside an input folder are not
    followed), and returns it."""
    for path in _images(folder)[:count]:
        label_dir = os.path.join(subset, os.path.basename(os.path.dirname(path)))
        os.makedirs(label_dir, exist_ok=True)
        os.link(path, os.path.join(label_dir, os.path.basename(path)))
    return subset


def run(folder: str, processes: int | None = None) -> dict:
    """Runs every comparison on the JPEGs of folder/<label>/ and returns the figures.

    Wall-clock rates include each run's fixed cost (Beam builds and starts a pipeline,
    about a second in-process); `steady` rates subtract a 30-image run's time, which is
    what a large dataset sees. Each time is the best of two or three runs.
    """
    processes = processes or os.cpu_count() or 1
    paths = _images(folder)
    n = len(paths)
    for path in paths:  # warm the page cache for everyone alike
        with open(path, "rb") as f:
            f.read()
    multi = ["--direct_running_mode=multi_processing", f"--direct_num_workers={processes}"]
    in_process = ["--direct_num_workers=1"]
    work = tempfile.mkdtemp(prefix="imgpipe-convert-bench-")
    small_folder = _subset(folder, 30, os.path.join(work, "small"))
    out = iter(range(1000))

    def ours_time(src: str, options: ImageOptions, args: list[str], repeats: int = 2) -> float:
        def convert() -> None:
            ours(src, os.path.join(work, str(next(out))), options, args)

        return _timed(convert, repeats=repeats)

    figures: dict = {
        "images": n,
        "processes": processes,
        "source_mb": round(sum(os.path.getsize(p) for p in paths) / 2**20, 1),
    }
    try:
        t_base = _timed(
            baseline_decode_for_size, paths, os.path.join(work, "base.tfrecord"), repeats=2
        )
        t_pass = ours_time(folder, ImageOptions(), in_process, repeats=3)
        t_pass_small = ours_time(small_folder, ImageOptions(), in_process, repeats=3)
        t_pass_multi = ours_time(folder, ImageOptions(), multi, repeats=1)
        t_pass_alone = _timed(conversion_alone, folder, ImageOptions(), processes, repeats=3)
        summary = ours(folder, os.path.join(work, "ratio"), ImageOptions(), in_process)
        figures["passthrough"] = {
            "baseline_tf_decode_for_size_img_s": round(n / t_base),
            "ours_img_s": round(n / t_pass),
            "ours_steady_img_s": round((n - 30) / (t_pass - t_pass_small)),
            "ours_multiprocess_runner_img_s": round(n / t_pass_multi),
            "speedup_vs_baseline": round(t_base / t_pass, 2),
            "fixed_cost_s": round(t_pass_small, 3),
            "conversion_alone_img_s": round(n / t_pass_alone),
            "speedup_bound": round(t_base / (t_pass_small + t_pass_alone), 2),
            "tfrecord_to_source_size_ratio": summary.size_ratio,
        }
        resize = ImageOptions(resize=RESIZE, center_crop=True, quality=QUALITY)
        t_pool_area = _timed(
            baseline_pool_resize,
            paths,
            os.path.join(work, "pa.tfrecord"),
            processes,
            cv2.INTER_AREA,
            repeats=2,
        )
        t_pool_linear = _timed(
            baseline_pool_resize,
            paths,
            os.path.join(work, "pl.tfrecord"),
            processes,
            cv2.INTER_LINEAR,
            repeats=2,
        )
        t_resize = ours_time(folder, resize, in_process)
        t_resize_small = ours_time(small_folder, resize, in_process)
        t_resize_multi = ours_time(folder, resize, multi, repeats=1)
        t_resize_alone = _timed(conversion_alone, folder, resize, processes, repeats=2)
        figures["resize_256_crop_q90"] = {
            "baseline_cv2_pool_inter_area_img_s": round(n / t_pool_area),
            "baseline_cv2_pool_inter_linear_img_s": round(n / t_pool_linear),
            "ours_img_s": round(n / t_resize),
            "ours_steady_img_s": round((n - 30) / (t_resize - t_resize_small)),
            "ours_multiprocess_runner_img_s": round(n / t_resize_multi),
            "speedup_vs_inter_area_pool": round(t_pool_area / t_resize, 2),
            "speedup_vs_inter_linear_pool": round(t_pool_linear / t_resize, 2),
            "fixed_cost_s": round(t_resize_small, 3),
            "conversion_alone_img_s": round(n / t_resize_alone),
            "speedup_bound": round(t_pool_area / (t_resize_small + t_resize_alone), 2),
            "speedup_bound_vs_inter_linear_pool": round(
                t_pool_linear / (t_resize_small + t_resize_alone), 2
            ),
            "quality": resize_quality(paths[:: max(1, n // QUALITY_SAMPLE)]),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    small = max(1, n // 10)
    rss_small = _peak_rss_mb(folder, small, in_process)
    rss_large = _peak_rss_mb(folder, n, in_process)
    figures["memory"] = {
        f"peak_rss_mb_{small}_images": round(rss_small),
        f"peak_rss_mb_{n}_images": round(rss_large),
        "growth_for_10x_images": round(rss_large / rss_small, 2),
    }
    return figures


if __name__ == "__main__":
    import json

    from benchmarks.photos import make_photo_dataset

    print(json.dumps(run(make_photo_dataset("/tmp/imgpipe-bench/photos")), indent=2))
