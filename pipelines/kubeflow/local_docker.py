"""The compiled package under kfp.local's DockerRunner: `imgpipe kfp run-local`.

Every step runs in its image exactly as the package writes it (image, command,
arguments), with what DockerRunner cannot read from the package given as its run
options, from the same definitions the compiler uses (security.py): the image's user,
no capabilities, no privilege escalation, a read-only root with a tmpfs on /tmp, and
the container environment the package declares.

DockerRunner mounts the pipeline root into each container at the same path, and
nothing else. A cluster mounts one volume that holds the data, the pipeline root and
the serving directory (kubeflow.pvc_name); here the data root (read-only) and the
serving directory are bind-mounted at their own paths when they lie outside the
pipeline root, so the package's paths mean the same inside and outside the containers.

kfp.local 2.16 reports a step as succeeded when its container was removed before its
exit code was read, so a run is judged by its outputs: every task must have left an
executor output that names its artifacts, and every output artifact must exist. A
failed step is reported with the tail of its log.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from imgpipe.pipelines.images import RUNTIME_GID, RUNTIME_UID
from imgpipe.pipelines.kubeflow import security

LOG_TAIL_LINES = 15
# kfp.local's pipeline orchestrator names each task's folder after its component.
EXECUTOR_OUTPUT_FILE = "executor_output.json"
_TASK_START = "Executing task "


class LocalRunError(Exception):
    """A local run that cannot start or did not finish; the message names the fix or
    the failed step (the CLI prints it as a user error)."""


def docker_client():
    """A client of the local Docker engine, asked once that it answers.

    Raises:
      LocalRunError: the docker package is missing or no engine answers, naming the fix.
    """
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError:
        raise LocalRunError(
            "kfp run-local needs the `docker` Python package: pip install docker"
        ) from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:  # docker raises DockerException, requests' and OS errors
        reason = " ".join(str(e).split())[:200]
        raise LocalRunError(
            f"no Docker engine answers at {where} ({reason}); start one "
            "(`sudo systemctl start docker`) or set DOCKER_HOST, then run again"
        ) from None
    return client


def step_images(spec: Mapping[str, Any]) -> list[str]:
    """The distinct images the package's steps run."""
    executors = spec["deploymentSpec"]["executors"].values()
    return sorted({e["container"]["image"] for e in executors if "container" in e})


def check_images(client, images: Sequence[str]) -> None:
    """Raises LocalRunError unless every image is on the engine (no registry is asked).

    kfp.local would pull a missing image, and a failed pull surfaces as a traceback in
    the middle of the run.
    """
    import docker

    from imgpipe.pipelines import images as image_names

    for image in images:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            gpu = image == image_names.GPU_IMAGE
            build = (
                "build it (`make image-gpu`: the CUDA image, 9 GB), or run the Trainer in "
                "the CPU image: kubeflow.images: {Trainer: " + image_names.RUNTIME_IMAGE + "}"
                if gpu
                else "build it (`make image`)"
            )
            raise LocalRunError(
                f"image {image} is not on the local Docker engine: {build}; or `docker pull` "
                "it, or name a local image in the config's kubeflow.images; then compile "
                "again"
            ) from None


EXECUTOR_CLASS_FLAG = "--executor_class_path"


def step_environments(spec: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Executor class -> the container environment the package declares for its steps
    (kfp.local does not pass it on).

    Raises:
      LocalRunError: two steps of one executor class declare different values for one
        variable (kfp.local tells the steps apart by their class).
    """
    envs: dict[str, dict[str, str]] = {}
    for label, executor in sorted(spec["deploymentSpec"]["executors"].items()):
        container = executor.get("container")
        if container is None:
            continue
        env = envs.setdefault(executor_class(container.get("args", [])), {})
        for item in container.get("env", []):
            name, value = item["name"], item.get("value", "")
            if env.setdefault(name, value) != value:
                raise LocalRunError(
                    f"{label} sets {name}={value!r}, another step of its class {env[name]!r}; "
                    "kfp run-local gives them one environment"
                )
    return envs


def executor_class(command: Sequence[str]) -> str:
    """The executor class a step's command runs (TFX's --executor_class_path), or ""."""
    args = list(command)
    if EXECUTOR_CLASS_FLAG in args[:-1]:
        return args[args.index(EXECUTOR_CLASS_FLAG) + 1]
    return ""


def common_environment(envs: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The variables every step declares with the same value."""
    tables = list(envs.values())
    if not tables:
        return {}
    return {k: v for k, v in tables[0].items() if all(t.get(k) == v for t in tables[1:])}


