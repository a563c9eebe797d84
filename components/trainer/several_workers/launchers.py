"""Who starts the workers of a training on several workers (trainer.workers > 1): one
interface, three launchers, chosen by choice.LAUNCHER_ENV (which a compiled Kubeflow
package, or `imgpipe kfp run-local`, sets on its Trainer step):
- worker processes of this machine (local_processes.py), the default;
- a TFJob or a JobSet of the Trainer pod's cluster, as trainer.launcher says
  (kubernetes_jobs.py);
- containers of the Trainer's image on this machine's Docker engine (docker_containers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from imgpipe.components.trainer.several_workers import choice, local_processes


class Launcher(Protocol):
    """Starts a job's workers, and waits for them all (launcher())."""

    # Whether the workers share this machine (its memory, its GPUs) and its disk.
    shares_machine: bool

    def run(
        self, job: object, workers: int, folder: str, log_dir: str, shared_paths: Sequence[str]
    ) -> None:
        """Runs `job` on `workers` workers; returns once all have exited 0.

        Args:
          folder: the job's folder (replicas.save_job), which every worker reads.
          log_dir: where each worker's log goes (replicas.log_path).
          shared_paths: the other paths the workers read or write.

        Raises:
          ValueError: a setting cannot run there, or a worker refused one (one line).
          WorkersFailed: a worker failed (one line); every worker has ended.
        """


def launcher(gpus: Callable[[], Sequence[str]], kind: str) -> Launcher:
    """The launcher choice.LAUNCHER_ENV names; `gpus` gives local processes' GPUs, `kind`
    the kind of job of the Kubernetes launcher (trainer.launcher: tfjob or jobset).

    Raises:
      ValueError: an unknown launcher or kind, or GPUs that do not divide among the
        workers.
    """
    name = choice.launcher_name()
    if name == choice.KUBERNETES:
        from imgpipe.components.trainer.several_workers import kubernetes_jobs

        return kubernetes_jobs.KubernetesJobs(kind)
    if name == choice.DOCKER:
        from imgpipe.components.trainer.several_workers import docker_containers

        return docker_containers.DockerWorkers()
    return local_processes.LocalProcesses(gpus())
