"""The Beam steps on Flink in containers, laid out as k8s/flink-deployment.yaml lays it out
(tests/flink_containers.py): a JobManager, two TaskManagers each with its own
address and its SDK worker pool sidecar, Beam's job server, all on a Docker network of
the test's own. `imgpipe convert` gives the DirectRunner's bytes there, and survives a
TaskManager killed mid-job: Flink's restart strategy (flink_image.RESTART_STRATEGY)
reruns the job on the slots left. Without one, the run fails with a one-line error and
publishes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from imgpipe.components.common.formats import manifest
from imgpipe.pipelines.engines import artifacts, flink
from tests import containers, flink_containers, flink_image, imagegen, outputs

pytestmark = pytest.mark.container

# A few hundred tiny images: the job's length is Flink's and Beam's overhead, not data.
LABELS = {"cat": 100, "dog": 100}
IMAGE_SIZE = (24, 32)
# A conversion on the containers, and the waits for its job to run and to deploy: measured
# busy, 15 s for the direct runner's, 107 s for Flink's.
JOB_TIMEOUT_SECONDS = 900
# The TaskManager the kill tests kill: the last one.
VICTIM_ID = f"{flink_image.TASKMANAGER_PREFIX}{flink_containers.TASKMANAGERS}"
# The Flink task states of a subtask that is deployed and not yet finished.
_DEPLOYED = ("DEPLOYING", "INITIALIZING", "RUNNING")


def _skip_reason() -> str | None:
    if problem := flink_containers.engine_problem():
        return problem
    try:
        flink.flink_lib()
        flink.job_server_lib()
        image = flink_image.image_tag()
    except artifacts.MissingArtifact as missing:
        return str(missing)
    if not flink_containers.image_exists(image):
        return f"the Flink image {image} is not built: build it with 'make flink-image'"
    return None


@pytest.fixture(scope="module")
def cluster():
    if reason := _skip_reason():
        pytest.skip(reason)
    with flink_containers.container_cluster(
        flink_image.image_tag(), containers.runtime_image()
    ) as running:
        yield running


@pytest.fixture(scope="module")
def converted(cluster):
    """The input folder on the shared folder, and the DirectRunner's conversion of it."""
    src = os.path.join(cluster.shared_dir, "src")
    imagegen.make_image_folder(src, LABELS, size=IMAGE_SIZE)
    direct = os.path.join(cluster.shared_dir, "direct")
    _imgpipe(*_convert(src, direct))
    return src, outputs.tree(direct)


def _convert(src: str, out: str) -> list[str]:
    return ["convert", src, out, "--resize", "16", "--shards", "2", "--no-progress"]


def _command(*argv: str) -> list[str]:
    # umask 0: the SDK workers (the project image's user) write into the folders this
    # process (root) makes, as the pods' users share a ReadWriteMany claim.
    return [
        "sh",
        "-c",
        'umask 0 && exec "$@"',
        "sh",
        sys.executable,
        "-m",
        "imgpipe.pipelines.cli",
        *argv,
    ]


def _imgpipe(*argv: str) -> None:
    result = subprocess.run(
        _command("--debug", *argv), capture_output=True, text=True, timeout=JOB_TIMEOUT_SECONDS
    )
    assert result.returncode == 0, result.stderr[-3000:]


def _subtasks(cluster, jid: str) -> list[dict]:
    vertices = cluster.rest(f"/jobs/{jid}")["vertices"]
    return [
        subtask
        for vertex in vertices
        for subtask in cluster.rest(f"/jobs/{jid}/vertices/{vertex['id']}")["subtasks"]
    ]


def _taskmanagers_of(cluster, jid: str) -> set[str]:
    return {subtask["taskmanager-id"] for subtask in _subtasks(cluster, jid)}


def _running_job(cluster, process: subprocess.Popen) -> str:
    """The id of the job `process` submitted, once Flink runs it."""
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        running = [j for j in cluster.rest("/jobs/overview")["jobs"] if j["state"] == "RUNNING"]
        if running:
            return running[0]["jid"]
        time.sleep(0.5)
    raise AssertionError("the job did not start")


