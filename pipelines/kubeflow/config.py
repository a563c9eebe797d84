"""Kubeflow-only settings: images, resources, GPU scheduling, volumes, artifact I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from imgpipe.components.common.runtime import kueue
from imgpipe.pipelines import images as image_names
from imgpipe.pipelines.component_ids import (
    CHAMPION,
    COMPONENT_IDS,
    EVALUATOR,
    EXAMPLE_GEN,
    EXAMPLE_VALIDATOR,
    IMAGE_STATISTICS,
    PUSHER,
    SCHEMA_GEN,
    STATISTICS_GEN,
    TRAINER,
)
from imgpipe.pipelines.kfp_contract import ARTIFACT_IO_MODES, MODE_AUTO

# The key of `images` for components without their own entry.
DEFAULT_IMAGE_KEY = "default"


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
    node pools carry (k8s/gpu-node-pool.yaml shows both). The GPU count is the
    Trainer's own setting, trainer.num_gpus.
    """

    accelerator: str = "nvidia.com/gpu"
    node_selector: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"nvidia.com/gpu.present": "true"}
    )
    tolerations: tuple[Toleration, ...] = (
        Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
    )


# The data components are Beam jobs that hold a shard of images each worker; the
# Trainer's own requests come with its GPU.
_DATA_RESOURCES = Resources(cpu_request="2", memory_request="4Gi", memory_limit="8Gi")
DEFAULT_RESOURCES: dict[str, Resources] = {
    # It lists a folder and checksums one model: the lease wait costs nothing.
    CHAMPION: Resources(cpu_request="500m", memory_request="1Gi"),
    EXAMPLE_GEN: _DATA_RESOURCES,
    STATISTICS_GEN: _DATA_RESOURCES,
    IMAGE_STATISTICS: _DATA_RESOURCES,
    EXAMPLE_VALIDATOR: Resources(cpu_request="1", memory_request="2Gi"),
    SCHEMA_GEN: Resources(cpu_request="1", memory_request="2Gi"),
    TRAINER: Resources(cpu_request="4", memory_request="16Gi", memory_limit="32Gi"),
    EVALUATOR: _DATA_RESOURCES,
    PUSHER: Resources(cpu_request="500m", memory_request="1Gi"),
}
DEFAULT_IMAGES: dict[str, str] = {
    DEFAULT_IMAGE_KEY: image_names.RUNTIME_IMAGE,
    TRAINER: image_names.GPU_IMAGE,
}


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
    """Kubeflow-only settings.

    Attributes:
      images: container image per component id; DEFAULT_IMAGE_KEY for the rest. Entries
        given in a config are merged over DEFAULT_IMAGES. REPOSITORY:TAG, or
        REPOSITORY@sha256:<digest> to run exactly one build.
      resources: per-component requests and limits, by component id. Entries given in
        a config are merged over DEFAULT_RESOURCES.
      gpu: accelerator type, node selector and tolerations of GPU steps.
      pvc_name: a PersistentVolumeClaim mounted into every step (k8s/storage.yaml),
        for data_root/pipeline_root/serving_dir on a shared volume; None mounts nothing.
      mount_path: where the claim is mounted.
      artifact_io: how the entrypoint reaches artifacts: "local" through the paths the
        KFP launcher downloads to and uploads from, "direct" through the URI, "auto"
        local only for schemes TensorFlow cannot open (minio://, s3://).
      service_account: the Kubernetes service account runs use (k8s/rbac.yaml).
      queue_name: the Kueue LocalQueue (in the runs' namespace) that admits the GPU
        steps and, with trainer.workers > 1, the job the Trainer launches: their pods,
        and that job, carry the label kueue.x-k8s.io/queue-name. Kueue holds a labelled
        job suspended until the queue's quota admits it; the steps' pods wait for it
        only where Kueue manages plain pods (its `pod` integration). None labels
        nothing.
    """

    images: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(DEFAULT_IMAGES))
    resources: Mapping[str, Resources] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_RESOURCES)
    )
    gpu: GpuConfig = dataclasses.field(default_factory=GpuConfig)
    pvc_name: str | None = None
    mount_path: str = "/mnt/imgpipe"
    artifact_io: str = MODE_AUTO
    service_account: str = "imgpipe-runner"
    queue_name: str | None = None

    def __post_init__(self) -> None:
        # Entries a config gives are merged over the defaults, so that setting one
        # component's image or resources keeps the others'.
        object.__setattr__(self, "images", {**DEFAULT_IMAGES, **self.images})
        object.__setattr__(self, "resources", {**DEFAULT_RESOURCES, **self.resources})

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        unknown = sorted(set(self.resources) - set(COMPONENT_IDS))
        unknown += sorted(set(self.images) - set(COMPONENT_IDS) - {DEFAULT_IMAGE_KEY})
        if unknown:
            raise ValueError(
                f"unknown component ids {unknown} in resources or images; "
                f"known: {list(COMPONENT_IDS)}"
            )
        for component_id, reference in self.images.items():
            image_names.check_reference(reference, f"images.{component_id}")
        if self.artifact_io not in ARTIFACT_IO_MODES:
            raise ValueError(
                f"artifact_io must be one of {list(ARTIFACT_IO_MODES)}, got {self.artifact_io!r}"
            )
        if self.queue_name is not None:
            kueue.check_queue_name(self.queue_name, "queue_name")
        from imgpipe.pipelines.kubeflow.quantities import cpu_cores, memory_gb

        for component_id, resources in self.resources.items():
            for name in ("cpu_request", "cpu_limit"):
                if getattr(resources, name):
                    cpu_cores(getattr(resources, name), f"resources.{component_id}.{name}")
            for name in ("memory_request", "memory_limit"):
                if getattr(resources, name):
                    memory_gb(getattr(resources, name), f"resources.{component_id}.{name}")

    def image_for(self, component_id: str) -> str:
        return self.images.get(component_id, self.images[DEFAULT_IMAGE_KEY])

    def resources_for(self, component_id: str) -> Resources:
        return self.resources.get(component_id, Resources())
