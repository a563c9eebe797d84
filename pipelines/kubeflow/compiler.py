"""Compiles the pipeline for Kubeflow Pipelines v2 (KFP 2.x or Vertex AI) as YAML.

KubeflowV2DagRunner writes the PipelineSpec; this module adds what TFX leaves out,
all taken from the one `PipelineConfig` (its `kubeflow` section and the Trainer's GPU count):

- per-component resources (CPU/memory requests and limits) and, for the Trainer with
  num_gpus > 0, the accelerator type and count;
- a Kubernetes platform spec (the second YAML document, as kfp's own compiler and
  kfp-kubernetes write it): every step runs as the image's non-root user with an
  emptyDir on /tmp and the object-store Secret's keys in its environment (security.py),
  GPU steps get their node selector and tolerations, and with kubeflow.queue_name the
  Kueue queue label on their pods, and every step an optional PersistentVolumeClaim
  mount;
- an image per component;
- Beam args for every Beam component (Dataflow, Flink, or a local DirectRunner sized
  to the step's CPU request);
- the project's container entrypoint (kfp_contract.ENTRYPOINT_COMMAND), which fixes
  TFX on open-source KFP v2 (imgpipe/pipelines/container/), with TFX's own arguments;
- with trainer.workers > 1, the Trainer step's launcher of a TFJob or a JobSet
  (trainer.launcher, in the Trainer's own config): its own pod's name and namespace
  from the downward API, artifact I/O direct, the Kueue queue its job names
  (trainer_env);
- the pipeline's output PUSHED_OUTPUT, the Pusher's PushedModel, whose `pushed`
  metadata (1 or 0) tells a scheduler whether the run pushed a model;
- retention (run_folders_env): every step records its run's folder in the pipeline
  root, and the Pusher's step collects at the end of the run.
"""

from __future__ import annotations

import json
import os
from typing import Any

from imgpipe.components.common.runtime import config_loader, kueue
from imgpipe.components.trainer.several_workers import (
    KUBERNETES_LAUNCHER,
    TRAINER_POD_FIELDS,
    WORKERS_LAUNCHER_ENV,
)
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import pipeline as pl
from imgpipe.pipelines import tfx_patches
from imgpipe.pipelines.beam_args import local_beam_args
from imgpipe.pipelines.config import PipelineConfig
from imgpipe.pipelines.kfp_contract import (
    ARTIFACT_IO_ENV,
    ENTRYPOINT_COMMAND,
    MODE_AUTO,
    MODE_DIRECT,
    MODE_LOCAL,
    RUN_FOLDERS_COLLECT,
    RUN_FOLDERS_ENV,
    RUN_FOLDERS_PIPELINE_ROOT,
    RUN_FOLDERS_RETENTION,
    RUN_FOLDERS_SERVING_DIR,
    RUN_FOLDERS_TRAINER_SPANS,
)
from imgpipe.pipelines.kubeflow.config import DEFAULT_IMAGE_KEY, Resources
from imgpipe.pipelines.kubeflow.quantities import cpu_cores, memory_gb
from imgpipe.pipelines.kubeflow.security import (
    OBJECT_STORE_SECRET,
    SECRET_ENV,
    STEP_ENV,
    STEP_SECURITY_CONTEXT,
    TMP_VOLUME,
    WRITABLE_TMP,
    refuse_credentials,
)

# The compiled pipeline's output: the Pusher's `pushed_model` artifact.
PUSHED_OUTPUT = "pushed_model"
PUSHED_OUTPUT_TYPE = {"schemaTitle": "system.Artifact", "schemaVersion": "0.0.1"}


def resource_spec(resources: Resources, accelerator: str | None = None, accelerator_count: int = 0):
    """The ResourceSpec proto kfp's own compiler would write for these settings."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec()
    if resources.cpu_request:
        spec.cpu_request = cpu_cores(resources.cpu_request)
        spec.resource_cpu_request = resources.cpu_request
    if resources.cpu_limit:
        spec.cpu_limit = cpu_cores(resources.cpu_limit)
        spec.resource_cpu_limit = resources.cpu_limit
    if resources.memory_request:
        spec.memory_request = memory_gb(resources.memory_request)
        spec.resource_memory_request = resources.memory_request
    if resources.memory_limit:
        spec.memory_limit = memory_gb(resources.memory_limit)
        spec.resource_memory_limit = resources.memory_limit
    if accelerator and accelerator_count > 0:
        spec.accelerator.type = accelerator
        spec.accelerator.count = accelerator_count
        spec.accelerator.resource_type = accelerator
        spec.accelerator.resource_count = str(accelerator_count)
    return spec


def gpu_count(config: PipelineConfig, component_id: str) -> int:
    """GPUs requested for a component: the Trainer's num_gpus (None requests none)."""
    return (config.trainer.num_gpus or 0) if component_id == ids.TRAINER else 0


