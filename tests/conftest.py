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

`make test` runs on TEST_WORKERS pytest-xdist workers: most tests are
one Python thread, so two workers take about half the time on two cores. What must not
share the machine with itself (the engine, platform and container tiers: JVM clusters,
emulators, containers, a 4 to 12 GB cluster each; and the root-only modules that mount,
chroot or signal) is one unit of work, run in order on one worker (pytest_xdist_make_scheduler);
the rest is spread over both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from imgpipe.pipelines.beam_args import DEFAULT_LOCAL_BEAM_ARGS

TIERS = ("unit", "component", "pipeline", "engine", "platform", "container")
CONTAINER_TIER = "container"
# What runs on one xdist worker, one test at a time (the docstring says why): these
# modules. Every test of the tiers below must be in one of them; the collection checks.
ONE_AT_A_TIME = "one-at-a-time"
ONE_AT_A_TIME_TIERS = ("engine", "platform", "container")
ONE_AT_A_TIME_MODULES = (
    # engine, platform and container tiers
    "test_dali.py",
    "test_flink_beam.py",
    "test_flink_cluster.py",
    "test_flink_containers.py",
    "test_image.py",
    "test_kubeflow_docker.py",
    "test_kubeflow_docker_workers.py",
    "test_object_stores.py",
    "test_resume.py",
    "test_serving_folder_stores.py",
    "test_spark_engine.py",
    # root-only: mounts, chroot, signals, cgroups
    "test_in_env.py",
    "test_signals.py",
    "test_free_space.py",
    "test_cpu.py",
)
# Under xdist, the slower tiers (TIERS is in order of cost) are handed out first, so that
# no long test is left to run alone at the end while the other worker idles; of those,
# the container tier runs last, so that the image make test builds in the background
# (tests/containers.py) is built while the engine and platform tiers run.
SLOWEST_TIER_FIRST = ("platform", "engine", CONTAINER_TIER, "pipeline", "component", "unit")
NO_ENGINE_REASON = "NO DOCKER ENGINE"


# pyproject.toml's timeout (900 s) catches a hang in a unit or component test. A whole
# pipeline in containers takes 400 s on a quiet machine and three times that on a busy
# one, and its steps bound themselves (kfp.local waits for each container; the serving
# lease and the collectives time out): these tiers get a hang bound that a busy machine
# does not reach, so that load never fails them.
TIER_TIMEOUT_SECONDS = {"pipeline": 2400, "engine": 2400, "container": 3600}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_the_tiers(items)
    for item in items:
        seconds = TIER_TIMEOUT_SECONDS.get(_tier(item))
        if seconds and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(seconds))
    if hasattr(config, "workerinput"):  # an xdist worker; the sort is stable
        items.sort(key=lambda item: SLOWEST_TIER_FIRST.index(_tier(item)))
    _skip_the_container_tier_without_an_engine(items)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scheduler (the controller sees only test ids): each test is a unit of work,
    except the ONE_AT_A_TIME_MODULES' tests, which are one unit, so one worker runs them
    in turn. (xdist's own --dist loadgroup marks are lost on pytest 9, which no longer
    reads the node id xdist rewrites.)"""
    from tests import plugin_patches

    def together(nodeid: str) -> str | None:
        module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        return ONE_AT_A_TIME if module in ONE_AT_A_TIME_MODULES else None

    return plugin_patches.one_at_a_time_scheduler(config, log, together)


def _tiers(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers() if mark.name in TIERS}


def _tier(item: pytest.Item) -> str:
    (tier,) = _tiers(item)
    return tier


def _check_the_tiers(items: list[pytest.Item]) -> None:
    wrong = []
    for item in items:
        tiers = _tiers(item)
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {sorted(tiers) or 'no tier'}")
        elif tiers & set(ONE_AT_A_TIME_TIERS) and item.path.name not in ONE_AT_A_TIME_MODULES:
            wrong.append(f"{item.nodeid}: {tiers.pop()}, but its module is not listed")
    if wrong:
        raise pytest.UsageError(
            "every test needs exactly one tier marker "
            f"({', '.join(TIERS)}), and one of {', '.join(ONE_AT_A_TIME_TIERS)} only in a "
            "module of ONE_AT_A_TIME_MODULES:\n  " + "\n  ".join(wrong)
        )


def _skip_the_container_tier_without_an_engine(items: list[pytest.Item]) -> None:
    selected = [item for item in items if item.get_closest_marker(CONTAINER_TIER)]
    if not selected:
        return
    from tests import containers

    problem = containers.engine_problem()
    if problem is None:
        return
    reason = (
        f"{NO_ENGINE_REASON} ({problem}): the container tier did not run; run 'make docker-engine'"
    )
    print(
        f"\nimgpipe tests: warning: {len(selected)} container-tier tests SKIPPED: {reason}",
        file=sys.stderr,
    )
    for item in selected:
        item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """The skip banner, from the skip reports: under xdist the workers collect, and only
    their reports reach this process."""
    reasons = [
        report.longrepr[2]
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and NO_ENGINE_REASON in report.longrepr[2]
    ]
    if reasons:
        reason = reasons[0].removeprefix("Skipped: ")
        terminalreporter.write_sep(
            "!", f"{len(reasons)} container-tier tests SKIPPED: {reason}", red=True, bold=True
        )


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