def trainer_workers_options(network: str) -> dict[str, Any]:
    """The Trainer step's own run options with trainer.workers > 1: its workers run as
    containers of its image on `network`
    (components/trainer/several_workers/docker_containers.py), which the Trainer starts
    through the engine's socket, mounted into its container alone, with the socket's
    group. A stand-in for the TFJob a cluster runs, on this machine only.

    Raises:
      LocalRunError: the engine's socket is not a local file.
    """
    from docker.types import Mount  # type: ignore[import-untyped]

    from imgpipe.components.trainer.several_workers import (
        DOCKER_LAUNCHER,
        WORKERS_DOCKER_NETWORK_ENV,
        WORKERS_DOCKER_SOCKET,
        WORKERS_LAUNCHER_ENV,
    )

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    path = host.removeprefix("unix://")
    if "://" in path or not os.path.exists(path):
        raise LocalRunError(
            f"trainer.workers > 1 under kfp run-local starts the workers through the Docker "
            f"engine's socket, and {host} is not a socket on this machine; unset DOCKER_HOST "
            "(a local engine), or set trainer.workers=1"
        )
    return {
        "environment": {
            WORKERS_LAUNCHER_ENV: DOCKER_LAUNCHER,
            WORKERS_DOCKER_NETWORK_ENV: network,
            "DOCKER_HOST": f"unix://{WORKERS_DOCKER_SOCKET}",
        },
        "mounts": [Mount(target=WORKERS_DOCKER_SOCKET, source=path, type="bind")],
        "group_add": [str(os.stat(path).st_gid)],
    }


def trainer_extra(
    spec: Mapping[str, Any], envs: Mapping[str, Mapping[str, str]], workers_network: str | None
) -> dict[str, dict[str, Any]]:
    """The Trainer's own run options (by executor class, for per_step_options): its
    worker containers' with trainer.workers > 1 (the package then names a launcher for
    its workers), else none.

    Raises:
      LocalRunError: the package trains on several workers and no network is named.
    """
    from imgpipe.components.trainer.several_workers import WORKERS_LAUNCHER_ENV
    from imgpipe.pipelines import component_ids as ids

    component = spec["root"]["dag"]["tasks"][ids.TRAINER]["componentRef"]["name"]
    label = spec["components"][component]["executorLabel"]
    trainer = executor_class(spec["deploymentSpec"]["executors"][label]["container"]["args"])
    if WORKERS_LAUNCHER_ENV not in envs.get(trainer, {}):
        return {}
    if not workers_network:
        raise LocalRunError(
            "the package trains on several workers (trainer.workers > 1): kfp run-local runs "
            "them as containers on a Docker network; create one (`docker network create "
            "NAME`) and give --workers-network NAME, or compile with trainer.workers=1"
        )
    return {trainer: trainer_workers_options(workers_network)}


@contextlib.contextmanager
def per_step_options(
    envs: Mapping[str, Mapping[str, str]], extra: Mapping[str, Mapping[str, Any]]
) -> Iterator[None]:
    """Gives each step its own environment (`envs`, by executor class) and the `extra`
    run options of its class (an environment, mounts, groups), on top of the
    DockerRunner's options, which are one set for every step
    (tfx_patches.wrapped_docker_runs).
    """
    from imgpipe.pipelines import tfx_patches

    def wrap(original):
        def run_step(client, image, command, volumes, **options):
            step = executor_class(command or [])
            options = dict(options)
            options["environment"] = {
                **options.get("environment", {}),
                **envs.get(step, {}),
                **extra.get(step, {}).get("environment", {}),
            }
            for key, value in extra.get(step, {}).items():
                if key != "environment":
                    options[key] = [*options.get(key, []), *value]
            return original(client=client, image=image, command=command, volumes=volumes, **options)

        return run_step

    with tfx_patches.wrapped_docker_runs(wrap):
        yield


