"""Deterministic split decisions, from the hash of each file's split key.

A flat layout's split key is, by OutputOptions.split_by:
- `content` (the default): the SHA-256 of the image bytes. Byte-identical files share
  it, so every copy lands in the same split, whatever its path, and exact train/eval
  leakage cannot happen. The key is known only once the file is read, so the decision
  is made inside the conversion's Beam pipeline (split_assignment.py).
- `path`: the relative path. It is decided at listing, before any file is read, but
  two copies of one image at two paths can land in two splits.

`hash_split` decides each key on its own: adding images never moves old ones.
`stratified_split` (the default, OutputOptions.stratify) gives every label the
requested proportions exactly, so small classes reach every split: a label's keys are
ranked by hash and cut in proportion, so adding images to a label can move a few of its
files. Either way the same key gets the same split on every run and every runner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

_BUCKETS = 10_000

# A label's cut points: the hash where each split but the last ends (None: it takes
# every remaining key). Keys hashing below cut i, and not below an earlier cut, go
# to split i. This is all the Beam pipeline needs to decide a stratified split.
CutPoints = tuple[int | None, ...]


def path_hash(relpath: str, salt: str = "") -> int:
    """A stable 64-bit hash of a path (Python's hash() is salted per process)."""
    digest = hashlib.sha256(f"{salt}\0{relpath}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def split_hash(key: str) -> int:
    """The hash a split key (a relative path, or a content SHA-256) is ranked by."""
    return path_hash(key, "split")


def split_counts(weights: Sequence[float], total: int) -> list[int]:
    """How many of `total` items each split gets: exact proportions, largest remainder
    first, and at least one item in every split when there are as many items as splits
    (so a class of 3 images still reaches both train and eval)."""
    weight_sum = float(sum(weights))
    exact = [w / weight_sum * total for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    if total >= len(weights):
        for empty in [i for i, count in enumerate(counts) if count == 0]:
            largest = max(range(len(counts)), key=lambda i: (counts[i], -i))
            counts[largest] -= 1
            counts[empty] += 1
    return counts


def _boundaries(weights: Sequence[float], total: int) -> list[int]:
    """Cumulative cut points of `total` items or buckets, by weight."""
    cuts, running = [], 0
    for count in split_counts(weights, total):
        running += count
        cuts.append(running)
    return cuts


def hash_split(key: str, splits: Sequence[tuple[str, float]]) -> str:
    """The split of one key on its own: a hash bucket, by the splits' weights."""
    bucket = split_hash(key) % _BUCKETS
    cuts = _boundaries([w for _, w in splits], _BUCKETS)
    for (name, _), cut in zip(splits, cuts, strict=True):
        if bucket < cut:
            return name
    return splits[-1][0]


def cut_points(hashes: Iterable[int], weights: Sequence[float]) -> CutPoints:
    """One label's cut points, from the split hashes of its keys.

    Equal hashes (copies of one image) count once: they are one item, and go to one split.
    """
    ranked = sorted(set(hashes))
    cuts = _boundaries(weights, len(ranked))
    return tuple(ranked[cut] if cut < len(ranked) else None for cut in cuts[:-1])


def split_at(hash_value: int, cuts: CutPoints, names: Sequence[str]) -> str:
    """The split of a key with this hash, given its label's cut points."""
    for name, cut in zip(names, cuts, strict=False):
        if cut is None or hash_value < cut:
            return name
    return names[-1]


def stratified_split(
    keys_by_label: Mapping[str, Iterable[str]], splits: Sequence[tuple[str, float]]
) -> dict[str, str]:
    """Assigns each label's keys to splits in exact proportion, ranked by hash."""
    names = [name for name, _ in splits]
    weights = [w for _, w in splits]
    decided = {}
    for label in sorted(keys_by_label):
        hashes = {key: split_hash(key) for key in keys_by_label[label]}
        cuts = cut_points(hashes.values(), weights)
        for key, hash_value in hashes.items():
            decided[key] = split_at(hash_value, cuts, names)
    return decided


def shard_of(relpath: str, num_shards: int) -> int:
    return path_hash(relpath, "shard") % num_shards


def order_key(relpath: str, seed: int) -> int:
    """The position of a record within its shard: a seeded shuffle, so no shard is one class."""
    return path_hash(relpath, f"order{seed}")
