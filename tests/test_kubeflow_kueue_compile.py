"""kubeflow.queue_name in the compiled package: the GPU steps' pods carry Kueue's queue
label (kfp-kubernetes' podMetadata, as add_pod_label writes it), and the Trainer step of
several workers is told the queue its job names (tests/test_kubeflow_jobset.py checks the
label on the job itself)."""

from __future__ import annotations

import pytest

from imgpipe.components.common.runtime import kueue
from imgpipe.components.trainer.several_workers import choice

pytestmark = pytest.mark.component

QUEUE = "gpu-queue"


def compile_with(trainer: dict, kubeflow: dict):
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines.kubeflow import compiler
    from tests.test_kubeflow_compile import TEST_SETTINGS

    settings = {
        **TEST_SETTINGS,
        "trainer": {**TEST_SETTINGS["trainer"], **trainer},
        "kubeflow": {**TEST_SETTINGS["kubeflow"], **kubeflow},
    }
    spec, platform = compiler.compile_pipeline(cfg.from_dict(settings))
    labels = compiler.executor_labels(spec)
    entries = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    envs = {
        task: {
            e["name"]: e["value"]
            for e in spec["deploymentSpec"]["executors"][label]["container"]["env"]
        }
        for task, label in labels.items()
    }
    return {task: entries[label] for task, label in labels.items()}, envs


@pytest.fixture(scope="module")
def queued_workers():
    return compile_with({"workers": 2}, {"queue_name": QUEUE})


def test_the_gpu_step_carries_the_queue_label_and_no_other_step_does(queued_workers):
    from google.protobuf import json_format
    from kfp.kubernetes import kubernetes_executor_config_pb2 as pb

    from imgpipe.pipelines import component_ids as ids

    entries, _ = queued_workers
    assert entries[ids.TRAINER]["podMetadata"] == {"labels": {"kueue.x-k8s.io/queue-name": QUEUE}}
    # kfp-kubernetes' own message reads it, as add_pod_label would have written it.
    message = json_format.ParseDict(entries[ids.TRAINER], pb.KubernetesExecutorConfig())
    assert dict(message.pod_metadata.labels) == {kueue.QUEUE_LABEL: QUEUE}
    for task, entry in entries.items():
        if task != ids.TRAINER:  # the data steps request no GPU: Kueue is not asked
            assert "podMetadata" not in entry, task


def test_the_trainer_of_several_workers_is_told_the_queue_its_job_names(queued_workers):
    from imgpipe.pipelines import component_ids as ids

    _, envs = queued_workers
    assert envs[ids.TRAINER][kueue.QUEUE_ENV] == QUEUE
    assert envs[ids.TRAINER][choice.LAUNCHER_ENV] == choice.KUBERNETES
    assert not any(kueue.QUEUE_ENV in env for task, env in envs.items() if task != ids.TRAINER)


def test_without_a_queue_nothing_is_labelled_and_one_worker_is_told_nothing():
    from imgpipe.pipelines import component_ids as ids

    entries, envs = compile_with({"workers": 2}, {})
    assert not any("podMetadata" in entry for entry in entries.values())
    assert not any(kueue.QUEUE_ENV in env for env in envs.values())
    # One worker: the step's pod is queued (a GPU step), no job is launched.
    entries, envs = compile_with({}, {"queue_name": QUEUE})
    assert entries[ids.TRAINER]["podMetadata"]["labels"] == {kueue.QUEUE_LABEL: QUEUE}
    assert kueue.QUEUE_ENV not in envs[ids.TRAINER]
    # No GPU: no step is a GPU step, so none is labelled.
    entries, _ = compile_with({"num_gpus": 0}, {"queue_name": QUEUE})
    assert not any("podMetadata" in entry for entry in entries.values())


def test_the_launcher_is_the_trainers_own_setting_in_the_package():
    """trainer.launcher travels in the Trainer's config (custom_config), which the step
    reads at run time, and is the default of the run parameter `launcher`, which a run
    may set; the rest of the package is the same for both."""
    import json

    from imgpipe.pipelines import component_ids as ids
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines.kubeflow import compiler
    from tests.test_kubeflow_compile import TEST_SETTINGS

    compiled = {}
    for launcher in ("tfjob", "jobset"):
        settings = {**TEST_SETTINGS, "trainer": {**TEST_SETTINGS["trainer"], "workers": 2}}
        settings["trainer"]["launcher"] = launcher
        spec, platform = compiler.compile_pipeline(cfg.from_dict(settings))
        parameter = spec["root"]["inputDefinitions"]["parameters"].pop("launcher")
        assert parameter == {
            "defaultValue": launcher,
            "isOptional": True,
            "parameterType": "STRING",
        }
        trainer = spec["root"]["dag"]["tasks"][ids.TRAINER]["inputs"]["parameters"]
        assert trainer["launcher"] == {"componentInputParameter": "launcher"}
        text = json.dumps([spec, platform], sort_keys=True)
        setting = f'\\"launcher\\": \\"{launcher}\\"'
        assert text.count(setting) == 1, launcher
        compiled[launcher] = text.replace(setting, "")
    assert compiled["tfjob"] == compiled["jobset"]


def test_a_runs_launcher_parameter_overrides_the_config_and_a_bad_one_is_refused(tmp_path):
    """The run parameter `launcher` reaches the Trainer as an execution property, which
    its executor puts in the config run_fn reads; a name that is neither launcher is
    refused before anything runs."""
    from tfx.types import standard_artifacts

    from imgpipe.components.trainer import config as trainer_config
    from imgpipe.components.trainer import executor, spec

    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path)
    inputs = {spec.EXAMPLES_KEY: [examples]}
    settings = executor.run_fn_settings(inputs, {spec.LAUNCHER_KEY: "jobset"})
    assert settings["launcher"] == "jobset"
    custom = {**trainer_config.to_custom_config(trainer_config.TrainerConfig()), **settings}
    assert trainer_config.from_custom_config(custom).launcher == "jobset"
    assert "launcher" not in executor.run_fn_settings(inputs, {spec.LAUNCHER_KEY: None})
    with pytest.raises(
        ValueError, match=r"^launcher 'slurm' is unknown; choose one of tfjob, jobset$"
    ):
        executor.run_fn_settings(inputs, {spec.LAUNCHER_KEY: "slurm"})
