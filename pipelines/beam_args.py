"""The Beam arguments local runs use when the user names no runner."""

from __future__ import annotations

from collections.abc import Sequence

# Beam's DirectRunner in one process. The heavy steps use every core anyway:
# ImageExampleGen converts on a thread pool (its codecs release the GIL). Measured on
# 3,000 photos (benchmarks/README.md), the multi-process mode was 4x slower: each
# worker process starts TensorFlow, and elements cross processes over gRPC. Pass
# --direct_running_mode=multi_processing in beam_args to choose it.
#
# The runner is named, not left to Beam: since 2.6x Beam's DirectRunner first tries the
# Prism runner, which downloads a Prism binary from GitHub at every run (a network call
# where none should be, and another runner where there is one). Its fallback, the FnApi
# runner, is what ran; naming it skips the attempt.
FN_API_RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
DEFAULT_LOCAL_BEAM_ARGS = (
    f"--runner={FN_API_RUNNER}",
    "--direct_running_mode=in_memory",
    "--direct_num_workers=1",
)


def local_beam_args(given: Sequence[str]) -> list[str]:
    """`given` when it names a runner; else the in-process DirectRunner, then `given`."""
    if any(arg.startswith("--runner") for arg in given):
        return list(given)
    return list(DEFAULT_LOCAL_BEAM_ARGS) + list(given)


def unknown_beam_args(args: Sequence[str]) -> list[str]:
    """The arguments Beam's own parser does not know, in order: typos and stray words.

    Parsed as PipelineOptions.get_all_options parses them (the same parser class, every
    registered options class, no abbreviations), so what passes here is what Beam will
    use; Beam has no public call that returns the arguments it does not know.

    Raises:
      ValueError: an option Beam knows, with a value it refuses.
    """
    if not args:  # the common case, without loading Beam (seconds)
        return []
    import argparse

    from imgpipe.pipelines import tfx_patches

    parser = tfx_patches.beam_option_parser()
    try:
        _, unknown = parser.parse_known_args(list(args))
    except argparse.ArgumentError as e:
        raise ValueError(f"Apache Beam option {e}") from None
    return unknown