def _wait_deployed_on(cluster, jid: str, taskmanager: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        if any(
            s["taskmanager-id"] == taskmanager and s["status"] in _DEPLOYED
            for s in _subtasks(cluster, jid)
        ):
            return
        time.sleep(0.5)
    raise AssertionError(f"no task of job {jid} was deployed on {taskmanager}")


def _kill_mid_job(cluster, src: str, out: str, *flags: str) -> tuple[str, int, str]:
    """Runs `imgpipe convert` on the cluster and kills its last TaskManager mid-job;
    returns the job's id, the command's exit code and its standard error."""
    victim, its_pool = cluster.taskmanagers[-1], cluster.worker_pools[-1]
    # Its worker pool frozen, the victim's share of the job cannot finish: the kill
    # lands mid-job, whatever the machine's speed.
    flink_containers.docker("pause", its_pool)
    process = subprocess.Popen(
        _command(*flags, *_convert(src, out), "--", *cluster.beam_args()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        jid = _running_job(cluster, process)
        _wait_deployed_on(cluster, jid, VICTIM_ID, process)
        flink_containers.docker("kill", victim)
        _, stderr = process.communicate(timeout=JOB_TIMEOUT_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return jid, process.returncode, stderr


def test_without_restarts_a_killed_taskmanager_fails_the_run_and_publishes_nothing():
    """Flink's default when checkpointing is off, as in Beam's batch jobs. Runs first in
    this module, on a cluster of its own, before the module's cluster starts."""
    if reason := _skip_reason():
        pytest.skip(reason)
    with flink_containers.container_cluster(
        flink_image.image_tag(),
        containers.runtime_image(),
        jobmanager_properties={"restart-strategy.type": "none"},
    ) as cluster:
        src = os.path.join(cluster.shared_dir, "src")
        imagegen.make_image_folder(src, LABELS, size=IMAGE_SIZE)
        out = os.path.join(cluster.shared_dir, "flink-killed")
        jid, returncode, stderr = _kill_mid_job(cluster, src, out)
        assert cluster.rest(f"/jobs/{jid}")["state"] == "FAILED"
        with pytest.raises(manifest.IncompleteOutputError):
            manifest.verify(out)
    assert returncode == 1, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("imgpipe: error: the Beam job failed on the runner (FAILED): "), last
    assert VICTIM_ID in last and "Nothing was published" in last
    assert "Traceback" not in stderr


def test_convert_in_containers_matches_the_direct_runner(cluster, converted):
    src, direct = converted
    out = os.path.join(cluster.shared_dir, "flink")
    finished_before = cluster.overview()["jobs-finished"]
    _imgpipe(*_convert(src, out), "--", *cluster.beam_args())

    on_flink = outputs.tree(out)
    assert sorted(on_flink) == sorted(direct)
    assert any("-of-" in name for name in direct)
    assert on_flink == direct
    # It ran as a Flink job, on both TaskManagers' slots.
    assert cluster.overview()["jobs-finished"] == finished_before + 1
    (job,) = [j for j in cluster.rest("/jobs/overview")["jobs"] if j["state"] == "FINISHED"][-1:]
    assert _taskmanagers_of(cluster, job["jid"]) == {"taskmanager-1", "taskmanager-2"}


def test_a_taskmanager_killed_mid_job_is_survived_with_the_same_output(cluster, converted):
    """Runs last in this module: it leaves the cluster one TaskManager short."""
    src, direct = converted
    out = os.path.join(cluster.shared_dir, "flink-killed")
    jid, returncode, stderr = _kill_mid_job(cluster, src, out, "--debug")
    assert returncode == 0, stderr[-3000:]
    assert outputs.tree(out) == direct
    manifest.verify(out)
    # The job failed over (the lost TaskManager is in its exception history) and
    # finished on the TaskManager left.
    assert cluster.rest(f"/jobs/{jid}")["state"] == "FINISHED"
    assert VICTIM_ID in str(cluster.rest(f"/jobs/{jid}/exceptions"))
    assert _taskmanagers_of(cluster, jid) == {f"{flink_image.TASKMANAGER_PREFIX}1"}
