"""trainer.workers=2 under `imgpipe kfp run-local`: the Trainer step starts its workers
as containers of the project image (components/trainer/several_workers/
docker_containers.py, the local stand-in for the TFJob) on a Docker network this test
creates, as the image's user.

One run has worker 1's container killed once the chief's log shows training: the run
fails within FAILURE_BOUND_SECONDS naming that container, no worker container is left
and nothing is pushed. The rerun finishes, and its pushed model classifies photos no
span holds. Not the Training Operator: see docs/distributed-training.md.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from imgpipe.components.common.formats import served_models
from imgpipe.components.trainer import summary
from imgpipe.components.trainer.several_workers import cluster, docker_containers
from imgpipe.pipelines import cli
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines.images import RUNTIME_GID, RUNTIME_UID
from imgpipe.pipelines.kubeflow import local_docker
from tests import containers, waiting
from tests import test_kubeflow_docker as single

pytestmark = pytest.mark.container

# From the kill to run-local's error: the launcher polls every second, then the Trainer
# step and kfp.local end (a minute is generous on two busy cores).
FAILURE_BOUND_SECONDS = 120.0
TRAINING_STARTED = "Epoch 1/"
WORKERS = 2


@pytest.fixture
def workers_network():
    """A Docker network of this test's own, removed with whatever is left on it."""
    client = containers.docker_client()
    name = f"imgpipe-test-workers-{uuid.uuid4().hex[:10]}"
    network = client.networks.create(name, driver="bridge")
    try:
        yield name
    finally:
        for container in _worker_containers(client, name):
            container.remove(force=True)
        network.remove()
        client.close()


def _worker_containers(client, network: str) -> list:
    return client.containers.list(
        all=True,
        filters={"label": docker_containers.TRAINER_CONTAINER_LABEL, "network": network},
    )


def _by_index(found: list) -> dict[int, object]:
    return {int(c.labels[docker_containers.WORKER_INDEX_LABEL]): c for c in found}


def test_a_trainer_container_killed_outright_takes_its_workers_with_it(tmp_path):
    """No launcher is left to remove the workers after a SIGKILL: they end with the
    Trainer's container, as a TFJob goes with its pod. The worker runs a sleep here, in
    place of the training, made from the Trainer's container as the launcher makes it."""
    client = containers.docker_client()
    image = containers.runtime_image()
    made = []
    try:
        trainer = client.containers.run(
            image, ["sleep", "600"], entrypoint=[], network_mode="none", detach=True
        )
        made.append(trainer)
        own = client.api.inspect_container(trainer.id)
        member = cluster.Member(docker_containers.worker_addresses(trainer.id[:12], 1), 0)
        spec = docker_containers.worker_spec(own, member, str(tmp_path))
        spec.update(command=["sleep", "600"], entrypoint=[], network_mode="none")
        worker = client.containers.create(**spec)
        made.append(worker)
        worker.start()
        worker.reload()
        assert worker.status == "running"

        trainer.kill()  # SIGKILL
        code = worker.wait(timeout=waiting.AT_ONCE_S)["StatusCode"]
        worker.reload()
        assert worker.status == "exited" and code == 137
    finally:
        for container in made:
            container.remove(force=True)
        client.close()


def test_two_worker_containers_train_a_killed_one_fails_the_run_and_a_rerun_serves(
    tmp_path, capsys, workers_network
):
    image = containers.runtime_image()
    # Fewer steps than the single-worker test's 40: 2 workers are slower on 2 cores.
    trainer = {**single.SETTINGS["trainer"], "workers": WORKERS, "min_train_steps": 16}
    config, package, _, serving = single.compiled_project(
        tmp_path, image, {**single.SETTINGS, "trainer": trainer}
    )
    spec = local_docker.load_spec(package)
    run = [
        "kfp",
        "run-local",
        "--config",
        config,
        "--package",
        package,
        "--network",
        "none",
        "--workers-network",
        workers_network,
    ]

    # Without the network, one line naming the option.
    assert cli.main(run[:-2]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--workers-network NAME" in err, err

    client = containers.docker_client()
    seen: dict[str, object] = {}

    def kill_worker_1_once_training() -> None:
        deadline = time.monotonic() + waiting.TRAINING_S
        while time.monotonic() < deadline:
            found = _by_index(_worker_containers(client, workers_network))
            if len(found) == WORKERS and all(c.status == "running" for c in found.values()):
                chief_log = found[cluster.CHIEF].logs().decode(errors="replace")
                if TRAINING_STARTED in chief_log:
                    seen["attrs"] = [found[i].attrs for i in range(WORKERS)]
                    found[1].kill()
                    seen["killed_at"] = time.monotonic()
                    seen["name"] = found[1].name
                    return
            time.sleep(0.5)

    killer = threading.Thread(target=kill_worker_1_once_training, daemon=True)
    killer.start()
    try:
        code = cli.main(run)
        ended = time.monotonic()
        killer.join(waiting.AT_ONCE_S)
        out, err = capsys.readouterr()
        assert "killed_at" in seen, f"no training was seen to start: {err[-3000:]}"
        with capsys.disabled():
            print(f"\nrun-local failed {ended - seen['killed_at']:.1f} s after the kill")
        assert code == 1
        assert ended - seen["killed_at"] < FAILURE_BOUND_SECONDS
        assert (
            f"trainer worker 1 of {WORKERS} (container {seen['name']}) exited with code 137" in err
        )
        assert "the other worker containers were removed and nothing was exported" in err
        assert not _worker_containers(client, workers_network)
        assert served_models.latest(serving) is None

        # What each worker ran as, where, and whom TF_CONFIG named.
        aliases = []
        for index, attrs in enumerate(seen["attrs"]):
            assert attrs["Config"]["User"] == f"{RUNTIME_UID}:{RUNTIME_GID}"
            assert attrs["HostConfig"]["ReadonlyRootfs"]
            assert not any(m["Destination"].endswith("docker.sock") for m in attrs["Mounts"])
            (endpoint,) = attrs["NetworkSettings"]["Networks"].values()
            assert list(attrs["NetworkSettings"]["Networks"]) == [workers_network]
            aliases.append(attrs["Name"].lstrip("/"))
            tf_config = next(
                e.split("=", 1)[1] for e in attrs["Config"]["Env"] if e.startswith("TF_CONFIG=")
            )
            assert cluster.from_tf_config(tf_config).index == index
            assert aliases[-1] in endpoint["Aliases"]
        assert cluster.from_tf_config(tf_config).addresses == tuple(f"{a}:2222" for a in aliases)

        rerun_dir = single._run(run, capsys)
    finally:
        client.close()
    assert not _worker_containers(containers.docker_client(), workers_network)
    (model_run,) = single._check_steps(spec, rerun_dir)[ids.TRAINER]["model_run"]
    trained = summary.read_if_present(model_run)
    assert trained is not None and trained.distribution.workers == WORKERS
    for index in range(WORKERS):
        assert os.path.getsize(os.path.join(model_run, "workers", f"worker-{index}.log")) > 0
    champion = served_models.latest(serving)
    assert champion is not None
    assert os.stat(champion.path).st_uid == RUNTIME_UID
    held_back = single._photos(str(tmp_path / "held-back"), str(tmp_path / "staging"), 3, 8)
    assert single._classify(champion.path, held_back) >= 0.75
