"""Shared fixtures, and the test tiers.

Every test belongs to exactly one tier, marked with its pytest marker:
  unit       pure functions, parsing, configuration, structure: no Beam run, no training
  component  one component's library or executor on tiny data: Beam runs, training,
             exporting, compiling the pipeline
  pipeline   a whole pipeline on a runner (LocalDagRunner, kfp.local)
  engine     the Beam steps on real distributed engines (a Flink and a Spark cluster
             started on this machine)
  platform   what production runs on: object-store emulators and NVIDIA DALI's readers
             (the Kubeflow backend's own compiler cannot be fetched here: k8s/README.md)
  container  the built image under Docker: kfp.local's DockerRunner, Flink in containers
             (tests/containers.py finds the engine and the image `make image` built).
             Where no Docker engine answers, the tier is skipped, loudly: a line on
             stderr at collection and at the end, and the reason in the skip summary.
`make test-fast` runs the unit tier; `make test` runs them all. A test with no tier, or
with two, fails the collection, so the tiers cannot drift.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from imgpipe.pipelines.beam_args import DEFAULT_LOCAL_BEAM_ARGS

TIERS = ("unit", "component", "pipeline", "engine", "platform", "container")
CONTAINER_TIER = "container"
_NO_ENGINE_KEY = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = []
    for item in items:
        tiers = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {sorted(tiers) or 'no tier'}")
    if wrong:
        raise pytest.UsageError(
            "every test needs exactly one tier marker "
            f"({', '.join(TIERS)}):\n  " + "\n  ".join(wrong)
        )
    _skip_the_container_tier_without_an_engine(config, items)


def _skip_the_container_tier_without_an_engine(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    selected = [item for item in items if item.get_closest_marker(CONTAINER_TIER)]
    if not selected:
        return
    from tests import containers

    problem = containers.engine_problem()
    if problem is None:
        return
    reason = (
        f"NO DOCKER ENGINE ({problem}): the container tier did not run; run 'make docker-engine'"
    )
    config.stash[_NO_ENGINE_KEY] = f"{len(selected)} container-tier tests SKIPPED: {reason}"
    print(f"\nimgpipe tests: warning: {config.stash[_NO_ENGINE_KEY]}", file=sys.stderr)
    for item in selected:
        item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if _NO_ENGINE_KEY in config.stash:
        terminalreporter.write_sep("!", config.stash[_NO_ENGINE_KEY], red=True, bold=True)


@pytest.fixture(scope="session")
def beam_args() -> list[str]:
    """Beam args that run a pipeline in this process, as local runs do."""
    return list(DEFAULT_LOCAL_BEAM_ARGS)


@pytest.fixture(scope="session")
def make_pipeline(beam_args) -> Callable:
    """Returns a function that makes an in-process Beam pipeline, as executors' are made."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    return lambda: beam.Pipeline(options=PipelineOptions(beam_args))
