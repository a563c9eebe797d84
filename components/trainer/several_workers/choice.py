"""Where the workers of a training on several workers (trainer.workers > 1) run: the
one choice among the three launchers (launchers.py), and the names the compiled Kubeflow
package and the Trainer's pod agree on.

The compiler (pipelines/kubeflow, through this sub-package's front door) writes these
into the Trainer step of a package with trainer.workers > 1; the Trainer reads them.
Standard library only: compile-time code imports it without TensorFlow.
"""

from __future__ import annotations

import os

# Which launcher starts the workers; unset is PROCESSES.
LAUNCHER_ENV = "IMGPIPE_TRAINER_LAUNCHER"
# Worker processes of the Trainer's own machine (local_processes.py).
PROCESSES = "processes"
# A TFJob or a JobSet of the Trainer's own cluster (trainer.launcher; kubernetes_jobs.py).
KUBERNETES = "kubernetes"
# Containers of the Trainer's own image on this machine's Docker engine, which the
# Trainer's container reaches through the engine's socket (docker_containers.py): the
# stand-in for a TFJob under `imgpipe kfp run-local`.
DOCKER = "docker"
LAUNCHERS = (PROCESSES, KUBERNETES, DOCKER)
# The Docker network the worker containers join (it must exist; the launcher makes none).
DOCKER_NETWORK_ENV = "IMGPIPE_TRAINER_DOCKER_NETWORK"
# Where the Trainer's container finds the engine's socket.
DOCKER_SOCKET = "/run/docker.sock"

# The Trainer pod's name and namespace (the Kubernetes downward API, which the compiled
# package asks for): the TFJob is made from that pod, and owned by it.
POD_NAME_ENV = "IMGPIPE_POD_NAME"
POD_NAMESPACE_ENV = "IMGPIPE_POD_NAMESPACE"
POD_FIELDS = {POD_NAME_ENV: "metadata.name", POD_NAMESPACE_ENV: "metadata.namespace"}

# What each worker runs, with the job's folder as its one argument: on this machine, in
# a TFJob's pods and in worker containers alike.
WORKER_MODULE = "imgpipe.components.trainer.several_workers.worker"
WORKER_COMMAND = ("python", "-m", WORKER_MODULE)


def launcher_name() -> str:
    """The launcher LAUNCHER_ENV names (PROCESSES when unset).

    Raises:
      ValueError: an unknown launcher, naming the variable and the choices.
    """
    name = os.environ.get(LAUNCHER_ENV, "").strip() or PROCESSES
    if name not in LAUNCHERS:
        raise ValueError(
            f"{LAUNCHER_ENV}={name!r} names no launcher of trainer workers; use one of "
            f"{', '.join(LAUNCHERS)} (or leave it unset: {PROCESSES})"
        )
    return name
