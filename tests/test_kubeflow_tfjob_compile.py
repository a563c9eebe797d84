"""The compiled package of trainer.workers > 1: its Trainer step launches a TFJob
(tests/test_kubeflow_tfjob.py tests the TFJob and its launcher), the golden file of
that package, and the settings it refuses."""

from __future__ import annotations

import os

import pytest

from imgpipe.components.trainer.several_workers import choice

pytestmark = pytest.mark.component


GOLDEN_WORKERS = os.path.join(os.path.dirname(__file__), "golden", "pipeline-workers.yaml")


@pytest.fixture(scope="module")
def compiled_workers():
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines.kubeflow import compiler
    from tests.test_kubeflow_compile import TEST_SETTINGS

    settings = {**TEST_SETTINGS, "trainer": {**TEST_SETTINGS["trainer"], "workers": 2}}
    config = cfg.from_dict(settings)
    spec, platform = compiler.compile_pipeline(config)
    return config, spec, platform, compiler.to_yaml(spec, platform)


def test_the_trainer_step_of_several_workers_launches_a_tfjob_from_its_own_pod(compiled_workers):
    from imgpipe.pipelines import component_ids as ids
    from imgpipe.pipelines.kfp_contract import ARTIFACT_IO_ENV
    from imgpipe.pipelines.kubeflow import compiler

    _, spec, platform, _ = compiled_workers
    labels = compiler.executor_labels(spec)
    executors = spec["deploymentSpec"]["executors"]
    trainer_env = {
        e["name"]: e["value"] for e in executors[labels[ids.TRAINER]]["container"]["env"]
    }
    assert trainer_env[choice.LAUNCHER_ENV] == choice.KUBERNETES
    assert trainer_env[ARTIFACT_IO_ENV] == "direct"  # the workers reach artifacts by URI
    entries = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert entries[labels[ids.TRAINER]]["fieldPathAsEnv"] == [
        {"name": choice.POD_NAME_ENV, "fieldPath": "metadata.name"},
        {"name": choice.POD_NAMESPACE_ENV, "fieldPath": "metadata.namespace"},
    ]
    # kfp-kubernetes' own message reads it (what the KFP backend does with it).
    from google.protobuf import json_format
    from kfp.kubernetes import kubernetes_executor_config_pb2 as pb

    config = json_format.ParseDict(entries[labels[ids.TRAINER]], pb.KubernetesExecutorConfig())
    assert [f.field_path for f in config.field_path_as_env] == [
        "metadata.name",
        "metadata.namespace",
    ]
    # The Trainer alone: every other step as with one worker.
    for task, label in labels.items():
        if task != ids.TRAINER:
            env = {e["name"] for e in executors[label]["container"]["env"]}
            assert choice.LAUNCHER_ENV not in env and "fieldPathAsEnv" not in entries[label]


def test_the_package_of_several_workers_matches_its_golden_file(compiled_workers):
    from tests.test_kubeflow_compile import strip_versions

    text = strip_versions(compiled_workers[3])
    if os.environ.get("IMGPIPE_UPDATE_GOLDEN"):
        with open(GOLDEN_WORKERS, "w") as f:
            f.write(text)
    with open(GOLDEN_WORKERS) as f:
        assert text == f.read(), "compiled YAML changed; IMGPIPE_UPDATE_GOLDEN=1 regenerates"


def test_several_workers_with_local_artifact_copies_are_refused_naming_the_fix():
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines.kubeflow import compiler
    from tests.test_kubeflow_compile import TEST_SETTINGS

    settings = {
        **TEST_SETTINGS,
        "trainer": {**TEST_SETTINGS["trainer"], "workers": 2},
        "kubeflow": {**TEST_SETTINGS["kubeflow"], "artifact_io": "local"},
    }
    with pytest.raises(
        ValueError,
        match=r"^trainer.workers=2 with kubeflow.artifact_io: local: .*; set kubeflow.artifact_io "
        r"to auto or direct, or trainer.workers=1$",
    ):
        compiler.compile_pipeline(cfg.from_dict(settings))
