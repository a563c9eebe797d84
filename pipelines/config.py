"""One pipeline configuration for every runner, loadable from YAML.

The local runner and the Kubeflow runner read the same `PipelineConfig`: paths, model
and training settings, the GPU count, per-component resources, GPU scheduling, images
and Beam args are defined here once. Example YAML (every key optional):

    pipeline_name: flowers
    data_root: gs://bucket/flowers/span-{SPAN}
    pipeline_root: gs://bucket/tfx-root
    serving_dir: gs://bucket/serving/flowers
    num_gpus: 1
    model: {backbone: mobilenet_v3_small, image_size: 224, epochs: 5, batch_size: 64}
    data: {resize: 256, center_crop: true, eval_fraction: 0.1}
    resources:
      ImageExampleGen: {cpu_request: "4", memory_request: 8Gi}
    gpu:
      accelerator: nvidia.com/gpu
      node_selector: {cloud.google.com/gke-accelerator: nvidia-tesla-t4}
    images: {default: registry/app:1.0, Trainer: registry/app-gpu:1.0}
    beam_args: [--runner=FlinkRunner, --flink_master=flink:8081]
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from typing import Any

from pipelines import images

# Component ids, spelled once: pipeline.py names the components with these, and the
# Kubeflow runner keys images, resources and GPU settings by them.
EXAMPLE_GEN = "ImageExampleGen"
STATISTICS_GEN = "StatisticsGen"
SCHEMA_GEN = "SchemaGen"
EXAMPLE_VALIDATOR = "ExampleValidator"
IMAGE_STATISTICS = "ImageStatistics"
TRAINER = "Trainer"
EVALUATOR = "Evaluator"
PUSHER = "Pusher"
COMPONENT_IDS = (EXAMPLE_GEN, STATISTICS_GEN, SCHEMA_GEN, EXAMPLE_VALIDATOR,
                 IMAGE_STATISTICS, TRAINER, EVALUATOR, PUSHER)
# The key of `images` for components without their own entry.
DEFAULT_IMAGE_KEY = "default"

# How the Kubeflow entrypoint reaches artifact URIs (see pipelines/kfp_entrypoint.py).
ARTIFACT_IO_AUTO = "auto"
ARTIFACT_IO_DIRECT = "direct"
ARTIFACT_IO_LOCAL = "local"

# Beam's DirectRunner in one process. The heavy steps use every core anyway:
# ImageExampleGen converts on a thread pool (its codecs release the GIL). Measured on
# 3,000 photos (README, Performance), the multi-process mode was 4x slower: each
# worker process starts TensorFlow, and elements cross processes over gRPC. Pass
# --direct_running_mode=multi_processing in beam_args to choose it.
DEFAULT_LOCAL_BEAM_ARGS = ("--direct_running_mode=in_memory", "--direct_num_workers=1")


@dataclasses.dataclass(frozen=True)
class Resources:
    """Kubernetes-style quantities ("2", "500m", "8Gi"); None leaves a value unset."""

    cpu_request: str | None = None
    memory_request: str | None = None
    cpu_limit: str | None = None
    memory_limit: str | None = None


@dataclasses.dataclass(frozen=True)
class Toleration:
    key: str
    operator: str = "Exists"
    value: str | None = None
    effect: str = "NoSchedule"


@dataclasses.dataclass(frozen=True)
class GpuConfig:
    """How GPU steps are scheduled: the accelerator resource, and the GPU node pool.

    The defaults match NVIDIA's GPU operator labels and the taint that managed GPU
    node pools carry (k8s/gpu-node-pool.yaml shows both).
    """

    accelerator: str = "nvidia.com/gpu"
    node_selector: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"nvidia.com/gpu.present": "true"})
    tolerations: tuple[Toleration, ...] = (
        Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The Trainer's and Evaluator's settings.

    Attributes:
      backbone: a keras.applications backbone name known to the trainer.
      image_size: square input size of the model.
      epochs: passes over the training split.
      batch_size: global batch size.
      train_steps: TFX TrainArgs.num_steps; None lets epochs decide.
      eval_steps: TFX EvalArgs.num_steps; None evaluates the whole eval split.
      accuracy_threshold: the Evaluator blesses the model at or above this accuracy.
      mixed_precision: "auto" (on with a GPU), "on" or "off".
    """

    backbone: str = "mobilenet_v3_small"
    image_size: int = 224
    epochs: int = 5
    batch_size: int = 32
    train_steps: int | None = None
    eval_steps: int | None = None
    accuracy_threshold: float = 0.0
    mixed_precision: str = "auto"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """ImageExampleGen's settings (see components/image_example_gen/options.py)."""

    resize: int | None = None
    center_crop: bool = False
    eval_fraction: float = 0.1
    stratify: bool = True
    num_shards: int | None = None
    on_error: str = "skip"


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
    """Kubeflow-only settings.

    Attributes:
      pvc_name: a PersistentVolumeClaim mounted into every step (k8s/storage.yaml),
        for data_root/pipeline_root/serving_dir on a shared volume; None mounts nothing.
      mount_path: where the claim is mounted.
      artifact_io: how the entrypoint reaches artifacts: "local" through the paths the
        KFP launcher downloads to and uploads from, "direct" through the URI, "auto"
        local only for schemes TensorFlow cannot open (minio://, s3://).
      service_account: the Kubernetes service account runs use (k8s/rbac.yaml).
    """

    pvc_name: str | None = None
    mount_path: str = "/mnt/imgpipe"
    artifact_io: str = ARTIFACT_IO_AUTO
    service_account: str = "imgpipe-runner"


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """Everything `create_pipeline` and the runners need, for every runner.

    Attributes:
      pipeline_name: the TFX pipeline (and KFP pipeline) name.
      data_root: the image folder; may hold {SPAN}/{VERSION} patterns.
      pipeline_root: where TFX writes artifacts.
      serving_dir: where Pusher copies a blessed model.
      metadata_path: the local runner's SQLite MLMD file; default under pipeline_root.
      num_gpus: GPUs for the Trainer (0 trains on CPU; on Kubeflow, >0 requests them).
      resources: per-component requests and limits, by component id.
      gpu: accelerator type, node selector and tolerations of GPU steps.
      images: container image per component id; DEFAULT_IMAGE_KEY for the rest.
      beam_args: Beam pipeline args (e.g. Dataflow or Flink); empty runs Beam locally.
      enable_cache: reuse results of unchanged inputs.
    """

    pipeline_name: str = "image-classifier"
    data_root: str = ""
    pipeline_root: str = "/tmp/imgpipe/pipeline-root"
    serving_dir: str = "/tmp/imgpipe/serving"
    metadata_path: str | None = None
    num_gpus: int = 0
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    resources: Mapping[str, Resources] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_RESOURCES))
    gpu: GpuConfig = dataclasses.field(default_factory=GpuConfig)
    images: Mapping[str, str] = dataclasses.field(default_factory=lambda: {
        DEFAULT_IMAGE_KEY: images.RUNTIME_IMAGE, TRAINER: images.GPU_IMAGE})
    beam_args: tuple[str, ...] = ()
    kubeflow: KubeflowConfig = dataclasses.field(default_factory=KubeflowConfig)
    enable_cache: bool = True

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if not self.pipeline_name or not all(c.isalnum() or c in "-_" for c in
                                             self.pipeline_name):
            raise ValueError(f"pipeline_name must be letters, digits, '-' or '_', "
                             f"got {self.pipeline_name!r}")
        for name in ("pipeline_root", "serving_dir"):
            if not getattr(self, name):
                raise ValueError(f"{name} must be set")
        if self.num_gpus < 0:
            raise ValueError(f"num_gpus must be 0 or more, got {self.num_gpus}")
        unknown = sorted(set(self.resources) - set(COMPONENT_IDS))
        unknown += sorted(set(self.images) - set(COMPONENT_IDS) - {DEFAULT_IMAGE_KEY})
        if unknown:
            raise ValueError(f"unknown component ids {unknown} in resources/images; "
                             f"known: {list(COMPONENT_IDS)}")
        if DEFAULT_IMAGE_KEY not in self.images:
            raise ValueError(f"images needs a {DEFAULT_IMAGE_KEY!r} entry")
        m = self.model
        if m.image_size < 32 or m.epochs < 1 or m.batch_size < 1:
            raise ValueError(f"model needs image_size >= 32, epochs >= 1 and batch_size >= 1, "
                             f"got {m}")
        if m.mixed_precision not in ("auto", "on", "off"):
            raise ValueError(f"model.mixed_precision must be auto, on or off, "
                             f"got {m.mixed_precision!r}")
        if not 0 < self.data.eval_fraction < 1:
            raise ValueError(f"data.eval_fraction must be in (0, 1), got {self.data.eval_fraction}")
        if self.kubeflow.artifact_io not in (ARTIFACT_IO_AUTO, ARTIFACT_IO_DIRECT,
                                             ARTIFACT_IO_LOCAL):
            raise ValueError(f"kubeflow.artifact_io must be auto, direct or local, "
                             f"got {self.kubeflow.artifact_io!r}")

    def image_for(self, component_id: str) -> str:
        return self.images.get(component_id, self.images[DEFAULT_IMAGE_KEY])

    def resources_for(self, component_id: str) -> Resources:
        return self.resources.get(component_id, Resources())

    @property
    def local_metadata_path(self) -> str:
        return self.metadata_path or os.path.join(self.pipeline_root, "metadata.sqlite")

    @property
    def local_beam_args(self) -> list[str]:
        return list(self.beam_args) or list(DEFAULT_LOCAL_BEAM_ARGS)