def _under(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(root)]) == os.path.abspath(
        root
    )


def volume_mounts(pipeline_root: str, read_only: Sequence[str], writable: Sequence[str]) -> list:
    """docker Mounts of local folders (and, read-only, files) outside the pipeline root,
    at their own paths.

    Object-store paths (with a scheme) and paths under the pipeline root (which
    DockerRunner mounts itself) are left out.
    """
    from docker.types import Mount

    mounts = []
    for paths, ro in ((read_only, True), (writable, False)):
        for path in paths:
            path = fixed_part(path)
            if "://" in path or _under(path, pipeline_root):
                continue
            path = os.path.abspath(path)
            if not ro:
                os.makedirs(path, exist_ok=True)
            elif not os.path.exists(path):
                raise LocalRunError(f"{path}: no such file or folder; the steps read from it")
            mounts.append(Mount(target=path, source=path, type="bind", read_only=ro))
    return mounts


def fixed_part(path: str) -> str:
    """The folders of `path` before its first pattern ({SPAN}, {VERSION}, ...)."""
    if "{" not in path:
        return path
    return os.path.dirname(path[: path.index("{")].rstrip("/") + "x") or "/"


def runner_options(
    environment: Mapping[str, str], mounts: Sequence = (), network: str | None = None
) -> dict[str, Any]:
    """DockerRunner's run options: security.py's restrictions, under Docker.

    Args:
      environment: the containers' environment.
      mounts: docker Mounts besides the pipeline root.
      network: a Docker network mode ("none" cuts the steps off); None is Docker's default.
    """
    network_options = {"network_mode": network} if network else {}
    return {
        **network_options,
        "user": f"{RUNTIME_UID}:{RUNTIME_GID}",
        "read_only": security.CONTAINER_SECURITY_CONTEXT["readOnlyRootFilesystem"],
        "tmpfs": {security.WRITABLE_TMP: "rw,exec,mode=1777"},
        # Kubernetes' `command` replaces the image's ENTRYPOINT; Docker's would be
        # prepended to it, so it is reset, and each step runs the package's command.
        "entrypoint": [""],
        "cap_drop": list(security.CONTAINER_SECURITY_CONTEXT["capabilities"]["drop"]),
        "security_opt": ["no-new-privileges"],
        "environment": dict(environment),
        "mounts": list(mounts),
    }


class _LogTail(io.TextIOBase):
    """Passes kfp.local's output through and keeps the last lines of each task's log."""

    def __init__(self, out) -> None:
        self.out = out
        self.tails: dict[str, collections.deque[str]] = {}
        self.task = ""
        self._partial = ""

    def write(self, text: str) -> int:
        self.out.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if _TASK_START in line:
                name = _strip_colour(line.split(_TASK_START, 1)[1])
                self.task = name.strip().strip("'\"")
            self.tails.setdefault(self.task, collections.deque(maxlen=LOG_TAIL_LINES)).append(
                line.rstrip()
            )
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def tail(self, task: str) -> list[str]:
        return list(self.tails.get(task, ()))


def _docker_reason(error: Exception) -> str:
    return " ".join(str(getattr(error, "explanation", None) or error).split())[:300]