def beam_args_for(config: PipelineConfig) -> list[str]:
    """config.beam_args when they name a runner; else Beam in the step's own process.

    In-process, ImageExampleGen and ImageStatistics spread their work over thread pools
    sized to the pod's CPU quota (common/cpu.py). The multi-process DirectRunner was 4-9x
    slower on the same cores (benchmarks/README.md): every worker process starts
    TensorFlow, and every element crosses processes over gRPC.
    """
    return local_beam_args(config.beam_args)


def configure_for_kubeflow(components: list, config: PipelineConfig) -> None:
    """Sets each component's resources and Beam args from the config, by component id."""
    from tfx.dsl.components.base import base_beam_component

    for component in components:
        component.with_platform_config(
            resource_spec(
                config.kubeflow.resources_for(component.id),
                config.kubeflow.gpu.accelerator,
                gpu_count(config, component.id),
            )
        )
        if isinstance(component, base_beam_component.BaseBeamComponent):
            component.with_beam_pipeline_args(beam_args_for(config))


# The prefix of a component's name in a spec the KFP SDK compiles.
COMPONENT_PREFIX = "comp-"


def compile_pipeline(config: PipelineConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Compiles to (pipeline spec, platform spec) dicts.

    Raises:
      ValueError: beam_args carry a credential (security.refuse_credentials).
    """
    refuse_credentials(config.beam_args)
    refuse_unshared_workers(config)
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as v2

    components = pl.create_components(config, parameterized=True)
    configure_for_kubeflow(components, config)
    # Beam args are per component (above); pipeline-level ones would be appended twice.
    pipeline = pl.create_pipeline(config, components=components, beam_pipeline_args=[])
    images = {cid: config.kubeflow.image_for(cid) for cid in ids.COMPONENT_IDS}
    images[tfx_patches.default_image_path_key()] = config.kubeflow.image_for(DEFAULT_IMAGE_KEY)
    runner = v2.KubeflowV2DagRunner(
        config=v2.KubeflowV2DagRunnerConfig(
            display_name=config.pipeline_name,
            default_image=images,
            default_commands=list(ENTRYPOINT_COMMAND),
            # 2.1 passes the inputs spec to the executor: parameters are read from
            # parameter_values (what KFP 2.x fills), and input artifact types are known.
            use_pipeline_spec_2_1=True,
        )
    )
    with tfx_patches.project_artifact_titles():
        job = runner.run(pipeline, write_out=False)
    spec = job["pipelineSpec"]
    name_components_as_the_sdk_does(spec)
    labels = executor_labels(spec)
    for label, executor in spec["deploymentSpec"]["executors"].items():
        container = executor.get("container")
        if container is not None:
            env = {ARTIFACT_IO_ENV: config.kubeflow.artifact_io, **STEP_ENV}
            env.update(run_folders_env(config, collects=label == labels[ids.PUSHER]))
            if label == labels[ids.TRAINER]:
                env.update(trainer_env(config))
            container.setdefault("env", []).extend(
                {"name": name, "value": value} for name, value in env.items()
            )
    # TFX declares the root parameters without their defaults; KFP needs them to run
    # the package with no arguments.
    declared = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    for name, parameter in pl.runtime_parameters(config).items():
        declared[name]["defaultValue"] = parameter.default
        declared[name]["isOptional"] = True
    # KFP's cache key covers parameters and input artifacts, not the files under
    # data_root or serving_dir: a cached ImageExampleGen would never see new images or a
    # new span, a cached ChampionResolver never a newer champion.
    for task in pl.NEVER_CACHED:
        spec["root"]["dag"]["tasks"][task]["cachingOptions"] = {"enableCache": False}
    expose_pushed_model(spec)
    return spec, platform_spec(spec, config)


def refuse_unshared_workers(config: PipelineConfig) -> None:
    """Raises ValueError when trainer.workers > 1 cannot run as a TFJob: its workers
    read the Trainer's inputs and write its model through their URIs, which KFP's local
    artifact copies (artifact_io local) keep on the Trainer pod's own disk."""
    if config.trainer.workers > 1 and config.kubeflow.artifact_io == MODE_LOCAL:
        raise ValueError(
            f"trainer.workers={config.trainer.workers} with kubeflow.artifact_io: "
            f"{MODE_LOCAL}: the Trainer's TFJob or JobSet workers cannot see the pod's local "
            f"artifact copies; set kubeflow.artifact_io to {MODE_AUTO} or {MODE_DIRECT}, or "
            "trainer.workers=1"
        )


def run_folders_env(config: PipelineConfig, collects: bool) -> dict[str, str]:
    """Retention on Kubeflow (pipelines/retention_runs.py): every step records its run's
    folder in the pipeline root; the Pusher's step (`collects`) then collects, with the
    serving folder, the window's reach and the retention settings. Nothing with
    retention.enabled off."""
    if not config.retention.enabled:
        return {}
    document: dict[str, Any] = {RUN_FOLDERS_PIPELINE_ROOT: config.pipeline_root}
    if collects:
        document[RUN_FOLDERS_COLLECT] = {
            RUN_FOLDERS_SERVING_DIR: config.serving_dir,
            RUN_FOLDERS_TRAINER_SPANS: config.trainer.spans,
            RUN_FOLDERS_RETENTION: config_loader.to_dict(config.retention),
        }
    return {RUN_FOLDERS_ENV: json.dumps(document, sort_keys=True)}


def trainer_env(config: PipelineConfig) -> dict[str, str]:
    """The Trainer step's own environment: with trainer.workers > 1, its workers run as
    a TFJob or a JobSet (trainer.launcher; components/trainer/several_workers/
    kubernetes_jobs.py) that reads and writes the artifacts through their URIs (artifact
    I/O direct), and names the Kueue queue kubeflow.queue_name, if any."""
    if config.trainer.workers <= 1:
        return {}
    env = {WORKERS_LAUNCHER_ENV: KUBERNETES_LAUNCHER}
    if config.kubeflow.artifact_io == MODE_AUTO:
        env[ARTIFACT_IO_ENV] = MODE_DIRECT
    if config.kubeflow.queue_name:
        env[kueue.QUEUE_ENV] = config.kubeflow.queue_name
    return env


def expose_pushed_model(spec: dict[str, Any]) -> None:
    """Makes the Pusher's PushedModel the pipeline's output PUSHED_OUTPUT: its `pushed`
    metadata is 1 when the run pushed a model and 0 when it did not."""
    from tfx.types import standard_component_specs as keys

    root = spec["root"]
    # KFP reads a pipeline's outputs by schema title; TFX's types have none (only an
    # instance schema), so the output is declared as KFP's generic artifact.
    root.setdefault("outputDefinitions", {}).setdefault("artifacts", {})[PUSHED_OUTPUT] = {
        "artifactType": dict(PUSHED_OUTPUT_TYPE)
    }
    root["dag"].setdefault("outputs", {}).setdefault("artifacts", {})[PUSHED_OUTPUT] = {
        "artifactSelectors": [
            {"outputArtifactKey": keys.PUSHED_MODEL_KEY, "producerSubtask": ids.PUSHER}
        ]
    }


def name_components_as_the_sdk_does(spec: dict[str, Any]) -> None:
    """Names each component `comp-<task>`, as the KFP SDK does. kfp.local (and the UI)
    strip that prefix for log lines and artifact folders, so TFX's bare names came out
    cut short (`StatisticsGen` as `sticsGen`, `Pusher` as `r`)."""
    renamed = {
        name: name if name.startswith(COMPONENT_PREFIX) else f"{COMPONENT_PREFIX}{name}"
        for name in spec["components"]
    }
    spec["components"] = {renamed[name]: value for name, value in spec["components"].items()}
    for task in spec["root"]["dag"]["tasks"].values():
        task["componentRef"]["name"] = renamed[task["componentRef"]["name"]]


def executor_labels(spec: dict[str, Any]) -> dict[str, str]:
    """Task name (= component id) -> executor label in the compiled spec."""
    tasks = spec["root"]["dag"]["tasks"]
    return {
        name: spec["components"][task["componentRef"]["name"]]["executorLabel"]
        for name, task in tasks.items()
    }


def security_context() -> dict[str, Any]:
    """Every step runs as the image's own user, never as root.

    This is all a KFP 2.16 platform spec can say (kfp-kubernetes' SecurityContext:
    runAsUser, runAsGroup, runAsNonRoot). The backend adds the seccomp profile, no
    privilege escalation and no capabilities; a cluster policy must add the read-only
    root (security.STEP_SECURITY_SOURCES says which and why).
    """
    return dict(STEP_SECURITY_CONTEXT)


def secret_env() -> list[dict[str, Any]]:
    """The object-store Secret's keys as environment variables, optional (kfp-kubernetes'
    use_secret_as_env form): a missing Secret or key leaves the variable unset."""
    return [
        {
            "keyToEnv": [{"envVar": env, "secretKey": key} for key, env in SECRET_ENV.items()],
            "optional": True,
            "secretName": OBJECT_STORE_SECRET,
            "secretNameParameter": {"runtimeValue": {"constant": OBJECT_STORE_SECRET}},
        }
    ]


def platform_spec(spec: dict[str, Any], config: PipelineConfig) -> dict[str, Any]:
    """The Kubernetes platform spec, in the form kfp-kubernetes writes it."""
    gpu = config.kubeflow.gpu
    executors: dict[str, dict[str, Any]] = {}
    for task, label in sorted(executor_labels(spec).items()):
        entry: dict[str, Any] = {
            "securityContext": security_context(),
            "secretAsEnv": secret_env(),
            "emptyDirMounts": [{"volumeName": TMP_VOLUME, "mountPath": WRITABLE_TMP}],
        }
        if config.run_deadline_hours > 0:
            # kfp-kubernetes' set_timeout: the pod's activeDeadlineSeconds. A step that
            # hangs is stopped (SIGTERM, then the grace period): it gives back the serving
            # lease, which would otherwise hold every later run.
            entry["activeDeadlineSeconds"] = str(round(config.run_deadline_hours * 3600))
        if gpu_count(config, task):
            if config.kubeflow.queue_name:
                # kfp-kubernetes' add_pod_label: Kueue admits the pod, where it
                # manages plain pods, from this queue's quota.
                entry["podMetadata"] = {"labels": {kueue.QUEUE_LABEL: config.kubeflow.queue_name}}
            if gpu.node_selector:
                entry["nodeSelector"] = {"labels": dict(gpu.node_selector)}
            if gpu.tolerations:
                entry["tolerations"] = [
                    {
                        k: v
                        for k, v in (
                            ("key", t.key),
                            ("operator", t.operator),
                            ("value", t.value),
                            ("effect", t.effect),
                        )
                        if v
                    }
                    for t in gpu.tolerations
                ]
        if task == ids.TRAINER and config.trainer.workers > 1:
            # The Trainer reads its own pod, which the TFJob is made from and owned by.
            entry["fieldPathAsEnv"] = [
                {"name": name, "fieldPath": path} for name, path in TRAINER_POD_FIELDS.items()
            ]
        if config.kubeflow.pvc_name:
            pvc = config.kubeflow.pvc_name
            entry["pvcMount"] = [
                {
                    "constant": pvc,
                    "mountPath": config.kubeflow.mount_path,
                    "pvcNameParameter": {"runtimeValue": {"constant": pvc}},
                }
            ]
        executors[label] = entry
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": executors}}}}


def to_yaml(spec: dict[str, Any], platform: dict[str, Any]) -> str:
    """The KFP package text: the PipelineSpec, then the platform spec if any."""
    import yaml
    from tfx import version

    header = (
        f"# PIPELINE DEFINITION\n# Name: {spec['pipelineInfo']['name']}\n"
        f"# Compiled from a TFX pipeline (tfx-{version.__version__}) by "
        f"pipelines/kubeflow/compiler.py\n"
    )
    documents = [spec] + ([platform] if platform else [])
    return header + yaml.safe_dump_all(documents, sort_keys=True)


def compile_to_file(config: PipelineConfig, output_path: str) -> str:
    """Compiles and writes the YAML package; returns output_path.

    Raises:
      ValueError: output_path does not end in .yaml/.yml (the kfp client takes YAML).
    """
    from imgpipe.components.common.storage import fileio

    if not output_path.endswith((".yaml", ".yml")):
        raise ValueError(
            f"{output_path}: the kfp client accepts YAML packages; name the output *.yaml"
        )
    spec, platform = compile_pipeline(config)
    parent = os.path.dirname(output_path)
    if parent:
        fileio.makedirs(parent)
    with fileio.open_file(output_path, "w") as f:
        f.write(to_yaml(spec, platform))
    return output_path