# The data components are Beam jobs that hold a shard of images each worker; the
# Trainer's own requests come with its GPU.
_DATA_RESOURCES = Resources(cpu_request="2", memory_request="4Gi", memory_limit="8Gi")
DEFAULT_RESOURCES: dict[str, Resources] = {
    EXAMPLE_GEN: _DATA_RESOURCES,
    STATISTICS_GEN: _DATA_RESOURCES,
    IMAGE_STATISTICS: _DATA_RESOURCES,
    EXAMPLE_VALIDATOR: Resources(cpu_request="1", memory_request="2Gi"),
    SCHEMA_GEN: Resources(cpu_request="1", memory_request="2Gi"),
    TRAINER: Resources(cpu_request="4", memory_request="16Gi", memory_limit="32Gi"),
    EVALUATOR: _DATA_RESOURCES,
    PUSHER: Resources(cpu_request="500m", memory_request="1Gi"),
}


def from_dict(values: Mapping[str, Any], source: str = "config") -> PipelineConfig:
    """Builds a validated PipelineConfig from plain data (e.g. parsed YAML).

    `resources` entries are merged over DEFAULT_RESOURCES, `images` over the defaults.

    Raises:
      ValueError: an unknown key or a bad value, naming `source` and the key.
    """
    values = dict(values)
    if "resources" in values:
        defaults = {k: dataclasses.asdict(v) for k, v in DEFAULT_RESOURCES.items()}
        values["resources"] = {**defaults, **(values["resources"] or {})}
    if "images" in values:
        defaults = {DEFAULT_IMAGE_KEY: images.RUNTIME_IMAGE, TRAINER: images.GPU_IMAGE}
        values["images"] = {**defaults, **(values["images"] or {})}
    try:
        config = _build(PipelineConfig, values, "")
        config.validate()
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: {e}") from None
    return config


