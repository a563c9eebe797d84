"""ImageStatistics throughput against decoding the same shards once, in the same process.

Passes over the shards of one Examples folder, interleaved and repeated (best of
`repeats` each, since other work shares the machine):
  decode_only   read the records (TF's C++ reader, as the statistics do), parse them,
                tf.io.decode_image every image at its stored size (batched
                tf.function, as the statistics do): the floor cost.
  stats_core    the same reading, then the statistics' per-batch work without Beam
                (analyze_batch, two batches in flight as AnalyzeBatchFn runs them),
                with the strict JPEG decode (verify_images, the default).
  check_cost    stats_core against the same with verify_images off (TensorFlow's decode
                alone, `unchecked`) and checked the way it is without the strict_jpeg
                library (`two_decodes`: a second, 1/8-scale strict decode before
                TensorFlow's).
  stats_beam    the whole statistics run on Beam's DirectRunner (one worker): reading,
                analysis, combine, duplicate search, results written and read back.
  stats_beam_small  the same on one shard per split, to separate Beam's fixed cost per
                run (building and starting the pipeline: seconds) from the cost per image.
  eval_decode   the statistics' own decode alone: the same reading and parsing, then
                eval_images (the Trainer's resolution) on the analysis' threads.
  eval_decode_histograms  the same plus each image's exact channel histograms, the
                one pass over the pixels that the exact mean and std need: no hash,
                thumbnails or bookkeeping.
The check's cost is strict_decode / unchecked (and the same for two_decodes), in
images/s and in CPU time per image (the process's, TensorFlow's threads included: the
steadier measure on a shared machine). `check_cost` measures it on the shards at 256 px
(crops at the model's size) and, when given, on a pass-through conversion of the same
photos (every crop resized). The Beam runs here read shards whose conversion decoded
every image, so they skip the check.
The target is stats_beam / decode_only >= 0.8; the marginal rate, (images - small
images) / (best time - best small time), is what a large dataset sees. It is taken from
each size's best of `BEAM_REPEATS` runs, not run by run: one pair's difference swings with
the noise of either run (0.55-1.43 of the decode over eight runs when it was).

`ratio_bound` is about the most any statistics run on Beam can reach here: Beam's fixed
cost plus eval_decode_histograms, and nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import tensorflow as tf

from imgpipe.components.common.formats import artifacts, conversion_summary, layout
from imgpipe.components.common.formats import features as fk
from imgpipe.components.common.images.model_input import DEFAULT_CROP_FRACTION, DEFAULT_IMAGE_SIZE
from imgpipe.components.image_statistics import strict_jpeg
from imgpipe.components.image_statistics.analyze import (
    DECODE_CHUNK,
    AnalysisOptions,
    BatchDecoder,
    analyze_batch,
    parse_record,
)
from imgpipe.components.image_statistics.compute import (
    run_statistics,
    split_order,
    thumbnail_fraction,
)
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.decoding import REDUCING_THREADS
from imgpipe.components.image_statistics.pixel_summaries import channel_histograms
from imgpipe.components.image_statistics.transforms import (
    BATCH_SIZE,
    BATCHES_IN_FLIGHT,
    ReadRecordBatchesFn,
)

TARGET_RATIO = 0.8
MARGINAL_TARGET_RATIO = 0.85  # issue 35
# Beam runs per size for the marginal rate: each pair takes about 1.5 s.
BEAM_REPEATS = 6


def _split_records(examples_dir: str, split: str) -> list[bytes]:
    """The records of one split, read as the statistics read them."""
    files = sorted(tf.io.gfile.glob(artifacts.split_shard_pattern(examples_dir, split)))
    reader = ReadRecordBatchesFn(BATCH_SIZE)
    return [
        record for path in files for _, batch in reader.process((split, path)) for record in batch
    ]


def _splits(examples_dir: str) -> list[str]:
    return split_order(conversion_summary.read(examples_dir).split_names)


def _records(examples_dir: str) -> list[bytes]:
    return [
        record for split in _splits(examples_dir) for record in _split_records(examples_dir, split)
    ]


@tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
def _decode_batch(encoded: tf.Tensor) -> tf.Tensor:
    def decode(e: tf.Tensor) -> tf.Tensor:
        return tf.reduce_max(tf.io.decode_image(e, channels=3, expand_animations=False))

    return tf.map_fn(decode, encoded, fn_output_signature=tf.uint8, parallel_iterations=4)


def _decode_only(examples_dir: str) -> int:
    records = _records(examples_dir)
    for start in range(0, len(records), BATCH_SIZE):
        encoded = [
            tf.train.Example.FromString(r)
            .features.feature[fk.IMAGE_ENCODED_KEY]
            .bytes_list.value[0]
            for r in records[start : start + BATCH_SIZE]
        ]
        _decode_batch(tf.constant(encoded)).numpy()
    return len(records)


def _stats_core(examples_dir: str, options: AnalysisOptions) -> int:
    decoder = BatchDecoder(options.image_size, options.crop_fraction)
    images = 0
    for split in _splits(examples_dir):
        records = _split_records(examples_dir, split)
        split_options = dataclasses.replace(
            options,
            thumbnail_fraction=thumbnail_fraction(examples_dir, options.keep_thumbnails, split),
        )
        batches = [
            records[start : start + BATCH_SIZE] for start in range(0, len(records), BATCH_SIZE)
        ]
        with ThreadPoolExecutor(BATCHES_IN_FLIGHT) as in_flight:  # as AnalyzeBatchFn
            analyze = functools.partial(
                analyze_batch, split=split, decoder=decoder, options=split_options
            )
            for accumulator, _ in in_flight.map(analyze, batches):
                images += accumulator.images
    return images


@contextlib.contextmanager
def _without_strict_library() -> Iterator[None]:
    """The statistics as they run where the strict_jpeg library is not built."""
    library = strict_jpeg.library
    strict_jpeg.library = lambda: None
    try:
        yield
    finally:
        strict_jpeg.library = library


def _stats_core_two_decodes(examples_dir: str, options: AnalysisOptions) -> int:
    with _without_strict_library():
        return _stats_core(examples_dir, options)


def _eval_decode(examples_dir: str, options: AnalysisOptions, histograms: bool) -> int:
    decoder = BatchDecoder(options.image_size, options.crop_fraction)
    encoded = [parse_record(record).encoded for record in _records(examples_dir)]
    chunks = [
        encoded[start : start + DECODE_CHUNK] for start in range(0, len(encoded), DECODE_CHUNK)
    ]

    def reduce(chunk: list[bytes]) -> None:
        pixels = decoder.eval_pixels(chunk)
        if histograms:
            for image in pixels:
                channel_histograms(image)

    with ThreadPoolExecutor(REDUCING_THREADS) as threads:
        for _ in threads.map(reduce, chunks):
            pass
    return len(encoded)


def _stats_beam(examples_dir: str, options: AnalysisOptions) -> int:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    args = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    with tempfile.TemporaryDirectory() as work:
        run = run_statistics(
            examples_dir,
            _splits(examples_dir),
            work,
            options,
            lambda: beam.Pipeline(options=PipelineOptions(args)),
        )
    return sum(a.images for a in run.accumulators.values())


def _one_shard_per_split(examples_dir: str, out: str) -> str:
    """An Examples folder holding the first shard of each split, and the summary with
    those shards' record counts (the statistics check them)."""
    summary = conversion_summary.read(examples_dir)
    splits = {}
    for split in _splits(examples_dir):
        first = sorted(tf.io.gfile.glob(artifacts.split_shard_pattern(examples_dir, split)))[0]
        folder = os.path.join(out, layout.SPLIT_DIR_PREFIX + split)
        tf.io.gfile.makedirs(folder)
        tf.io.gfile.copy(first, os.path.join(folder, os.path.basename(first)))
        records = sum(1 for _ in tf.data.TFRecordDataset(first, artifacts.shard_compression(first)))
        splits[split] = dataclasses.replace(summary.splits[split], records=records)
    conversion_summary.write(out, dataclasses.replace(summary, splits=splits))
    return out


