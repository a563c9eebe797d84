"""The workers of a training on several workers as containers of the Trainer's own
image on this machine's Docker engine (choice.DOCKER): what `imgpipe kfp run-local`
runs in place of a TFJob, whose controller this launcher stands in for. A local check
of the multi-worker path in containers only; on a cluster the TFJob runs
(kubernetes_jobs.py).

The Trainer's container reaches the engine through its socket (choice.DOCKER_SOCKET,
which run-local mounts into the Trainer's container alone), reads its own container,
and starts one container per worker made from it: the same image, user (uid 1000),
read-only root, tmpfs, dropped capabilities, bind mounts (the pipeline root, where the
job's folder is) and environment, without the socket; on the Docker network
choice.DOCKER_NETWORK_ENV names (it must exist: the launcher makes no network), each
with TF_CONFIG naming the workers by their network aliases. Then, as with a TFJob:
- the chief's (worker 0's) log is streamed into the Trainer's;
- all exit 0: the training is done and the chief has exported into the job's folder;
- one fails: one line naming that worker's container, how it ended and its last error,
  and nothing is exported.
Either way, each worker's log is kept in the model_run artifact and every worker
container is removed. The workers run in the Trainer container's process namespace, so
if the Trainer's container is killed outright, its workers' processes end with it (their
stopped containers are left, labelled with the Trainer's container).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from imgpipe.components.trainer.several_workers import (
    choice,
    cluster,
    replicas,
    step_pod,
    tfjob_manifest,
)

POLL_SECONDS = 1.0
# What the workers' containers do not inherit from the Trainer's.
_NOT_INHERITED_ENV = (choice.LAUNCHER_ENV, choice.DOCKER_NETWORK_ENV, "DOCKER_HOST", "HOSTNAME")
TRAINER_CONTAINER_LABEL = "imgpipe/trainer-container"
WORKER_INDEX_LABEL = "imgpipe/worker-index"


class DockerUnavailable(ValueError):
    """The worker containers cannot be started here; the message is one line naming the
    fix."""


def engine():
    """A client of the Docker engine behind choice.DOCKER_SOCKET (or DOCKER_HOST).

    Raises:
      DockerUnavailable: no engine answers, naming the fix.
    """
    import docker  # type: ignore[import-untyped]

    base_url = os.environ.get("DOCKER_HOST") or f"unix://{choice.DOCKER_SOCKET}"
    try:
        client = docker.DockerClient(base_url=base_url)
        client.ping()
    except Exception as e:  # docker raises DockerException, requests' and OS errors
        raise DockerUnavailable(
            f"{choice.LAUNCHER_ENV}={choice.DOCKER} starts the workers as containers, and "
            f"no Docker engine answers at {base_url} ({' '.join(str(e).split())[:200]}); "
            "run the package with `imgpipe kfp run-local`, which mounts the engine's "
            "socket into the Trainer's container, or set trainer.workers=1"
        ) from None
    return client


def worker_addresses(job: str, count: int) -> tuple[str, ...]:
    """The workers' host:port on the network: their containers' aliases."""
    return tuple(f"{job}-worker-{i}:{tfjob_manifest.PORT}" for i in range(count))


def worker_spec(own: Mapping[str, Any], member: cluster.Member, folder: str) -> dict[str, Any]:
    """containers.create's arguments for `member`, made from the Trainer's own
    container (`own`, as the engine inspects it)."""
    from docker.types import Mount  # type: ignore[import-untyped]

    config, host = own["Config"], own["HostConfig"]
    env = [
        item
        for item in config.get("Env") or []
        if item.partition("=")[0] not in (*_NOT_INHERITED_ENV, cluster.TF_CONFIG)
    ]
    mounts = [
        Mount(target=m["Destination"], source=m["Source"], type="bind", read_only=not m["RW"])
        for m in own.get("Mounts") or []
        if m.get("Type") == "bind" and m["Destination"] != choice.DOCKER_SOCKET
    ]
    alias = member.address.rsplit(":", 1)[0]
    return {
        "image": config["Image"],
        # The image's ENTRYPOINT is reset: each worker runs the worker command, as in a TFJob.
        "entrypoint": [""],
        "command": [*choice.WORKER_COMMAND, folder],
        "name": alias,
        "hostname": alias,
        "user": config.get("User") or None,
        "environment": [*env, f"{cluster.TF_CONFIG}={cluster.tf_config(member)}"],
        "mounts": mounts,
        "read_only": bool(host.get("ReadonlyRootfs")),
        "tmpfs": host.get("Tmpfs") or None,
        "cap_drop": host.get("CapDrop") or None,
        "security_opt": host.get("SecurityOpt") or None,
        # In the Trainer's process namespace: a SIGKILLed Trainer container takes its
        # workers with it, as a deleted pod takes its TFJob (nothing left training).
        "pid_mode": f"container:{own['Id']}",
        "labels": {
            **step_pod.PART_OF,
            TRAINER_CONTAINER_LABEL: own["Id"],
            WORKER_INDEX_LABEL: str(member.index),
        },
    }


def bind_targets(own: Mapping[str, Any]) -> list[str]:
    """The folders the workers' containers see as the Trainer's does."""
    return [
        m["Destination"]
        for m in own.get("Mounts") or []
        if m.get("Type") == "bind" and m["Destination"] != choice.DOCKER_SOCKET
    ]


class DockerWorkers:
    """Runs a job's workers as containers of the Trainer's image (launchers.Launcher)."""

    # They share this machine's memory, not the Trainer's disk (only its bind mounts).
    shares_machine = False

    def __init__(self, poll_seconds: float = POLL_SECONDS) -> None:
        self._poll_seconds = poll_seconds

    def run(
        self,
        job: object,
        workers_count: int,
        folder: str,
        log_dir: str,
        shared_paths: Iterable[str] = (),
    ) -> None:
        """Runs `job` on `workers_count` worker containers; returns once all have exited 0.

        Raises:
          DockerUnavailable: the containers cannot be started here (one line, the fix).
          ValueError: a worker refused a setting (its one line).
          WorkersFailed: a worker failed (its one line); every worker container was removed.
        """
        import docker

        client = engine()
        try:
            own = self._own_container(client)
            network = self._network(client, workers_count)
            path = replicas.unshared_path([folder, log_dir, *shared_paths], bind_targets(own))
            if path is not None:
                raise DockerUnavailable(
                    f"trainer.workers={workers_count}: {path} is on the Trainer container's "
                    "own disk, which the worker containers cannot see; keep it under the "
                    "pipeline root (kfp run-local mounts it) or on an object store"
                )
            job_name = step_pod.job_name(own["Id"])
            addresses = worker_addresses(job_name, workers_count)
            replicas.save_job(folder, job)
            containers: list[Any] = []
            follower: replicas.LogFollower | None = None
            try:
                for index in range(workers_count):
                    member = cluster.Member(addresses, index)
                    spec = worker_spec(own, member, folder)
                    alias = spec["name"]
                    containers.append(
                        client.containers.create(
                            **spec,
                            network=network,
                            networking_config={
                                network: client.api.create_endpoint_config(aliases=[alias])
                            },
                        )
                    )
                for container in containers:
                    container.start()
                print(
                    f"Trainer: {workers_count} worker containers on Docker network {network}: "
                    f"{', '.join(c.name for c in containers)} (logs: {log_dir})",
                    file=sys.stderr,
                    flush=True,
                )
                chief = containers[cluster.CHIEF]

                def open_stream() -> replicas.LogStream:
                    stream = chief.logs(stream=True, follow=True)
                    return stream, stream.close

                follower = replicas.LogFollower(open_stream)
                follower.start()
                self._wait(containers, workers_count, log_dir, follower)
            finally:
                if follower is not None:
                    follower.stop()
                for index, container in enumerate(containers):
                    with contextlib.suppress(docker.errors.DockerException):
                        replicas.keep_log(log_dir, index, _log_of(container))
                    with contextlib.suppress(docker.errors.NotFound):
                        container.remove(force=True)
        finally:
            client.close()

    def _own_container(self, client) -> dict[str, Any]:
        import docker

        try:
            return client.api.inspect_container(socket.gethostname())
        except docker.errors.NotFound:
            raise DockerUnavailable(
                f"{choice.LAUNCHER_ENV}={choice.DOCKER} makes the worker containers from the "
                f"Trainer's own container, and this process is not in a container of this "
                f"engine (no container {socket.gethostname()}); run the package with "
                "`imgpipe kfp run-local`, or set trainer.workers=1"
            ) from None

    def _network(self, client, workers_count: int) -> str:
        import docker

        name = os.environ.get(choice.DOCKER_NETWORK_ENV, "").strip()
        fix = (
            "create one (`docker network create NAME`) and name it to `imgpipe kfp "
            "run-local --workers-network NAME`, or set trainer.workers=1"
        )
        if not name:
            raise DockerUnavailable(
                f"trainer.workers={workers_count} in containers needs a Docker network for "
                f"the workers ({choice.DOCKER_NETWORK_ENV} is unset): {fix}"
            )
        try:
            client.networks.get(name)
        except docker.errors.NotFound:
            raise DockerUnavailable(
                f"the workers' Docker network {name} does not exist: {fix}"
            ) from None
        return name

    def _wait(
        self,
        containers: Sequence[Any],
        workers_count: int,
        log_dir: str,
        follower: replicas.LogFollower,
    ) -> None:
        import docker

        while True:
            states: list[Mapping[str, Any] | None] = []
            for container in containers:
                try:
                    container.reload()
                    states.append(container.attrs["State"])
                except docker.errors.NotFound:  # removed by someone else
                    states.append(None)
            ended = [s is None or s["Status"] in ("exited", "dead") for s in states]
            codes = [None if s is None else s.get("ExitCode") for s in states]
            failed = [i for i in range(len(states)) if ended[i] and codes[i] != 0]
            if failed:
                # A worker killed by a signal (code > 128, or removed) is the cause; the
                # others' collective errors follow it.
                first = min(failed, key=lambda i: (0 < (codes[i] or 0) <= 128, i))
                self._fail(first, containers[first], states[first], workers_count, log_dir)
            if all(ended):
                follower.finish()
                return
            time.sleep(self._poll_seconds)

    def _fail(self, index, container, state, workers_count, log_dir) -> NoReturn:
        if state is None:
            how, text = "was removed", ""
        else:
            code = state.get("ExitCode")
            how = f"exited with code {code}" + (" (OOMKilled)" if state.get("OOMKilled") else "")
            text = _log_of(container)
        replicas.raise_failed(
            f"trainer worker {index} of {workers_count} (container {container.name})",
            how,
            replicas.keep_log(log_dir, index, text),
            workers_count,
            "the other worker containers were removed",
            log_dir,
        )


def _log_of(container) -> str:
    import docker

    try:
        return container.logs().decode(errors="replace")
    except docker.errors.DockerException as e:
        return f"(its log could not be read: {e})\n"
