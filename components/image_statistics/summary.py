"""Builds image_stats.json from the combined accumulators.

Schema, version 1 (load_normalization in components/common/artifacts.py reads
`version`, `preprocessing` and `splits.<split>.pixels.{mean,std}`; everything else is
for people and for the anomaly checks):

  version                 1
  preprocessing           {image_size, crop_fraction, function, description}
  notes                   {field: why it is computed the way it is}
  labels                  class names in id order (from ImageExampleGen's label map)
  source                  {examples_uri, skipped_by_example_gen, supported_fraction, ...}
  splits.<split>
    images, undecodable, undecodable_files[{path, reason}]
    pixels                {mean, std, image_weighted_mean, pixels_per_channel, histogram}
                          exact, over eval_image pixels, 0..255 scale, RGB order
    native_pixels         the same at the stored size, or null when not computed
    sizes                 {width, height, aspect_ratio}: {edges, counts, min, max}
    bytes                 {edges, counts, total, mean}
    formats, channels, color_modes   {value: count}
    labels                {counts {name: n}, imbalance_ratio, missing [names], unknown_ids}
    duplicates            {groups, redundant_images, examples [{sha256, size, files}]}
    near_duplicates       {groups, examples [{dhash, size, files}]}
    thumbnails            {label: [paths]} (the pictures themselves are in report.html)
  leakage                 {groups, images_by_split, fraction_by_split, threshold,
                           examples [{sha256, size, split_counts, files [{split, path}]}]}
  anomalies               [{code, split, message}]
Histogram `edges` are bin lower bounds; the last bin has no upper bound.
"""

from __future__ import annotations

from typing import Any

from components.image_statistics import accumulator as acc
from components.image_statistics.analyze import AnalysisOptions
from components.image_statistics.transforms import DuplicateGroup

SCHEMA_VERSION = 1
PREPROCESSING_FUNCTION = "components.common.preprocessing.eval_image"
MAX_LISTED_GROUPS = 100

NOTES = {
    "pixels": "Exact per-channel mean and population std over every pixel the model sees "
              "(eval_image: center crop, bilinear resize, rounded to uint8), from integer "
              "histograms merged across workers; the Trainer normalizes with these.",
    "image_weighted_mean": "The mean of per-image means. At the Trainer's resolution every "
                           "image has image_size**2 pixels, so it equals the pixel-weighted "
                           "mean up to float rounding. It differs at the stored size "
                           "(native_pixels), where small images weigh as much as large "
                           "ones, and when per-worker means are averaged with unequal "
                           "image counts: that is the bias of a 'mean of means'.",
    "native_pixels": "Only with native_resolution: pixels decoded at the stored size, "
                     "without crop or resize (null otherwise).",
    "duplicates": "Exact duplicates share the SHA-256 of the source file; near duplicates "
                  "share the 64-bit difference hash of the eval image but not the content.",
    "leakage": "Images whose content is in more than one split: evaluation on them "
               "measures memory, not generalization.",
}


def _pixel_stats(hist, partials, images: int) -> dict[str, Any] | None:
    moments = acc.exact_moments(hist)
    if moments is None:
        return None
    pixels, mean, std = moments
    return {"mean": mean, "std": std, "pixels_per_channel": pixels,
            "image_weighted_mean": acc.image_weighted_mean(partials, images),
            "histogram": [[int(c) for c in channel] for channel in hist]}


def _histogram(edges, counts, low=None, high=None) -> dict[str, Any]:
    return {"edges": list(edges), "counts": [int(c) for c in counts], "min": low, "max": high}


def _labels(counts: dict[int, int], names: list[str]) -> dict[str, Any]:
    by_name = {name: counts.get(i, 0) for i, name in enumerate(names)}
    present = [n for n in by_name.values() if n]
    missing = [name for name, n in by_name.items() if not n]
    return {
        "counts": by_name,
        "imbalance_ratio": (max(present) / min(present)) if present and not missing else None,
        "missing": missing,
        "unknown_ids": {str(i): n for i, n in sorted(counts.items())
                        if not 0 <= i < len(names)},
    }


def _group_json(group: DuplicateGroup) -> dict[str, Any]:
    key_name = "sha256" if group.kind == "exact" else "dhash"
    return {key_name: group.key, "size": group.size,
            "split_counts": dict(group.split_counts),
            "files": [{"split": s, "path": p} for s, p in group.files]}


