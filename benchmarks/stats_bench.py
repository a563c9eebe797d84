"""ImageStatistics throughput against decoding the same shards once, in the same process.

Three passes over the shards of one Examples folder, interleaved and repeated (best of
`repeats` each, since other work shares the machine):
  decode_only   read the records, parse them, tf.io.decode_image every image at its
                stored size (batched tf.function, as the statistics do): the floor cost.
  stats_core    the statistics' per-batch work without Beam (analyze_batch).
  stats_beam    the whole statistics run on Beam's DirectRunner (one worker): reading,
                analysis, combine, duplicate search, results written and read back.
The target is stats_beam / decode_only >= 0.8.
"""

from __future__ import annotations

import tempfile
import time

import tensorflow as tf

from components.common import artifacts
from components.common import features as fk
from components.image_statistics.analyze import AnalysisOptions, BatchDecoder, analyze_batch
from components.image_statistics.compute import find_splits, run_statistics, thumbnail_fraction

BATCH = 64
TARGET_RATIO = 0.8


def _records(examples_dir: str) -> list[bytes]:
    records = []
    for split in find_splits(examples_dir):
        files = sorted(tf.io.gfile.glob(artifacts.split_shard_pattern(examples_dir, split)))
        for path in files:
            compression = "GZIP" if path.endswith(artifacts.GZIP_SUFFIX) else ""
            records.extend(r.numpy() for r in tf.data.TFRecordDataset(path, compression))
    return records


@tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
def _decode_batch(encoded: tf.Tensor) -> tf.Tensor:
    def decode(e: tf.Tensor) -> tf.Tensor:
        return tf.reduce_max(tf.io.decode_image(e, channels=3, expand_animations=False))

    return tf.map_fn(decode, encoded, fn_output_signature=tf.uint8, parallel_iterations=4)


def _decode_only(examples_dir: str) -> int:
    records = _records(examples_dir)
    for start in range(0, len(records), BATCH):
        encoded = [tf.train.Example.FromString(r).features.feature[fk.IMAGE_ENCODED_KEY]
                   .bytes_list.value[0] for r in records[start:start + BATCH]]
        _decode_batch(tf.constant(encoded)).numpy()
    return len(records)


def _stats_core(examples_dir: str, options: AnalysisOptions) -> int:
    records = _records(examples_dir)
    decoder = BatchDecoder(options.image_size, options.crop_fraction)
    images = 0
    for start in range(0, len(records), BATCH):
        accumulator, _ = analyze_batch(records[start:start + BATCH], "bench", decoder, options)
        images += accumulator.images
    return images


def _stats_beam(examples_dir: str, options: AnalysisOptions) -> int:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    args = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    with tempfile.TemporaryDirectory() as work:
        run = run_statistics(examples_dir, work, options,
                             lambda: beam.Pipeline(options=PipelineOptions(args)))
    return sum(a.images for a in run.accumulators.values())


def _rate(fn, *args) -> float:
    start = time.perf_counter()
    images = fn(*args)
    return images / (time.perf_counter() - start)


def run(examples_dir: str, image_size: int = 224, repeats: int = 2) -> dict:
    """Images per second of each pass, and the ratio the issue targets.

    Args:
      examples_dir: an Examples folder (ImageExampleGen or `imgpipe convert` output).
      image_size: the Trainer's input side.
      repeats: passes of each kind; the best is kept.
    """
    options = AnalysisOptions(image_size=image_size, crop_fraction=0.875, keep_thumbnails=8,
                              thumbnail_fraction=thumbnail_fraction(examples_dir, 8))
    _decode_only(examples_dir)  # warm-up: tf.function tracing, page cache
    rates: dict[str, list[float]] = {"decode_only": [], "stats_core": [], "stats_beam": []}
    for _ in range(repeats):
        rates["decode_only"].append(_rate(_decode_only, examples_dir))
        rates["stats_core"].append(_rate(_stats_core, examples_dir, options))
        rates["stats_beam"].append(_rate(_stats_beam, examples_dir, options))
    best = {name: max(values) for name, values in rates.items()}
    return {
        "images": len(_records(examples_dir)),
        "image_size": image_size,
        "decode_only_images_per_s": round(best["decode_only"], 1),
        "stats_core_images_per_s": round(best["stats_core"], 1),
        "stats_images_per_s": round(best["stats_beam"], 1),
        "ratio": round(best["stats_beam"] / best["decode_only"], 3),
        "core_ratio": round(best["stats_core"] / best["decode_only"], 3),
        "target_ratio": TARGET_RATIO,
        "all_runs_images_per_s": {k: [round(v, 1) for v in vs] for k, vs in rates.items()},
    }


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1]), indent=2))
