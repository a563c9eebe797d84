"""Deterministic split decisions, from the hash of each file's relative path.

`hash_split` decides each file on its own: the same file lands in the same split on
every run and every runner, and adding images never moves old ones. `stratified_split`
(the default, OutputOptions.stratify) gives every label the requested proportions
exactly, so small classes reach every split; it ranks a label's files by hash, so adding
images to a label can move a few of its files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

_BUCKETS = 10_000


def path_hash(relpath: str, salt: str = "") -> int:
    """A stable 64-bit hash of a path (Python's hash() is salted per process)."""
    digest = hashlib.sha256(f"{salt}\0{relpath}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _boundaries(weights: Sequence[float], total: int) -> list[int]:
    """Cumulative cut points of `total` items or buckets, by weight (largest remainder)."""
    weight_sum = float(sum(weights))
    exact = [w / weight_sum * total for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    cuts, running = [], 0
    for count in counts:
        running += count
        cuts.append(running)
    return cuts


def hash_split(relpath: str, splits: Sequence[tuple[str, float]]) -> str:
    bucket = path_hash(relpath, "split") % _BUCKETS
    cuts = _boundaries([w for _, w in splits], _BUCKETS)
    for (name, _), cut in zip(splits, cuts, strict=True):
        if bucket < cut:
            return name
    return splits[-1][0]


def stratified_split(
    relpaths_by_label: dict[str, list[str]], splits: Sequence[tuple[str, float]]
) -> dict[str, str]:
    """Assigns each label's files to splits in exact proportion, ranked by path hash."""
    decided = {}
    weights = [w for _, w in splits]
    for label in sorted(relpaths_by_label):
        ranked = sorted(relpaths_by_label[label], key=lambda p: (path_hash(p, "split"), p))
        cuts = _boundaries(weights, len(ranked))
        start = 0
        for (name, _), cut in zip(splits, cuts, strict=True):
            for relpath in ranked[start:cut]:
                decided[relpath] = name
            start = cut
    return decided


def shard_of(relpath: str, num_shards: int) -> int:
    return path_hash(relpath, "shard") % num_shards


def order_key(relpath: str, seed: int) -> int:
    """The position of a record within its shard: a seeded shuffle, so no shard is one class."""
    return path_hash(relpath, f"order{seed}")