def _timed(fn, *args) -> tuple[int, float]:
    start = time.perf_counter()
    images = fn(*args)
    return images, time.perf_counter() - start


def _rate(fn, *args) -> float:
    images, seconds = _timed(fn, *args)
    return images / seconds


def _rate_and_cpu(fn, *args) -> tuple[float, float]:
    """Images per second, and the process's CPU milliseconds per image."""
    cpu_start = time.process_time()
    images, seconds = _timed(fn, *args)
    return images / seconds, (time.process_time() - cpu_start) * 1e3 / images


def check_cost(examples_dir: str, options: AnalysisOptions, repeats: int) -> dict:
    """The strict check (verify_images) against TensorFlow's decode alone, and against
    the two-decode fallback, interleaved: best images/s and median CPU ms per image."""
    unchecked = dataclasses.replace(options, verify_images=False)
    passes = {
        "strict_decode": lambda: _stats_core(examples_dir, options),
        "unchecked": lambda: _stats_core(examples_dir, unchecked),
        "two_decodes": lambda: _stats_core_two_decodes(examples_dir, options),
    }
    measured: dict[str, list[tuple[float, float]]] = {name: [] for name in passes}
    for _ in range(repeats):
        for name, run_pass in passes.items():
            measured[name].append(_rate_and_cpu(run_pass))
    rates = {name: max(rate for rate, _ in runs) for name, runs in measured.items()}
    cpu = {name: sorted(ms for _, ms in runs)[len(runs) // 2] for name, runs in measured.items()}
    return {
        # Without the library, strict_decode is the two-decode fallback.
        "strict_library_loaded": strict_jpeg.library() is not None,
        "images_per_s": {name: round(rate, 1) for name, rate in rates.items()},
        "cpu_ms_per_image": {name: round(ms, 3) for name, ms in cpu.items()},
        "strict_decode_vs_unchecked": round(rates["strict_decode"] / rates["unchecked"], 3),
        "strict_decode_cpu_vs_unchecked": round(cpu["strict_decode"] / cpu["unchecked"], 3),
        "two_decodes_vs_unchecked": round(rates["two_decodes"] / rates["unchecked"], 3),
        "two_decodes_cpu_vs_unchecked": round(cpu["two_decodes"] / cpu["unchecked"], 3),
    }


def run(
    examples_dir: str,
    image_size: int = DEFAULT_IMAGE_SIZE,
    repeats: int = 3,
    passthrough_dir: str | None = None,
) -> dict:
    """Images per second of each pass, and the ratio the issue targets.

    Args:
      examples_dir: an Examples folder (ImageExampleGen or `imgpipe convert` output).
      image_size: the Trainer's input side.
      repeats: passes of each kind; the best is kept.
      passthrough_dir: the same photos converted pass-through, for the check's cost where
        every crop is resized.
    """
    options = AnalysisOptions(
        image_size=image_size,
        crop_fraction=DEFAULT_CROP_FRACTION,
        keep_thumbnails=StatisticsConfig().sample_thumbnails,
    )
    _decode_only(examples_dir)  # warm-up: tf.function tracing, page cache
    rates: dict[str, list[float]] = {
        "decode_only": [],
        "eval_decode": [],
        "eval_decode_histograms": [],
        "stats_core": [],
        "stats_beam": [],
    }
    beam_seconds: list[float] = []
    small_beam_seconds: list[float] = []
    with tempfile.TemporaryDirectory() as small_dir:
        small = _one_shard_per_split(examples_dir, small_dir)
        for run_index in range(max(repeats, BEAM_REPEATS)):
            if run_index < repeats:
                rates["decode_only"].append(_rate(_decode_only, examples_dir))
                rates["eval_decode"].append(_rate(_eval_decode, examples_dir, options, False))
                rates["eval_decode_histograms"].append(
                    _rate(_eval_decode, examples_dir, options, True)
                )
                rates["stats_core"].append(_rate(_stats_core, examples_dir, options))
            images, seconds = _timed(_stats_beam, examples_dir, options)
            small_images, small_seconds = _timed(_stats_beam, small, options)
            rates["stats_beam"].append(images / seconds)
            beam_seconds.append(seconds)
            small_beam_seconds.append(small_seconds)
    best = {name: max(values) for name, values in rates.items()}
    best_seconds, best_small_seconds = min(beam_seconds), min(small_beam_seconds)
    best["stats_beam_marginal"] = (images - small_images) / (best_seconds - best_small_seconds)
    fixed_cost = max(0.0, best_small_seconds - small_images / best["stats_beam_marginal"])
    check = {"shards_256": check_cost(examples_dir, options, repeats)}
    if passthrough_dir is not None:
        _stats_core(passthrough_dir, options)  # warm-up: page cache
        check["passthrough"] = check_cost(passthrough_dir, options, repeats)
    images = len(_records(examples_dir))
    ratio_bound = (images / best["decode_only"]) / (
        fixed_cost + images / best["eval_decode_histograms"]
    )
    return {
        "images": images,
        "image_size": image_size,
        "decode_only_images_per_s": round(best["decode_only"], 1),
        "stats_core_images_per_s": round(best["stats_core"], 1),
        "stats_images_per_s": round(best["stats_beam"], 1),
        "stats_marginal_images_per_s": round(best["stats_beam_marginal"], 1),
        "ratio": round(best["stats_beam"] / best["decode_only"], 3),
        "marginal_ratio": round(best["stats_beam_marginal"] / best["decode_only"], 3),
        "marginal_target_ratio": MARGINAL_TARGET_RATIO,
        "core_ratio": round(best["stats_core"] / best["decode_only"], 3),
        "target_ratio": TARGET_RATIO,
        "eval_decode_images_per_s": round(best["eval_decode"], 1),
        "eval_decode_histograms_images_per_s": round(best["eval_decode_histograms"], 1),
        "beam_fixed_cost_s": round(fixed_cost, 3),
        "ratio_bound": round(ratio_bound, 3),
        "all_runs_images_per_s": {k: [round(v, 1) for v in vs] for k, vs in rates.items()},
        "beam_seconds": {
            "images": images,
            "small_images": small_images,
            "runs": [round(v, 3) for v in beam_seconds],
            "small_runs": [round(v, 3) for v in small_beam_seconds],
        },
        "check_cost": check,
    }


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1]), indent=2))
