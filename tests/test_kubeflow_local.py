"""The compiled KFP package under kfp's own local orchestrator: the runner used by
tests/test_retraining.py, which executes one package four times, and the entrypoint's
URI handling.

kfp.local reads the compiled YAML, orders the tasks, builds each task's executor-input
JSON and runs the exact command and arguments of the spec (`python -m
imgpipe.pipelines.container.entrypoint --executor_class_path ... {{$}} ...`) as a subprocess of this
environment instead of in a container. Between tasks it records artifacts the way the
open-source backend does: typed `system.Artifact`, which is breakage 1 of TFX on KFP v2,
so the entrypoint's fixes are on the path. What kfp.local cannot show: object-store
uploads, the Kubernetes platform spec (node selector, tolerations, PVC) and KFP caching.
"""

from __future__ import annotations

import contextlib

import pytest


@contextlib.contextmanager
def subprocess_runner_for_tfx_steps():
    """kfp.local's SubprocessRunner, allowed to run container steps in this environment.

    The fallback for machines with no Docker engine, and for the tests that run a
    package many times: users run a compiled package with `imgpipe kfp run-local`
    (kfp.local's DockerRunner, every step in its image; tests/test_kubeflow_docker.py).
    SubprocessRunner accepts only lightweight Python components (commands that name
    kfp.dsl.executor_main); the check is lifted for the block. The task dispatcher picks
    handlers by runner type, so the runner itself stays kfp's.
    """
    from kfp.local import subprocess_task_handler as handler

    original = handler.SubprocessTaskHandler.validate_not_container_component
    handler.SubprocessTaskHandler.validate_not_container_component = lambda self, cmd: None
    try:
        yield
    finally:
        handler.SubprocessTaskHandler.validate_not_container_component = original


@pytest.mark.unit
@pytest.mark.parametrize("mode", ["auto", "local"])
def test_local_file_uris_are_left_alone(mode):
    from kfp.pipeline_spec import pipeline_spec_pb2

    from imgpipe.pipelines.container import entrypoint

    executor_input = pipeline_spec_pb2.ExecutorInput()
    executor_input.outputs.artifacts["x"].artifacts.add(uri="/tmp/root/task/x")
    assert entrypoint.localize_uris(executor_input, mode) == {}