def _split_json(split: str, a: acc.SplitAccumulator, names: list[str],
                groups: list[DuplicateGroup]) -> dict[str, Any]:
    exact = [g for g in groups if g.kind == "exact" and dict(g.split_counts).get(split, 0) > 1]
    near = [g for g in groups if g.kind == "near" and dict(g.split_counts).get(split, 0) > 1]
    return {
        "images": a.images,
        "undecodable": a.failed,
        "undecodable_files": [{"path": p, "reason": r} for p, r in a.failures],
        "pixels": _pixel_stats(a.pixel_hist, a.image_mean_partials, a.images),
        "native_pixels": _pixel_stats(a.native_hist, a.native_image_mean_partials,
                                      a.native_images),
        "sizes": {
            "width": _histogram(acc.SIDE_EDGES, a.width_hist, a.min_width, a.max_width),
            "height": _histogram(acc.SIDE_EDGES, a.height_hist, a.min_height, a.max_height),
            "aspect_ratio": _histogram(acc.ASPECT_EDGES, a.aspect_hist),
        },
        "bytes": {**_histogram(acc.BYTES_EDGES, a.bytes_hist), "total": a.bytes_total,
                  "mean": a.bytes_total / a.images if a.images else None},
        "formats": dict(sorted(a.formats.items())),
        "channels": {str(k): v for k, v in sorted(a.channels.items())},
        "color_modes": dict(sorted(a.modes.items())),
        "labels": _labels(a.labels, names),
        "duplicates": {
            "groups": len(exact),
            "redundant_images": sum(dict(g.split_counts)[split] - 1 for g in exact),
            "examples": [_group_json(g) for g in exact[:MAX_LISTED_GROUPS]],
        },
        "near_duplicates": {
            "groups": len(near),
            "examples": [_group_json(g) for g in near[:MAX_LISTED_GROUPS]],
        },
        "thumbnails": {label_name(label, names): [t.path for t in kept]
                       for label, kept in sorted(a.thumbnails.items())},
    }


def label_name(label: int, names: list[str]) -> str:
    return names[label] if 0 <= label < len(names) else f"id {label}"


def _leakage(splits: list[str], run_groups: list[DuplicateGroup],
             images: dict[str, int], threshold: float) -> dict[str, Any]:
    leaks = [g for g in run_groups if g.kind == "exact" and len(g.split_counts) > 1]
    by_split = {split: sum(dict(g.split_counts).get(split, 0) for g in leaks)
                for split in splits}
    return {
        "groups": len(leaks),
        "images_by_split": by_split,
        "fraction_by_split": {s: (by_split[s] / images[s] if images[s] else 0.0)
                              for s in splits},
        "threshold": threshold,
        "examples": [_group_json(g) for g in leaks[:MAX_LISTED_GROUPS]],
    }


def build_stats(
    *,
    splits: list[str],
    accumulators: dict[str, acc.SplitAccumulator],
    groups: list[DuplicateGroup],
    labels: list[str],
    options: AnalysisOptions,
    examples_uri: str,
    skipped: list[dict[str, str]],
    leakage_threshold: float,
) -> dict[str, Any]:
    """The image_stats.json document, without anomalies (see anomalies.check)."""
    decoded = sum(a.images for a in accumulators.values())
    undecodable = sum(a.failed for a in accumulators.values())
    considered = decoded + undecodable + len(skipped)
    return {
        "version": SCHEMA_VERSION,
        "preprocessing": {
            "image_size": options.image_size,
            "crop_fraction": options.crop_fraction,
            "function": PREPROCESSING_FUNCTION,
            "description": f"center crop keeping {options.crop_fraction} of the shorter side, "
                           f"bilinear resize to {options.image_size}x{options.image_size}, "
                           "rounded to uint8 RGB",
        },
        "notes": NOTES,
        "labels": labels,
        "source": {
            "examples_uri": examples_uri,
            "images_decoded": decoded,
            "undecodable": undecodable,
            "skipped_by_example_gen": len(skipped),
            "supported_fraction": decoded / considered if considered else 0.0,
            "native_resolution": options.native_resolution,
        },
        "splits": {split: _split_json(split, accumulators[split], labels, groups)
                   for split in splits},
        "leakage": _leakage(splits, groups, {s: a.images for s, a in accumulators.items()},
                            leakage_threshold),
        "anomalies": [],
    }