def _strip_colour(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def task_folders(spec: Mapping[str, Any]) -> dict[str, str]:
    """Task name -> the folder kfp.local runs it in, under the run's folder."""
    from kfp.local import executor_input_utils

    tasks = spec["root"]["dag"]["tasks"]
    return {
        name: executor_input_utils.get_local_task_resource_name(task["componentRef"]["name"])
        for name, task in tasks.items()
    }


def check_outputs(spec: Mapping[str, Any], run_dir: str, tails: _LogTail | None = None) -> None:
    """Raises LocalRunError naming the first step without complete outputs, with its log.

    Complete: the step wrote its executor output, it names an artifact for every output
    the component declares, and each artifact's folder or file exists.
    """
    tasks = spec["root"]["dag"]["tasks"]
    for task, folder in sorted(task_folders(spec).items(), key=lambda kv: _order(spec, kv[0])):
        component = spec["components"][tasks[task]["componentRef"]["name"]]
        declared = component.get("outputDefinitions", {}).get("artifacts", {})
        problem = _output_problem(os.path.join(run_dir, folder, EXECUTOR_OUTPUT_FILE), declared)
        if problem:
            raise LocalRunError(step_failure(task, problem, tails.tail(folder) if tails else []))


def _output_problem(executor_output: str, declared: Mapping[str, Any]) -> str | None:
    """What is missing from one step's outputs, or None."""
    if not os.path.isfile(executor_output):
        return f"wrote no {EXECUTOR_OUTPUT_FILE}"
    with open(executor_output) as f:
        written = json.load(f).get("artifacts", {})
    for name in sorted(declared):
        artifacts = written.get(name, {}).get("artifacts", [])
        if not artifacts:
            return f"named no {name} artifact"
        missing = [
            a.get("uri", "")
            for a in artifacts
            if "://" not in a.get("uri", "")
            and not os.path.exists(a.get("uri", ""))
            and not _not_pushed(a)
        ]
        if missing:
            return f"left no {name} at {missing[0]}"
    return None


def _not_pushed(artifact: Mapping[str, Any]) -> bool:
    """A Pusher's output that says it pushed nothing (a refused or unblessed model), whose
    folder TFX leaves unmade: a run's answer, not a broken step."""
    from imgpipe.pipelines.local_runner import PUSHED

    metadata = artifact.get("metadata") or {}
    return PUSHED in metadata and not metadata[PUSHED]


def step_failure(task: str, problem: str, tail: Sequence[str]) -> str:
    """The error of a failed step: what is missing, then the end of the step's log."""
    message = f"step {task} failed: it {problem}"
    lines = [line for line in tail if line.strip()]
    if lines:
        message += "; the end of its log:\n" + "\n".join("  | " + line for line in lines)
    return message


def _order(spec: Mapping[str, Any], task: str) -> tuple[int, str]:
    """Topological depth, so that the first broken step is reported, not its dependants."""
    tasks = spec["root"]["dag"]["tasks"]
    depth = 0
    frontier = list(tasks[task].get("dependentTasks", []))
    while frontier:
        depth += 1
        frontier = [d for t in frontier for d in tasks[t].get("dependentTasks", [])]
    return depth, task


def run_folders(spec: Mapping[str, Any], pipeline_root: str, before: set[str]) -> list[str]:
    """The run folders kfp.local made under the pipeline root since `before` was listed,
    oldest first: `<pipeline name>-<%Y-%m-%d-%H-%M-%S-%f>`
    (executor_input_utils.get_local_pipeline_resource_name). Not the other new entries: a
    serving directory under the pipeline root is made by the run's ChampionResolver."""
    name = re.compile(re.escape(spec["pipelineInfo"]["name"]) + r"-\d{4}(?:-\d{2}){5}-\d{6}")
    return sorted(
        entry
        for entry in set(os.listdir(pipeline_root)) - before
        if name.fullmatch(entry) and os.path.isdir(os.path.join(pipeline_root, entry))
    )


def load_spec(package: str) -> dict[str, Any]:
    """The PipelineSpec document of a compiled package (the first YAML document)."""
    import yaml

    with open(package) as f:
        return next(d for d in yaml.safe_load_all(f) if d)


def run_package(
    package: str,
    pipeline_root: str,
    arguments: Mapping[str, Any] | None = None,
    read_only: Sequence[str] = (),
    writable: Sequence[str] = (),
    network: str | None = None,
    workers_network: str | None = None,
) -> str:
    """Runs the compiled package under DockerRunner; returns the run's folder.

    Args:
      package: a YAML package that `imgpipe kfp compile` wrote.
      pipeline_root: a local folder the steps' user can write (the run's volume).
      arguments: pipeline parameters.
      read_only: local folders and files the steps read (the data root, a backbone
        weights file), mounted read-only.
      writable: local folders the steps write (the serving directory).
      network: the steps' Docker network mode; None is Docker's default (object stores
        reachable), "none" runs them offline.
      workers_network: with trainer.workers > 1, the Docker network of the Trainer's
        worker containers (trainer_workers_options).

    Raises:
      LocalRunError: no Docker engine, a missing image, no workers_network for a package
        with trainer.workers > 1, or a step that failed (with the end of its log).
    """
    import docker
    from kfp import components, local

    spec = load_spec(package)
    client = docker_client()
    try:
        check_images(client, step_images(spec))
    finally:
        client.close()
    pipeline_root = os.path.abspath(pipeline_root)
    os.makedirs(pipeline_root, exist_ok=True)
    envs = step_environments(spec)
    options = runner_options(
        common_environment(envs), volume_mounts(pipeline_root, read_only, writable), network
    )
    extra = trainer_extra(spec, envs, workers_network)
    local.init(
        runner=local.DockerRunner(**options), pipeline_root=pipeline_root, raise_on_error=True
    )
    pipeline = components.load_component_from_file(package)
    before = set(os.listdir(pipeline_root))
    tails = _LogTail(sys.stdout)
    failure: str | None = None
    with contextlib.redirect_stdout(tails), per_step_options(envs, extra):
        try:
            pipeline(**dict(arguments or {}))
        except RuntimeError as e:  # kfp.local: "Task X finished with status FAILURE"
            failure = str(e)
        except docker.errors.DockerException as e:  # the engine refused a container
            raise LocalRunError(
                f"step {tails.task}: the Docker engine refused it: {_docker_reason(e)}"
            ) from None
    runs = run_folders(spec, pipeline_root, before)
    if not runs:  # the first step wrote nothing
        by_folder = {folder: task for task, folder in task_folders(spec).items()}
        task = by_folder.get(tails.task, tails.task or "?")
        raise LocalRunError(step_failure(task, "wrote nothing", tails.tail(tails.task)))
    run_dir = os.path.join(pipeline_root, runs[-1])
    # A run that stopped at a step that is not ours, or was killed, gives its serving
    # lease back here, as a local run does when its runner ends.
    release_lease(spec, run_dir)
    check_outputs(spec, run_dir, tails)
    if failure:
        raise LocalRunError(f"kfp.local: {_strip_colour(failure)}")
    return run_dir


def release_lease(spec: Mapping[str, Any], run_dir: str) -> None:
    """Gives back the serving lease the run's ChampionResolver took, if still held."""
    from imgpipe.components.common.formats import champion
    from imgpipe.pipelines import component_ids as ids
    from imgpipe.pipelines.pipeline import CHAMPION_KEY

    node = run_result(spec, run_dir).nodes.get(ids.CHAMPION)
    artifacts = node.outputs.get(CHAMPION_KEY, []) if node else []
    champion.release_run_lease(artifacts[0].uri if artifacts else None)


def run_result(spec: Mapping[str, Any], run_dir: str) -> Any:
    """The run's outputs as local_runner.RunResult, from each step's executor output, so
    `kfp run-local` prints the summary `run local` prints."""
    from imgpipe.pipelines.local_runner import NodeResult, OutputArtifact, RunResult

    nodes = {}
    for task, folder in task_folders(spec).items():
        path = os.path.join(run_dir, folder, EXECUTOR_OUTPUT_FILE)
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            written = json.load(f).get("artifacts", {})
        outputs = {
            key: [
                OutputArtifact(a.get("uri", ""), dict(a.get("metadata") or {}))
                for a in value.get("artifacts", [])
            ]
            for key, value in written.items()
        }
        nodes[task] = NodeResult(state="COMPLETE", outputs=outputs)
    return RunResult(metadata_path=run_dir, nodes=nodes)
