"""Who starts the workers of a training on several workers (trainer.workers > 1): one
interface, two launchers, chosen by launch.LAUNCHER_ENV (which a compiled Kubeflow
package sets on its Trainer step):
- worker processes of this machine (workers.py), the default;
- a TFJob of the Trainer pod's cluster (kubernetes_workers.py);
- containers of the Trainer's image on this machine's Docker engine (docker_workers.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from imgpipe.components.trainer import launch
from imgpipe.components.trainer import workers as workers_lib


class Launcher(Protocol):
    """Starts a job's workers, and waits for them all (launcher())."""

    # Whether the workers share this machine (its memory, its GPUs) and its disk.
    shares_machine: bool

    def run(
        self, job: object, workers: int, folder: str, log_dir: str, shared_paths: Sequence[str]
    ) -> None:
        """Runs `job` on `workers` workers; returns once all have exited 0.

        Args:
          folder: the job's folder (save_job), which every worker reads.
          log_dir: where each worker's log goes (log_path).
          shared_paths: the other paths the workers read or write.

        Raises:
          ValueError: a setting cannot run there, or a worker refused one (one line).
          WorkersFailed: a worker failed (one line); every worker has ended.
        """


@dataclasses.dataclass(frozen=True)
class LocalProcesses:
    """Worker processes of this machine, each with its own GPUs (`gpus`, assign_gpus)."""

    gpus: Sequence[str]
    shares_machine = True

    def run(
        self, job: object, workers: int, folder: str, log_dir: str, shared_paths: Sequence[str]
    ) -> None:
        workers_lib.run(job, workers, folder, log_dir, self.gpus)


def launcher(gpus: Callable[[], Sequence[str]]) -> Launcher:
    """The launcher launch.LAUNCHER_ENV names; `gpus` gives local processes' GPUs.

    Raises:
      ValueError: an unknown launcher, or GPUs that do not divide among the workers.
    """
    name = launch.launcher_name()
    if name == launch.KUBERNETES:
        from imgpipe.components.trainer import kubernetes_workers

        return kubernetes_workers.KubernetesWorkers()
    if name == launch.DOCKER:
        from imgpipe.components.trainer import docker_workers

        return docker_workers.DockerWorkers()
    return LocalProcesses(gpus())
