"""Compiles the pipeline for Kubeflow Pipelines v2 (KFP 2.x or Vertex AI) as YAML.

KubeflowV2DagRunner writes the PipelineSpec; this module adds what TFX leaves out,
all taken from the one `PipelineConfig`:

- per-component resources (CPU/memory requests and limits) and, for the Trainer with
  num_gpus > 0, the accelerator type and count;
- a Kubernetes platform spec (the second YAML document, as kfp's own compiler and
  kfp-kubernetes write it): node selector and tolerations of GPU steps, and an optional
  PersistentVolumeClaim mount on every step;
- an image per component;
- Beam args for every Beam component (Dataflow, Flink, or a local DirectRunner sized
  to the step's CPU request);
- the project's container entrypoint (`python -m pipelines.kfp_entrypoint`), which
  fixes TFX on open-source KFP v2 (see kfp_entrypoint.py), with TFX's own arguments.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterator
from typing import Any

from pipelines import config as cfg
from pipelines import pipeline as pl
from pipelines.kfp_entrypoint import ARTIFACT_IO_ENV, PROJECT_TITLE_PREFIX

ENTRYPOINT_MODULE = "pipelines.kfp_entrypoint"
ENTRYPOINT_COMMAND = ("python", "-m", ENTRYPOINT_MODULE)

_CPU = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([EPTGMK]i?|)$")
_MEMORY_FACTORS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
                   "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
                   "Ei": 2**60}


def cpu_cores(quantity: str) -> float:
    """A Kubernetes CPU quantity ("2", "1.5", "500m") in cores."""
    match = _CPU.match(quantity.strip())
    if not match:
        raise ValueError(f"CPU quantity must look like 2, 1.5 or 500m, got {quantity!r}")
    value = float(match.group(1))
    return value / 1000 if match.group(2) else value


def memory_gb(quantity: str) -> float:
    """A Kubernetes memory quantity ("8Gi", "512M") in GB (10^9 bytes), as kfp stores it."""
    match = _MEMORY.match(quantity.strip())
    if not match:
        raise ValueError(f"memory quantity must look like 8Gi, 512Mi or 4G, got {quantity!r}")
    return float(match.group(1)) * _MEMORY_FACTORS[match.group(2)] / 1e9


def resource_spec(resources: cfg.Resources, accelerator: str | None = None,
                  accelerator_count: int = 0):
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


def uses_gpu(config: cfg.PipelineConfig, component_id: str) -> bool:
    return component_id == cfg.TRAINER and config.num_gpus > 0


def beam_args_for(config: cfg.PipelineConfig, component_id: str) -> list[str]:
    """config.beam_args, or a local multi-process DirectRunner sized to the CPU request."""
    if config.beam_args:
        return list(config.beam_args)
    request = config.resources_for(component_id).cpu_request
    workers = max(1, math.floor(cpu_cores(request))) if request else 1
    return ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]


def configure_for_kubeflow(components: list, config: cfg.PipelineConfig) -> None:
    """Sets each component's resources and Beam args from the config, by component id."""
    from tfx.dsl.components.base import base_beam_component

    for component in components:
        gpus = config.num_gpus if uses_gpu(config, component.id) else 0
        component.with_platform_config(resource_spec(
            config.resources_for(component.id), config.gpu.accelerator, gpus))
        if isinstance(component, base_beam_component.BaseBeamComponent):
            component.with_beam_pipeline_args(beam_args_for(config, component.id))


@contextlib.contextmanager
def project_artifact_titles() -> Iterator[None]:
    """Compiles custom artifact types whose TYPE_NAME is not a KFP schema title.

    KFP v2 titles are "<namespace>.<Type>"; TFX refuses other custom TYPE_NAMEs. Such
    a type is compiled as "imgpipe.<TYPE_NAME>", which the entrypoint resolves back to
    its class (kfp_entrypoint.custom_class_path).
    """
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    original = compiler_utils.get_artifact_schema

    def get_artifact_schema(artifact_type) -> str:
        name = artifact_type.TYPE_NAME
        if (artifact_type in compiler_utils._SUPPORTED_STANDARD_ARTIFACT_TYPES
                or compiler_utils._SCHEMA_TITLE_RE.fullmatch(name)):
            return original(artifact_type)
        renamed = type(artifact_type.__name__, (artifact_type,),
                       {"TYPE_NAME": PROJECT_TITLE_PREFIX + name})
        return original(renamed)

    compiler_utils.get_artifact_schema = get_artifact_schema
    try:
        yield
    finally:
        compiler_utils.get_artifact_schema = original


