"""Where training runs: the distribution strategy and precision, decided in one place.

`plan_devices` is a pure function of the visible device names and the config, so the
GPU decisions are tested on a CPU-only machine; `make_strategy` and `apply_precision`
carry the plan out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras
import tensorflow as tf
from absl import logging

from imgpipe.components.trainer.config import PRECISION_AUTO, PRECISION_OFF, PRECISION_ON

MIRRORED = "mirrored"
SINGLE = "single"
# Several worker processes (trainer.workers > 1), each over its own local devices.
MULTI_WORKER = "multi_worker_mirrored"
MIXED_FLOAT16 = "mixed_float16"
FLOAT32 = "float32"


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """Attributes:
    strategy: MIRRORED over `devices`, SINGLE (TF's default strategy), or MULTI_WORKER
      over `devices` in each of `workers` processes.
    devices: the replicas' device names (with MULTI_WORKER, one worker's).
    precision_policy: the Keras dtype policy, MIXED_FLOAT16 or FLOAT32.
    workers: the worker processes that train together.
    """

    strategy: str
    devices: tuple[str, ...]
    precision_policy: str
    workers: int = 1

    @property
    def replicas(self) -> int:
        """Replicas in sync over every worker: the global batch is per-replica x this."""
        return len(self.devices) * self.workers


def plan_devices(
    gpus: Sequence[str],
    cpus: Sequence[str],
    num_gpus: int | None = None,
    mixed_precision: str = PRECISION_AUTO,
) -> DevicePlan:
    """Decides strategy and precision from the logical devices TF sees.

    Replicas are the GPUs in use, or else the logical CPUs (one, unless logical CPU
    devices were configured on purpose); more than one replica means MirroredStrategy.
    Mixed precision (float16 compute, float32 variables) pays off on GPUs only.

    Args:
      gpus: logical GPU device names, e.g. ["/device:GPU:0", "/device:GPU:1"].
      cpus: logical CPU device names.
      num_gpus: GPUs to use: None for all, 0 for none, n for the first n.
      mixed_precision: `auto`, `on` or `off`.

    Raises:
      ValueError: more GPUs asked for than visible, or mixed precision `on` without one.
    """
    if mixed_precision not in (PRECISION_AUTO, PRECISION_ON, PRECISION_OFF):
        raise ValueError(f"mixed_precision must be auto, on or off, got {mixed_precision!r}")
    if num_gpus is not None and num_gpus > len(gpus):
        raise ValueError(f"num_gpus={num_gpus} but only {len(gpus)} GPUs are visible: {gpus}")
    used_gpus = tuple(gpus if num_gpus is None else gpus[:num_gpus])
    devices = used_gpus or tuple(cpus)
    if not devices:
        raise ValueError("no devices visible to TensorFlow")
    if mixed_precision == PRECISION_ON and not used_gpus:
        raise ValueError(
            "mixed_precision='on' needs a GPU; use 'auto' to train in float32 on CPU nodes"
        )
    mixed = mixed_precision == PRECISION_ON or (
        mixed_precision == PRECISION_AUTO and bool(used_gpus)
    )
    return DevicePlan(
        strategy=MIRRORED if len(devices) > 1 else SINGLE,
        devices=devices,
        precision_policy=MIXED_FLOAT16 if mixed else FLOAT32,
    )


def multi_worker_plan(
    worker_devices: Sequence[str], workers: int, mixed_precision: str = PRECISION_AUTO
) -> DevicePlan:
    """The plan of one of `workers` processes training together, over the local devices
    its MultiWorkerMirroredStrategy chose (`strategy.extended.worker_devices`: its GPUs,
    else its CPU); precision is decided as for one process.

    Raises:
      ValueError: as plan_devices.
    """
    gpus = [d for d in worker_devices if tf.DeviceSpec.from_string(d).device_type == "GPU"]
    cpus = [d for d in worker_devices if d not in gpus]
    local = plan_devices(gpus, cpus, None, mixed_precision)
    return dataclasses.replace(local, strategy=MULTI_WORKER, workers=workers)


def all_reduce(plan: DevicePlan) -> str:
    """The collective between several workers: NCCL on GPUs, RING over gRPC on CPUs;
    "" within one process."""
    if plan.workers == 1:
        return ""
    gpu = any(tf.DeviceSpec.from_string(d).device_type == "GPU" for d in plan.devices)
    return "NCCL" if gpu else "RING"


def visible_devices() -> tuple[list[str], list[str]]:
    """(logical GPU names, logical CPU names) as TF sees them now."""
    return (
        [d.name for d in tf.config.list_logical_devices("GPU")],
        [d.name for d in tf.config.list_logical_devices("CPU")],
    )


def make_strategy(plan: DevicePlan) -> tf.distribute.Strategy:
    if plan.strategy == MULTI_WORKER:
        raise ValueError(
            "a worker's MultiWorkerMirroredStrategy is made once, before TensorFlow starts "
            "(cluster.connect), not from a plan"
        )
    if plan.strategy == MIRRORED:
        return tf.distribute.MirroredStrategy(devices=list(plan.devices))
    return tf.distribute.get_strategy()


def apply_precision(plan: DevicePlan) -> None:
    """Sets Keras' global dtype policy (set it back to float32 too: it is global state)."""
    keras.mixed_precision.set_global_policy(plan.precision_policy)


def log_plan(plan: DevicePlan) -> None:
    logging.info(
        "Trainer devices: %s over %s%s, policy %s",
        plan.strategy,
        list(plan.devices),
        f" in each of {plan.workers} workers" if plan.workers > 1 else "",
        plan.precision_policy,
    )
