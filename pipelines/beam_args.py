"""The Beam arguments local runs use when the user names no runner."""

from __future__ import annotations

from collections.abc import Sequence

# Beam's DirectRunner in one process. The heavy steps use every core anyway:
# ImageExampleGen converts on a thread pool (its codecs release the GIL). Measured on
# 3,000 photos (benchmarks/README.md), the multi-process mode was 4x slower: each
# worker process starts TensorFlow, and elements cross processes over gRPC. Pass
# --direct_running_mode=multi_processing in beam_args to choose it.
DEFAULT_LOCAL_BEAM_ARGS = ("--direct_running_mode=in_memory", "--direct_num_workers=1")


def local_beam_args(given: Sequence[str]) -> list[str]:
    """`given` when it names a runner; else the in-process DirectRunner, then `given`."""
    if any(arg.startswith("--runner") for arg in given):
        return list(given)
    return list(DEFAULT_LOCAL_BEAM_ARGS) + list(given)