def compile_pipeline(config: cfg.PipelineConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Compiles to (pipeline spec, platform spec) dicts; the platform spec may be empty."""
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as v2

    components = pl.create_components(config)
    configure_for_kubeflow(components, config)
    # Beam args are per component (above); pipeline-level ones would be appended twice.
    pipeline = pl.create_pipeline(config, components=components, beam_pipeline_args=[])
    images = {cid: config.image_for(cid) for cid in cfg.COMPONENT_IDS}
    images[v2._DEFAULT_IMAGE_PATH_KEY] = config.image_for(cfg.DEFAULT_IMAGE_KEY)
    runner = v2.KubeflowV2DagRunner(config=v2.KubeflowV2DagRunnerConfig(
        display_name=config.pipeline_name, default_image=images,
        default_commands=list(ENTRYPOINT_COMMAND),
        # 2.1 passes the inputs spec to the executor: parameters are read from
        # parameter_values (what KFP 2.x fills), and input artifact types are known.
        use_pipeline_spec_2_1=True))
    with project_artifact_titles():
        job = runner.run(pipeline, write_out=False)
    spec = job["pipelineSpec"]
    for executor in spec["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container is not None:
            container.setdefault("env", []).append(
                {"name": ARTIFACT_IO_ENV, "value": config.kubeflow.artifact_io})
    # KFP's cache key covers parameters and input artifacts, not the files under
    # data_root: a cached ImageExampleGen would never see new images or a new span.
    spec["root"]["dag"]["tasks"][cfg.EXAMPLE_GEN]["cachingOptions"] = {"enableCache": False}
    return spec, platform_spec(spec, config)


def executor_labels(spec: dict[str, Any]) -> dict[str, str]:
    """Task name (= component id) -> executor label in the compiled spec."""
    tasks = spec["root"]["dag"]["tasks"]
    return {name: spec["components"][task["componentRef"]["name"]]["executorLabel"]
            for name, task in tasks.items()}


def platform_spec(spec: dict[str, Any], config: cfg.PipelineConfig) -> dict[str, Any]:
    """The Kubernetes platform spec, in the form kfp-kubernetes writes it."""
    executors: dict[str, dict[str, Any]] = {}
    for task, label in sorted(executor_labels(spec).items()):
        entry: dict[str, Any] = {}
        if uses_gpu(config, task):
            if config.gpu.node_selector:
                entry["nodeSelector"] = {"labels": dict(config.gpu.node_selector)}
            if config.gpu.tolerations:
                entry["tolerations"] = [
                    {k: v for k, v in (("key", t.key), ("operator", t.operator),
                                       ("value", t.value), ("effect", t.effect)) if v}
                    for t in config.gpu.tolerations]
        if config.kubeflow.pvc_name:
            pvc = config.kubeflow.pvc_name
            entry["pvcMount"] = [{
                "constant": pvc, "mountPath": config.kubeflow.mount_path,
                "pvcNameParameter": {"runtimeValue": {"constant": pvc}}}]
        if entry:
            executors[label] = entry
    if not executors:
        return {}
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": executors}}}}


def to_yaml(spec: dict[str, Any], platform: dict[str, Any]) -> str:
    """The KFP package text: the PipelineSpec, then the platform spec if any."""
    import yaml
    from tfx import version

    header = (f"# PIPELINE DEFINITION\n# Name: {spec['pipelineInfo']['name']}\n"
              f"# Compiled from a TFX pipeline (tfx-{version.__version__}) by "
              f"pipelines/kubeflow_runner.py\n")
    documents = [spec] + ([platform] if platform else [])
    return header + yaml.safe_dump_all(documents, sort_keys=True)


def compile_to_file(config: cfg.PipelineConfig, output_path: str) -> str:
    """Compiles and writes the YAML package; returns output_path.

    Raises:
      ValueError: output_path does not end in .yaml/.yml (the kfp client takes YAML).
    """
    import tensorflow as tf

    if not output_path.endswith((".yaml", ".yml")):
        raise ValueError(f"{output_path}: the kfp client accepts YAML packages; "
                         "name the output *.yaml")
    spec, platform = compile_pipeline(config)
    parent = os.path.dirname(output_path)
    if parent:
        tf.io.gfile.makedirs(parent)
    with tf.io.gfile.GFile(output_path, "w") as f:
        f.write(to_yaml(spec, platform))
    return output_path
