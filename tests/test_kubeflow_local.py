"""The compiled KFP package, executed end to end by kfp's own local orchestrator.

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
import glob
import json
import os
import shutil
import sys

import pytest

from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines import sample_photos
from imgpipe.pipelines.kubeflow import compiler


@contextlib.contextmanager
def subprocess_runner_for_tfx_steps():
    """kfp.local's SubprocessRunner, allowed to run container steps in this environment.

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


@pytest.mark.pipeline
def test_the_compiled_pipeline_runs_under_kfp_local(tmp_path):
    from kfp import components, local

    # The spec's command is `python`: it must be this environment's interpreter.
    assert os.path.realpath(shutil.which("python")) == os.path.realpath(sys.executable)
    data = tmp_path / "images"
    sample_photos.make_dataset(str(data), per_class=12, size=64, classes=["animal", "fruit"])
    config = cfg.from_dict(
        {
            "pipeline_name": "kfp-local-test",
            "data_root": str(data),
            "pipeline_root": str(tmp_path / "unused-root"),
            "serving_dir": str(tmp_path / "serving"),
            "trainer": {
                "image_size": 32,
                "epochs": 1,
                "batch_size": 8,
                "train_steps": 2,
                "eval_steps": 1,
            },
            "example_gen": {
                "output": {"splits": [["train", 0.75], ["eval", 0.25]], "num_shards": 1}
            },
            "beam_args": ["--direct_num_workers=1", "--direct_running_mode=in_memory"],
        }
    )
    package = compiler.compile_to_file(config, str(tmp_path / "pipeline.yaml"))

    pipeline_root = tmp_path / "kfp-root"
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(pipeline_root),
        raise_on_error=True,
    )
    with subprocess_runner_for_tfx_steps():
        components.load_component_from_file(package)()

    # Every step left an executor output with its artifacts' URIs, and the Pusher
    # copied a SavedModel into the serving directory.
    outputs = sorted(glob.glob(str(pipeline_root / "*" / "*" / "executor_output.json")))
    assert len(outputs) == len(ids.COMPONENT_IDS)
    for path in outputs:
        with open(path) as f:
            assert json.load(f)["artifacts"], path
    pushed = glob.glob(str(tmp_path / "serving" / "*" / "saved_model.pb"))
    assert len(pushed) == 1


@pytest.mark.unit
@pytest.mark.parametrize("mode", ["auto", "local"])
def test_local_file_uris_are_left_alone(mode):
    from kfp.pipeline_spec import pipeline_spec_pb2

    from imgpipe.pipelines.container import entrypoint

    executor_input = pipeline_spec_pb2.ExecutorInput()
    executor_input.outputs.artifacts["x"].artifacts.add(uri="/tmp/root/task/x")
    assert entrypoint.localize_uris(executor_input, mode) == {}
