"""A job of trainer workers that Kueue holds (components/trainer/several_workers/
kubernetes_jobs.py; docs/distributed-training.md, "Kueue"): through either kind of job,
a TFJob (spec.runPolicy.suspend) and a JobSet (spec.suspend), against the fake API
server (tests/fake_kubernetes.py), whose Kueue creates a job that names a queue
suspended and whose script admits, preempts and readmits it.

A suspended job is waiting, not failing: the step says it is queued, and for how long;
the start timeout counts from its admission; pods a suspension kills are not failures;
a job preempted after it started runs again once readmitted, on new pods.
"""

from __future__ import annotations

import re

import pytest

from imgpipe.components.common.runtime import kueue
from imgpipe.components.trainer.several_workers import choice, kubernetes_jobs, replicas
from tests.fake_kubernetes import (
    NAMESPACE,
    POD_NAME,
    FakeApiServer,
    assert_calls_are_granted,
    launcher_clock,  # noqa: F401 - an autouse fixture
    served_step,
)

pytestmark = pytest.mark.unit


QUEUE = "gpu-a100"
# Each kind's condition of success, as its controller sets it.
SUCCEEDED = {"tfjob": "Succeeded", "jobset": "Completed"}
KINDS = pytest.mark.parametrize("kind", ["tfjob", "jobset"])


@pytest.fixture
def in_step_pod(monkeypatch):
    monkeypatch.setenv(choice.POD_NAME_ENV, POD_NAME)
    monkeypatch.setenv(choice.POD_NAMESPACE_ENV, NAMESPACE)
    monkeypatch.setenv(kueue.QUEUE_ENV, QUEUE)


def run(server: FakeApiServer, tmp_path, start_timeout_s: float = 60.0, queued_report_s=60.0):
    launcher = kubernetes_jobs.KubernetesJobs(
        server.kind,
        server.client,
        poll_seconds=0.02,
        start_timeout_s=start_timeout_s,
        queued_report_s=queued_report_s,
    )
    try:
        launcher.run(
            {"the": "job"},
            2,
            str(tmp_path / "model_run" / ".workers-job"),
            str(tmp_path / "model_run" / "workers"),
            ["s3://b/train"],
        )
    finally:
        server.close()


def said(err: str, what: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("Trainer: ") and what in line]


@KINDS
def test_a_job_queued_past_the_start_timeout_waits_and_its_timeout_counts_from_admission(
    kind, in_step_pod, tmp_path, capfd
):
    queued_polls = 150  # 3 s queued (its polls), ten times the start timeout

    def script(polls):
        if polls <= queued_polls:
            return [], None  # suspended: created with the queue label
        # Admitted; worker 1 can never be scheduled.
        return [("Running", None), ("Pending", None)], None, False

    server = FakeApiServer(served_step(tmp_path), script, {}, kind=kind)
    server.pending_status = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ]
    }
    with pytest.raises(replicas.WorkersFailed) as e:
        run(server, tmp_path, start_timeout_s=0.3, queued_report_s=1.0)
    (name,) = server.jobs
    assert server.jobs[name]["metadata"]["labels"][kueue.QUEUE_LABEL] == QUEUE
    assert server.polls > queued_polls  # it did not fail while queued
    message = str(e.value)
    # Measured from the admission (0.3 s of polls), not from the creation (3.3 s).
    assert re.match(
        r"trainer worker 1 of 2 \(pod \S+\) has not started after 0 s: it cannot be "
        r"scheduled: 0/3 nodes are available",
        message,
    ), message
    assert "\n" not in message and server.deleted == [name]
    err = capfd.readouterr().err
    job = f"{server.jobs[name]['kind']} {NAMESPACE}/{name}"
    queued = said(err, f"{job} is queued in {QUEUE} (Kueue) for ")
    assert queued[0] == f"Trainer: {job} is queued in {QUEUE} (Kueue) for 0 s"  # at once
    assert len(queued) >= 2  # and again every queued_report_s
    assert said(err, f"{job} was admitted after ")
    assert_calls_are_granted(server.calls)


@KINDS
def test_a_job_preempted_after_it_started_runs_again_once_readmitted(
    kind, in_step_pod, tmp_path, capfd
):
    """The pods Kueue's suspension kills may show Failed, or be deleting: neither fails
    the training; readmitted, the job's new pods are followed."""

    def script(polls):
        if polls <= 2:
            return [], None
        if polls <= 6:
            return [("Running", None), ("Running", None)], None, False
        if polls <= 9:  # preempted: suspended again, its pods killed
            return [("Failed", 137), ("Running", None)], None, True
        if polls <= 12:
            return [("Running", None), ("Running", None)], None, False
        return [("Succeeded", 0), ("Succeeded", 0)], SUCCEEDED[kind]

    server = FakeApiServer(served_step(tmp_path), script, {0: "chief done\n"}, kind=kind)
    run(server, tmp_path)
    (name,) = server.jobs
    assert server.admissions == 2 and server.deleted == [name]
    err = capfd.readouterr().err
    job = f"{server.jobs[name]['kind']} {NAMESPACE}/{name}"
    assert said(err, f"{job} was suspended again by Kueue (preempted) after its admission")
    assert len(said(err, f"{job} was admitted after ")) == 2
    assert len(said(err, f"{job} is queued in {QUEUE}")) == 2
    assert (tmp_path / "model_run" / "workers" / "worker-0.log").read_text() == "chief done\n"
    assert_calls_are_granted(server.calls)


@KINDS
def test_a_job_suspended_without_a_queue_names_the_setting(
    kind, in_step_pod, monkeypatch, tmp_path, capfd
):
    """Kueue's manageJobsWithoutQueueName suspends a job that names no queue."""
    monkeypatch.delenv(kueue.QUEUE_ENV)

    def script(polls):
        if polls <= 2:
            return [], None, True
        if polls <= 4:
            return [("Running", None), ("Running", None)], None, False
        return [("Succeeded", 0), ("Succeeded", 0)], SUCCEEDED[kind]

    server = FakeApiServer(served_step(tmp_path), script, {}, kind=kind)
    run(server, tmp_path)
    (name,) = server.jobs
    assert kueue.QUEUE_LABEL not in server.jobs[name]["metadata"]["labels"]
    err = capfd.readouterr().err
    job = f"{server.jobs[name]['kind']} {NAMESPACE}/{name}"
    assert said(err, f"{job} is suspended for 0 s and names no Kueue queue") == [
        f"Trainer: {job} is suspended for 0 s and names no Kueue queue: set "
        "kubeflow.queue_name to a LocalQueue of its namespace (Kueue's "
        "manageJobsWithoutQueueName holds a job without one)"
    ]
