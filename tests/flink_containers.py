"""A Flink session cluster in containers, laid out as k8s/flink-deployment.yaml lays it out.

On a Docker network of its own: a JobManager, TaskManagers that each have their own
address, and beside each TaskManager the Beam SDK worker pool from the project image,
in the TaskManager's network namespace (`--network container:`), as the sidecar shares
its pod's, so that the EXTERNAL environment's localhost:50000 is that pool; and Beam's
Flink job server (k8s/flink-job-server.yaml) submitting to the JobManager. Flink's roles
run the image of `make flink-image` (flink_image.py). A host folder, mounted at its own
path in every container, stands for the cluster's ReadWriteMany claim: the job's input,
its output and the job server's staged artifacts are there. Only the JobManager's REST
port and the job server's ports are published, on 127.0.0.1. Leaving the block removes
every container and the network, however it is left. docs/flink-containers.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from imgpipe.pipelines.engines import flink, processes
from tests import flink_image

# Every container and network of a cluster carries this label, its value the cluster's
# name; OWNER_LABEL names the process that made it, so that what a killed test left
# behind is found and removed by the next (remove_orphans).
LABEL = "imgpipe.flink-containers"
OWNER_LABEL = "imgpipe.owner-pid"
NAME_PREFIX = "imgpipe-flinkc-"
TASKMANAGERS = 2
# The host folder under which each cluster's shared folder is made: it must be reachable
# by the containers' users (flink 9999, the project image's 1000), which pytest's own
# temporary folders (mode 0700) are not.
SHARED_PARENT = "/tmp"
# Generous: on this shared 2-core machine under load, start-up took 44-180 s; the wait ends at
# once when a container exits.
STARTUP_TIMEOUT_SECONDS = 600.0
# One docker client command (version, inspect, ps, logs, exec of a probe, run --detach,
# pause, kill, rm): measured busy, under 1.5 s for a query, up to 3.7 s for a `run`.
DOCKER_TIMEOUT_SECONDS = 120.0
# One request to the JobManager's REST API, from the readiness poll (which retries it) or
# from a test (which does not): measured busy, 0.01-0.15 s (`imgpipe engine flink`'s).
REST_TIMEOUT_SECONDS = 60.0
# One gRPC handshake with the job server in the readiness poll, which retries it until
# STARTUP_TIMEOUT_SECONDS: short, so that a server not yet there is asked again soon.
_HANDSHAKE_SECONDS = 2.0
_POLL_SECONDS = 0.5
_LOG_TAIL_LINES = 20


class DockerFailed(RuntimeError):
    """A docker command failed; the message has its error."""


def docker(*args: str, check: bool = True, timeout: float = DOCKER_TIMEOUT_SECONDS) -> str:
    """Runs the docker client; returns its standard output, stripped.

    Raises:
      DockerFailed: it exited non-zero (with `check`).
    """
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise DockerFailed(f"docker {' '.join(args[:2])} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def engine_problem() -> str | None:
    """Why no Docker engine can be used from here, or None when one answers."""
    if shutil.which("docker") is None:
        return "no docker client on PATH (make flink-image installs one in the environment)"
    try:
        result = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=DOCKER_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the Docker engine did not answer in {DOCKER_TIMEOUT_SECONDS:.0f} s"
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or ["(no error text)"]
        return f"no Docker engine answers: {lines[-1]}"
    return None


def image_exists(image: str) -> bool:
    return docker("image", "inspect", image, check=False) != ""


@dataclass(frozen=True)
class ContainerCluster:
    """A running cluster: its containers' names, the shared folder and the host ports."""

    name: str
    shared_dir: str
    rest_port: int
    job_port: int
    taskmanagers: tuple[str, ...]
    worker_pools: tuple[str, ...]
    parallelism: int

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def rest(self, path: str) -> dict:
        """GET the JobManager's REST API at `path` (e.g. "/overview")."""
        with urllib.request.urlopen(
            f"{self.rest_url}{path}", timeout=REST_TIMEOUT_SECONDS
        ) as response:
            return json.loads(response.read())

    def overview(self) -> dict:
        return self.rest("/overview")

    def beam_args(self) -> list[str]:
        """Beam arguments that submit to the job server; each TaskManager reaches its own
        worker pool at localhost, as in the pod."""
        return [
            *processes.portable_beam_args(
                f"localhost:{self.job_port}", f"localhost:{flink.WORKER_POOL_PORT}"
            ),
            f"--parallelism={self.parallelism}",
        ]

    def logs(self, container: str) -> str:
        result = subprocess.run(
            ["docker", "logs", "--tail", str(_LOG_TAIL_LINES), container],
            capture_output=True,
            text=True,
            timeout=DOCKER_TIMEOUT_SECONDS,
            check=False,
        )
        return (result.stdout + result.stderr).strip()

    def containers(self) -> list[str]:
        return docker(
            "ps", "-a", "--filter", f"label={LABEL}={self.name}", "--format", "{{.Names}}"
        ).split()

    def check_running(self) -> None:
        """Raises ServerFailed, with its log's end, if a container of the cluster is not
        running (a paused one is)."""
        names = self.containers()
        states = docker("inspect", "--format", "{{.Name}} {{.State.Status}}", *names).splitlines()
        for line in states:
            container, state = line.lstrip("/").split()
            if state not in ("running", "paused"):
                raise processes.ServerFailed(
                    f"container {container} is {state}; its log ends:\n{self.logs(container)}"
                )


