"""Builds the typed statistics (components/common/formats/image_stats.py) from the combined
accumulators. Everything beyond the Trainer's normalization is for people and for the
anomaly checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.images import preprocessing
from imgpipe.components.image_statistics import accumulator as acc
from imgpipe.components.image_statistics.analyze import AnalysisOptions
from imgpipe.components.image_statistics.transforms import DuplicateGroup

PREPROCESSING_FUNCTION = f"{preprocessing.__name__}.{preprocessing.eval_image.__name__}"
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
    "class_means": "Exact per-channel mean of each class's eval_image pixels.",
    "drift": "This data (every split pooled) compared with the data the served model was "
    "trained on: each metric where it is largest, against its threshold in "
    "StatisticsConfig; null when no comparison was asked for.",
}


def _pixel_stats(hist, partials, images: int) -> schema.PixelStats | None:
    moments = acc.exact_moments(hist)
    if moments is None:
        return None
    pixels, mean, std = moments
    weighted = acc.image_weighted_mean(partials, images)
    return schema.PixelStats(
        mean=tuple(mean),
        std=tuple(std),
        pixels_per_channel=pixels,
        image_weighted_mean=tuple(weighted) if weighted is not None else None,
        histogram=tuple(tuple(int(c) for c in channel) for channel in hist),
    )


def _histogram(edges, counts, low=None, high=None) -> schema.Histogram:
    return schema.Histogram(
        edges=tuple(edges), counts=tuple(int(c) for c in counts), min=low, max=high
    )


def _labels(counts: dict[int, int], names: Sequence[str]) -> schema.LabelStats:
    by_name = {name: counts.get(i, 0) for i, name in enumerate(names)}
    present = [n for n in by_name.values() if n]
    missing = tuple(name for name, n in by_name.items() if not n)
    return schema.LabelStats(
        counts=by_name,
        imbalance_ratio=(max(present) / min(present)) if present and not missing else None,
        missing=missing,
        unknown_ids={str(i): n for i, n in sorted(counts.items()) if not 0 <= i < len(names)},
    )


def _files(group: DuplicateGroup) -> tuple[schema.GroupFile, ...]:
    return tuple(schema.GroupFile(split=s, path=p) for s, p in group.files)


def _exact(group: DuplicateGroup) -> schema.ExactGroup:
    return schema.ExactGroup(
        sha256=group.key,
        size=group.size,
        split_counts=dict(group.split_counts),
        files=_files(group),
    )


def _near(group: DuplicateGroup) -> schema.NearGroup:
    return schema.NearGroup(
        dhash=group.key, size=group.size, split_counts=dict(group.split_counts), files=_files(group)
    )


def _split_stats(
    split: str, a: acc.SplitAccumulator, names: Sequence[str], groups: list[DuplicateGroup]
) -> schema.SplitStats:
    exact = [g for g in groups if g.kind == schema.EXACT and dict(g.split_counts).get(split, 0) > 1]
    near = [g for g in groups if g.kind == schema.NEAR and dict(g.split_counts).get(split, 0) > 1]
    return schema.SplitStats(
        images=a.images,
        undecodable=a.failed,
        undecodable_files=tuple(schema.FileReason(path=p, reason=r) for p, r in a.failures),
        pixels=_pixel_stats(a.pixel_hist, a.image_mean_partials, a.images),
        native_pixels=_pixel_stats(a.native_hist, a.native_image_mean_partials, a.native_images),
        sizes=schema.Sizes(
            width=_histogram(acc.SIDE_EDGES, a.width_hist, a.min_width, a.max_width),
            height=_histogram(acc.SIDE_EDGES, a.height_hist, a.min_height, a.max_height),
            aspect_ratio=_histogram(acc.ASPECT_EDGES, a.aspect_hist),
        ),
        bytes=schema.ByteStats(
            edges=tuple(acc.BYTES_EDGES),
            counts=tuple(int(c) for c in a.bytes_hist),
            total=a.bytes_total,
            mean=a.bytes_total / a.images if a.images else None,
        ),
        formats=dict(sorted(a.formats.items())),
        channels={str(k): v for k, v in sorted(a.channels.items())},
        color_modes=dict(sorted(a.modes.items())),
        labels=_labels(a.labels, names),
        duplicates=schema.Duplicates(
            groups=len(exact),
            redundant_images=sum(dict(g.split_counts)[split] - 1 for g in exact),
            examples=tuple(_exact(g) for g in exact[:MAX_LISTED_GROUPS]),
        ),
        near_duplicates=schema.NearDuplicates(
            groups=len(near), examples=tuple(_near(g) for g in near[:MAX_LISTED_GROUPS])
        ),
        thumbnails={
            label_name(label, names): tuple(t.path for t in kept)
            for label, kept in sorted(a.thumbnails.items())
        },
        class_means={
            label_name(label, names): _class_mean(sums)
            for label, sums in sorted(a.class_sums.items())
        },
    )


def _class_mean(sums) -> schema.ClassMean:
    pixels, *channel_sums = (int(v) for v in sums)
    return schema.ClassMean(
        mean=tuple(total / pixels for total in channel_sums), pixels_per_channel=pixels
    )


def label_name(label: int, names: Sequence[str]) -> str:
    return names[label] if 0 <= label < len(names) else f"id {label}"


def _leakage(
    splits: list[str], run_groups: list[DuplicateGroup], images: dict[str, int], threshold: float
) -> schema.Leakage:
    leaks = [g for g in run_groups if g.kind == schema.EXACT and len(g.split_counts) > 1]
    by_split = {split: sum(dict(g.split_counts).get(split, 0) for g in leaks) for split in splits}
    return schema.Leakage(
        groups=len(leaks),
        images_by_split=by_split,
        fraction_by_split={s: (by_split[s] / images[s] if images[s] else 0.0) for s in splits},
        threshold=threshold,
        examples=tuple(_exact(g) for g in leaks[:MAX_LISTED_GROUPS]),
    )


def build_stats(
    *,
    splits: list[str],
    accumulators: dict[str, acc.SplitAccumulator],
    groups: list[DuplicateGroup],
    labels: Sequence[str],
    options: AnalysisOptions,
    examples_uri: str,
    skipped: int,
    leakage_threshold: float,
) -> schema.ImageStats:
    """The statistics, without anomalies (see anomalies.check).

    Args:
      skipped: how many files ImageExampleGen skipped.
    """
    decoded = sum(a.images for a in accumulators.values())
    undecodable = sum(a.failed for a in accumulators.values())
    considered = decoded + undecodable + skipped
    return schema.ImageStats(
        version=schema.SCHEMA_VERSION,
        preprocessing=schema.Preprocessing(
            image_size=options.image_size,
            crop_fraction=options.crop_fraction,
            function=PREPROCESSING_FUNCTION,
            description=f"center crop keeping {options.crop_fraction} of the shorter side, "
            f"bilinear resize to {options.image_size}x{options.image_size}, "
            "rounded to uint8 RGB",
        ),
        notes=dict(NOTES),
        labels=tuple(labels),
        source=schema.Source(
            examples_uri=examples_uri,
            images_decoded=decoded,
            undecodable=undecodable,
            skipped_by_example_gen=skipped,
            supported_fraction=decoded / considered if considered else 0.0,
            native_resolution=options.native_resolution,
        ),
        splits={
            split: _split_stats(split, accumulators[split], labels, groups) for split in splits
        },
        leakage=_leakage(
            splits, groups, {s: a.images for s, a in accumulators.items()}, leakage_threshold
        ),
    )
