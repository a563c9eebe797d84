"""How the input pipeline spends RAM: cache or not, shuffle buffer size, tf.data budget.

`plan_memory` is a pure function of byte counts, so the decision is testable and is
logged with its reasons; `available_memory_bytes` is the only part that looks at the
machine.
"""

from __future__ import annotations

import dataclasses
import os

from imgpipe.components.trainer.config import CACHE_AUTO, CACHE_OFF, CACHE_ON

MB = 1 << 20
# tf.data's in-memory cache stores each parsed record in tensors; measured overhead is a
# few percent, rounded up so the decision errs on the side of not caching.
CACHE_OVERHEAD = 1.15
# Share of the budget the cache may take, leaving room for shuffle and prefetch buffers.
CACHE_SHARE = 0.6
SHUFFLE_SHARE = 0.2
MIN_AUTOTUNE_BUDGET = 256 * MB
DEFAULT_BUDGET_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """The input pipeline's use of RAM, with the reason for the cache decision."""

    cache: bool
    shuffle_buffer: int
    autotune_ram_budget: int
    budget_bytes: int
    reason: str
    # The cache holds decoded batches rather than encoded records (EVAL, whose decode is
    # the same every pass): later passes neither decode nor set up the decode function.
    decoded: bool = False


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_memory_bytes() -> int:
    """Memory this process can still use: MemAvailable, capped by a cgroup limit.

    In a Kubernetes pod /proc/meminfo shows the node's memory, so the container's
    cgroup limit (v2 memory.max, or v1 limit_in_bytes) minus its usage is the real bound.
    """
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit_path, usage_path in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        limit = _read_int(limit_path)
        if limit is not None and limit < (1 << 60):
            usage = _read_int(usage_path) or 0
            available = min(available, max(limit - usage, 0))
            break
    return available


def plan_memory(
    encoded_bytes: int,
    records: int,
    available_bytes: int,
    cache: str = CACHE_AUTO,
    ram_budget_bytes: int | None = None,
    shuffle_buffer: int | None = None,
    min_shuffle_buffer: int = 1,
    decoded_bytes: int | None = None,
) -> MemoryPlan:
    """Decides caching, the shuffle buffer (in images) and tf.data's autotune RAM budget.

    Args:
      encoded_bytes: bytes of the split's records, from ImageExampleGen's summary.
      records: records in the split.
      available_bytes: memory this process can use (see available_memory_bytes).
      cache: `auto`, `on` or `off`.
      ram_budget_bytes: the input pipeline's whole budget; None is half of available.
      shuffle_buffer: a fixed buffer in images, or None to size it from the budget.
      min_shuffle_buffer: the smallest useful buffer (a batch).
      decoded_bytes: the split's pixels once decoded, for a split whose decode is the
        same every pass (EVAL); None for one that is augmented (TRAIN). When caching is
        not off and they fit, the cache holds them instead of the encoded records.
    """
    budget = int(
        ram_budget_bytes
        if ram_budget_bytes is not None
        else available_bytes * DEFAULT_BUDGET_FRACTION
    )
    do_cache, cache_bytes, decoded, reason = _cache(
        encoded_bytes, available_bytes, budget, cache, decoded_bytes
    )
    average = max(encoded_bytes // max(records, 1), 1)
    if shuffle_buffer is None:
        shuffle_buffer = int(budget * SHUFFLE_SHARE) // average
        shuffle_buffer = max(min(shuffle_buffer, records), min_shuffle_buffer)
    used = (cache_bytes if do_cache else 0) + shuffle_buffer * average
    autotune = max(budget - used, MIN_AUTOTUNE_BUDGET)
    return MemoryPlan(
        cache=do_cache,
        shuffle_buffer=shuffle_buffer,
        autotune_ram_budget=autotune,
        budget_bytes=budget,
        reason=reason,
        decoded=decoded,
    )


def _cache(
    encoded_bytes: int,
    available_bytes: int,
    budget: int,
    cache: str,
    decoded_bytes: int | None,
) -> tuple[bool, int, bool, str]:
    """Whether to cache, the bytes the cache holds, whether it holds the decoded
    split, and why (plan_memory's arguments)."""
    cache_bytes = int(encoded_bytes * CACHE_OVERHEAD)
    decoded = (
        decoded_bytes is not None and cache != CACHE_OFF and decoded_bytes <= budget * CACHE_SHARE
    )
    if decoded_bytes is not None and decoded:
        do_cache, cache_bytes = True, decoded_bytes
        reason = (
            f"cache on, decoded: the decoded split ({decoded_bytes / MB:.1f} MB) fits in "
            f"{CACHE_SHARE:.0%} of the {budget / MB:.0f} MB input budget "
            f"({available_bytes / MB:.0f} MB available)"
        )
    elif cache == CACHE_AUTO:
        do_cache = cache_bytes <= budget * CACHE_SHARE
        verdict = "fits" if do_cache else "does not fit"
        reason = (
            f"cache {'on' if do_cache else 'off'}: the encoded split "
            f"({cache_bytes / MB:.1f} MB with overhead) {verdict} in "
            f"{CACHE_SHARE:.0%} of the {budget / MB:.0f} MB input budget "
            f"({available_bytes / MB:.0f} MB available)"
        )
    else:
        do_cache = cache == CACHE_ON
        reason = f"cache {'on' if do_cache else 'off'}: set by config"
    return do_cache, cache_bytes, decoded, reason