def _run(
    name: str,
    cluster: str,
    image: str,
    *args: str,
    network: str,
    options: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> str:
    """Starts a container of `cluster`, labelled so that its removal cannot miss it."""
    envs = [f"--env={key}={value}" for key, value in (env or {}).items()]
    docker(
        "run",
        "--detach",
        f"--name={name}",
        f"--label={LABEL}={cluster}",
        f"--label={OWNER_LABEL}={os.getpid()}",
        f"--network={network}",
        *options,
        *envs,
        image,
        *args,
    )
    return name


def remove_cluster(name: str) -> None:
    """Removes every container and the network of cluster `name` (paused ones included)."""
    found = docker("ps", "-aq", "--filter", f"label={LABEL}={name}", check=False).split()
    paused = docker(
        "ps", "-q", "--filter", f"label={LABEL}={name}", "--filter", "status=paused", check=False
    ).split()
    if paused:
        docker("unpause", *paused, check=False)
    if found:
        docker("rm", "--force", "--volumes", *found, check=False)
    networks = docker(
        "network", "ls", "-q", "--filter", f"label={LABEL}={name}", check=False
    ).split()
    if networks:
        docker("network", "rm", *networks, check=False)


def remove_orphans() -> list[str]:
    """Removes the clusters whose making process is gone (a test killed outright);
    returns their names."""
    rows = docker(
        "ps",
        "-a",
        "--filter",
        f"label={LABEL}",
        "--format",
        f'{{{{.Label "{LABEL}"}}}} {{{{.Label "{OWNER_LABEL}"}}}}',
        check=False,
    ).splitlines()
    orphans = sorted(
        {
            name
            for name, pid in (row.split() for row in rows if len(row.split()) == 2)
            if not pid.isdigit() or not os.path.exists(f"/proc/{pid}")
        }
    )
    for name in orphans:
        remove_cluster(name)
    return orphans


def _job_server_ready(port: int) -> bool:
    # The published port accepts connections before the job server listens (Docker's
    # proxy does): only a gRPC handshake says the server is there.
    import grpc  # type: ignore[import-untyped]

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=_HANDSHAKE_SECONDS)
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()
    return True


def _worker_pool_ready(taskmanager: str) -> bool:
    # From the TaskManager's side of the shared namespace, as Flink will reach it.
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{flink.WORKER_POOL_PORT}"
    return (
        subprocess.run(
            ["docker", "exec", taskmanager, "bash", "-c", probe],
            capture_output=True,
            timeout=DOCKER_TIMEOUT_SECONDS,
            check=False,
        ).returncode
        == 0
    )


