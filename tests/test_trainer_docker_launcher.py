"""trainer.workers > 1 under `imgpipe kfp run-local`: the worker containers made from the
Trainer's own container (components/trainer/several_workers/docker_containers.py), and the
Trainer's own run options (pipelines/kubeflow/local_docker.py). The container tier runs
them: tests/test_kubeflow_docker_workers.py."""

from __future__ import annotations

import json
import os

import pytest

from imgpipe.components.trainer.several_workers import (
    choice,
    cluster,
    docker_containers,
    step_pod,
)
from imgpipe.pipelines.kubeflow import local_docker

pytestmark = pytest.mark.unit

IMAGE = "ghcr.io/tfx-image-pipeline/tfx-image-pipeline:0.1.0-abc"


def trainer_container(tmp_path) -> dict:
    """The Trainer step's container as the engine inspects it under kfp run-local."""
    root = str(tmp_path / "root")
    return {
        "Id": "c0ffee" * 10 + "abcd",
        "Config": {
            "Image": IMAGE,
            "User": "1000:1000",
            "Env": [
                f"{choice.LAUNCHER_ENV}={choice.DOCKER}",
                f"{choice.DOCKER_NETWORK_ENV}=net",
                f"DOCKER_HOST=unix://{choice.DOCKER_SOCKET}",
                "HOSTNAME=c0ffeec0ffee",
                "AWS_ACCESS_KEY_ID=key",
                "TMPDIR=/tmp",
            ],
        },
        "HostConfig": {
            "ReadonlyRootfs": True,
            "Tmpfs": {"/tmp": "rw,exec,mode=1777"},
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "GroupAdd": ["998"],
        },
        "Mounts": [
            {"Type": "bind", "Source": root, "Destination": root, "RW": True},
            {"Type": "bind", "Source": "/data", "Destination": "/data", "RW": False},
            {
                "Type": "bind",
                "Source": "/run/docker.sock",
                "Destination": choice.DOCKER_SOCKET,
                "RW": True,
            },
        ],
    }


def test_a_worker_container_is_the_trainers_without_the_socket(tmp_path):
    own = trainer_container(tmp_path)
    job = step_pod.job_name(own["Id"])
    addresses = docker_containers.worker_addresses(job, 2)
    folder = str(tmp_path / "root" / "model_run" / ".workers-job")
    spec = docker_containers.worker_spec(own, cluster.Member(addresses, 1), folder)
    assert spec["image"] == IMAGE and spec["user"] == "1000:1000"
    assert spec["command"] == [*choice.WORKER_COMMAND, folder]
    assert spec["name"] == spec["hostname"] == f"{job}-worker-1"
    assert spec["read_only"] and spec["cap_drop"] == ["ALL"]
    assert spec["tmpfs"] == {"/tmp": "rw,exec,mode=1777"}
    assert spec["pid_mode"] == f"container:{own['Id']}"
    assert [(m["Target"], m["ReadOnly"]) for m in spec["mounts"]] == [
        (str(tmp_path / "root"), False),
        ("/data", True),
    ]
    env = dict(item.split("=", 1) for item in spec["environment"])
    assert env["AWS_ACCESS_KEY_ID"] == "key"
    assert not {choice.LAUNCHER_ENV, choice.DOCKER_NETWORK_ENV, "DOCKER_HOST"} & set(env)
    config = json.loads(env["TF_CONFIG"])
    assert config["cluster"]["worker"] == [f"{job}-worker-0:2222", f"{job}-worker-1:2222"]
    assert config["task"] == {"type": "worker", "index": 1}
    assert docker_containers.bind_targets(own) == [str(tmp_path / "root"), "/data"]


GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


def test_run_local_gives_only_the_trainer_the_socket_and_needs_a_network():
    spec = local_docker.load_spec(os.path.join(GOLDEN, "pipeline-workers.yaml"))
    envs = local_docker.step_environments(spec)
    with pytest.raises(local_docker.LocalRunError, match=r"give --workers-network NAME"):
        local_docker.trainer_extra(spec, envs, None)
    (trainer_class,) = extra = local_docker.trainer_extra(spec, envs, "net")
    assert trainer_class == "imgpipe.components.trainer.executor.Executor"
    options = extra[trainer_class]
    assert options["environment"][choice.LAUNCHER_ENV] == choice.DOCKER
    assert options["environment"][choice.DOCKER_NETWORK_ENV] == "net"
    assert [m["Target"] for m in options["mounts"]] == [choice.DOCKER_SOCKET]
    # The Trainer's own artifact I/O (direct) is its alone; the others share theirs.
    common = local_docker.common_environment(envs)
    assert envs[trainer_class]["IMGPIPE_KFP_ARTIFACT_IO"] == "direct"
    assert "IMGPIPE_KFP_ARTIFACT_IO" not in common or common["IMGPIPE_KFP_ARTIFACT_IO"] != "direct"
    single = local_docker.load_spec(os.path.join(GOLDEN, "pipeline.yaml"))
    assert local_docker.trainer_extra(single, local_docker.step_environments(single), None) == {}