def load(path: str | None, **overrides: Any) -> PipelineConfig:
    """Loads a YAML file (None: the defaults) and applies top-level overrides.

    Example:
      load("pipeline.yaml", data_root="/data/flowers")
    """
    import tensorflow as tf
    import yaml

    values: dict[str, Any] = {}
    if path:
        if not tf.io.gfile.exists(path):
            raise ValueError(f"config file {path} does not exist")
        with tf.io.gfile.GFile(path) as f:
            loaded = yaml.safe_load(f.read())
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{path}: the top level must be a mapping, "
                             f"got {type(loaded).__name__}")
        values = loaded or {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return from_dict(values, source=path or "config")


def to_dict(config: PipelineConfig) -> dict[str, Any]:
    """Plain data that `from_dict` turns back into an equal config."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        return value

    return plain(config)


def _build(cls: type, values: Any, where: str) -> Any:
    if not isinstance(values, Mapping):
        raise ValueError(f"{where.rstrip('.') or 'the top level'} must be a mapping, "
                         f"got {values!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {where or 'the top level'}; "
                         f"known: {sorted(fields)}")
    kwargs = {name: _coerce(hints[name], value, f"{where}{name}")
              for name, value in values.items()}
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        return _coerce(hint, value, where)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, f"{where}.")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where} must be a list, got {value!r}")
        return tuple(_coerce(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where} must be a mapping, got {value!r}")
        return {str(k): _coerce(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)  # YAML reads `cpu_request: 2` as a number
    if hint in (int, float, str, bool) and (type(value) is not hint):
        raise ValueError(f"{where} must be {hint.__name__}, got {value!r}")
    return value