def _wait_ready(cluster: ContainerCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        cluster.check_running()
        try:
            overview = cluster.overview()
        except OSError:
            overview = {}
        if (
            overview.get("taskmanagers") == len(cluster.taskmanagers)
            and overview.get("slots-total") == len(cluster.taskmanagers) * flink.SLOTS
            and all(_worker_pool_ready(tm) for tm in cluster.taskmanagers)
            and _job_server_ready(cluster.job_port)
        ):
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {name}:\n{cluster.logs(name)}" for name in cluster.containers())
            raise processes.ServerFailed(
                f"the Flink containers were not ready after {timeout:.0f} s; the logs end:\n{tails}"
            )
        time.sleep(_POLL_SECONDS)


@contextlib.contextmanager
def container_cluster(
    image: str,
    worker_image: str,
    taskmanagers: int = TASKMANAGERS,
    jobmanager_properties: Mapping[str, str] | None = None,
    startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
) -> Iterator[ContainerCluster]:
    """Starts the cluster's containers and its network; removes them when the block is left.

    Args:
      image: the Flink image (flink_image.image_tag(), built by `make flink-image`).
      worker_image: the project image, whose Python runs the SDK worker pools.
      taskmanagers: how many TaskManagers (each with flink.SLOTS slots and its pool).
      jobmanager_properties: Flink settings that replace the image's on the JobManager
        (e.g. its restart strategy).

    Raises:
      DockerFailed: a docker command failed.
      ServerFailed: a container ended, or the cluster was not ready in time.
    """
    remove_orphans()
    name = f"{NAME_PREFIX}{secrets.token_hex(4)}"
    shared = tempfile.mkdtemp(prefix=f"{name}-", dir=SHARED_PARENT)
    # Written by the launching process, the job server (flink) and the SDK workers (the
    # project image's user): as a ReadWriteMany claim with a shared group would be.
    os.chmod(shared, 0o777)
    volume = (f"--volume={shared}:{shared}",)
    try:
        docker("network", "create", f"--label={LABEL}={name}", name)
        rest_port = processes.free_port()
        _run(
            f"{name}-jobmanager",
            name,
            image,
            "jobmanager",
            network=name,
            options=(
                f"--network-alias={flink_image.JOBMANAGER_HOST}",
                f"--publish=127.0.0.1:{rest_port}:{flink_image.REST_PORT}",
                *volume,
            ),
            env={
                "FLINK_PROPERTIES": "".join(
                    f"{key}: {value}\n" for key, value in (jobmanager_properties or {}).items()
                )
            },
        )
        tms, pools = [], []
        for number in range(1, taskmanagers + 1):
            host = f"{flink_image.TASKMANAGER_PREFIX}{number}"
            tm = _run(
                f"{name}-{host}",
                name,
                image,
                "taskmanager",
                network=name,
                options=(f"--network-alias={host}", f"--hostname={host}", *volume),
                env={"FLINK_PROPERTIES": flink_image.taskmanager_properties(number)},
            )
            pool = _run(
                f"{name}-worker-pool-{number}",
                name,
                worker_image,
                "-m",
                "apache_beam.runners.worker.worker_pool_main",
                f"--service_port={flink.WORKER_POOL_PORT}",
                network=f"container:{tm}",
                options=("--entrypoint=python", *volume),
            )
            tms.append(tm)
            pools.append(pool)
        # The job server advertises its artifact endpoint as --job-host:--artifact-port,
        # 0.0.0.0 (every interface): the host reaches it only if the published port is
        # the same number.
        job_port, artifact_port = processes.free_port(), processes.free_port()
        _run(
            f"{name}-job-server",
            name,
            image,
            "job-server",
            f"--flink-master={flink_image.JOBMANAGER_HOST}:{flink_image.REST_PORT}",
            "--job-host=0.0.0.0",
            f"--job-port={job_port}",
            f"--artifact-port={artifact_port}",
            "--expansion-port=0",
            f"--artifacts-dir={shared}/beam-artifacts",
            network=name,
            options=(
                "--network-alias=job-server",
                f"--publish=127.0.0.1:{job_port}:{job_port}",
                f"--publish=127.0.0.1:{artifact_port}:{artifact_port}",
                *volume,
            ),
        )
        cluster = ContainerCluster(
            name=name,
            shared_dir=shared,
            rest_port=rest_port,
            job_port=job_port,
            taskmanagers=tuple(tms),
            worker_pools=tuple(pools),
            parallelism=flink.SLOTS,
        )
        _wait_ready(cluster, startup_timeout)
        yield cluster
    finally:
        remove_cluster(name)
        shutil.rmtree(shared, ignore_errors=True)
