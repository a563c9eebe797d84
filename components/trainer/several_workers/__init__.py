"""Training on several workers (trainer.workers > 1; docs/distributed-training.md): the
launch of the workers, processes of this machine (local_processes.py), a TFJob or a
JobSet of the Trainer pod's cluster (kubernetes_jobs.py) or containers on this machine's
Docker engine (docker_containers.py), and what each worker runs (worker.py, job.py).

The public names, loaded on first use without TensorFlow: those the compiled Kubeflow
package and the Trainer's pod agree on (choice.py), which pipelines/kubeflow writes:
  from imgpipe.components.trainer.several_workers import WORKERS_LAUNCHER_ENV
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imgpipe.components.common.runtime import front_door

if TYPE_CHECKING:
    from imgpipe.components.trainer.several_workers.choice import DOCKER as DOCKER_LAUNCHER
    from imgpipe.components.trainer.several_workers.choice import (
        DOCKER_NETWORK_ENV as WORKERS_DOCKER_NETWORK_ENV,
    )
    from imgpipe.components.trainer.several_workers.choice import (
        DOCKER_SOCKET as WORKERS_DOCKER_SOCKET,
    )
    from imgpipe.components.trainer.several_workers.choice import (
        KUBERNETES as KUBERNETES_LAUNCHER,
    )
    from imgpipe.components.trainer.several_workers.choice import (
        LAUNCHER_ENV as WORKERS_LAUNCHER_ENV,
    )
    from imgpipe.components.trainer.several_workers.choice import (
        POD_FIELDS as TRAINER_POD_FIELDS,
    )

__all__ = [
    "DOCKER_LAUNCHER",
    "KUBERNETES_LAUNCHER",
    "TRAINER_POD_FIELDS",
    "WORKERS_DOCKER_NETWORK_ENV",
    "WORKERS_DOCKER_SOCKET",
    "WORKERS_LAUNCHER_ENV",
]
# mypy reads the names above; a misspelt one fails the type check.
if not TYPE_CHECKING:
    __getattr__ = front_door.lazy(__name__)
