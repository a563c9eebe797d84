"""A small fake Kubernetes API server for the Trainer's launcher of TFJobs and JobSets
(components/trainer/several_workers/kubernetes_jobs.py), shared by
tests/test_kubeflow_tfjob.py and tests/test_kubeflow_jobset.py: the endpoints the
launcher calls, through the real kubernetes client, with a scripted controller behind
them that makes either kind's replica pods and moves them through their phases, and
Kueue's webhook (a job labelled with a queue is created suspended). Also the step's pod
the jobs are made from, and the Role of k8s/rbac.yaml every call must be granted by.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes
import pytest
import yaml

from imgpipe.components.common.runtime import kueue
from imgpipe.components.trainer.several_workers import (
    choice,
    jobset_manifest,
    kubernetes_jobs,
    tfjob_manifest,
)
from imgpipe.pipelines.kubeflow import security
from tests.test_k8s_manifests import K8S_DIR

NAMESPACE = "imgpipe"
POD_NAME = "golden-pipeline-abcde-system-container-impl-123"
POD_UID = "0b5c6a3e-1111-4c4c-9d9d-000000000001"
IMAGE = "ghcr.io/tfx-image-pipeline/tfx-image-pipeline-gpu:0.1.0-abc"
CLAIM = "imgpipe-data"


def step_pod(mount_path: str = "/mnt/imgpipe") -> kubernetes.client.V1Pod:
    """A KFP step's pod as Argo makes it: the step's `main` beside Argo's `wait`, the
    compiled package's settings on it, and KFP's and Kubernetes' own volumes."""
    c = kubernetes.client
    secret_env = [
        c.V1EnvVar(
            name=name,
            value_from=c.V1EnvVarSource(
                secret_key_ref=c.V1SecretKeySelector(
                    name=security.OBJECT_STORE_SECRET, key=name, optional=True
                )
            ),
        )
        for name in security.SECRET_ENV
    ]
    main = c.V1Container(
        name="main",
        image=IMAGE,
        command=["/kfp-launcher/launch", "--copy", "/kfp-launcher/launch"],
        env=[
            c.V1EnvVar(name=choice.LAUNCHER_ENV, value=choice.KUBERNETES),
            c.V1EnvVar(name="TMPDIR", value="/tmp"),
            *secret_env,
        ],
        resources=c.V1ResourceRequirements(
            requests={"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": "2"},
            limits={"nvidia.com/gpu": "2"},
        ),
        security_context=c.V1SecurityContext(
            run_as_user=1000,
            run_as_group=1000,
            run_as_non_root=True,
            allow_privilege_escalation=False,
            capabilities=c.V1Capabilities(drop=["ALL"]),
        ),
        volume_mounts=[
            c.V1VolumeMount(name="kfp-launcher", mount_path="/kfp-launcher"),
            c.V1VolumeMount(name="imgpipe-tmp", mount_path="/tmp"),
            c.V1VolumeMount(name="data", mount_path=mount_path),
            c.V1VolumeMount(
                name="kube-api-access-x",
                mount_path="/var/run/secrets/kubernetes.io/serviceaccount",
                read_only=True,
            ),
        ],
    )
    wait = c.V1Container(name="wait", image="quay.io/argoproj/argoexec:v3.4.17")
    return c.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=c.V1ObjectMeta(name=POD_NAME, namespace=NAMESPACE, uid=POD_UID),
        spec=c.V1PodSpec(
            containers=[wait, main],
            service_account_name="imgpipe-runner",
            node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
            tolerations=[
                c.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
            ],
            security_context=c.V1PodSecurityContext(
                run_as_user=1000,
                run_as_non_root=True,
                seccomp_profile=c.V1SeccompProfile(type="RuntimeDefault"),
            ),
            volumes=[
                c.V1Volume(name="kfp-launcher", empty_dir=c.V1EmptyDirVolumeSource()),
                c.V1Volume(name="imgpipe-tmp", empty_dir=c.V1EmptyDirVolumeSource()),
                c.V1Volume(
                    name="data",
                    persistent_volume_claim=c.V1PersistentVolumeClaimVolumeSource(claim_name=CLAIM),
                ),
                c.V1Volume(
                    name="kube-api-access-x",
                    projected=c.V1ProjectedVolumeSource(sources=[]),
                ),
            ],
        ),
        status=c.V1PodStatus(phase="Running"),
    )


def as_served(pod: kubernetes.client.V1Pod) -> dict:
    return kubernetes.client.ApiClient().sanitize_for_serialization(pod)


_JOBS = re.compile(
    r"^/apis/(kubeflow\.org/v1|jobset\.x-k8s\.io/v1alpha2)/namespaces/([^/]+)/(tfjobs|jobsets)"
    r"(?:/([^/]+))?$"
)
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/log)?$")


class FakeApiServer:
    """The endpoints the launcher calls, over HTTP, with a scripted controller of
    `kind`'s jobs (a launcher: tfjob or jobset).

    `script(polls)` -> (each replica's pod phase and its container's exit code or None,
    the job's condition or None[, whether the job is suspended]), asked at every read of
    the job: a condition "terminalState=X" is a JobSet's status.terminalState; a third
    item sets or lifts the job's suspension (Kueue's admission or preemption). A job
    created with Kueue's queue label starts suspended, as Kueue's webhook makes it. Each
    admission after a suspension makes new pods (new uids, later creation times); the
    pods listed while the job is suspended are the killed ones: Running ones are being
    deleted (deletionTimestamp), Failed ones are not. Replica logs are `logs[index]`.
    Every request is recorded as (api group, resource, verb).
    """

    def __init__(
        self,
        step: dict,
        script,
        logs: dict[int, str],
        status: dict | None = None,
        kind: str = "tfjob",
    ):
        self.step = step
        self.script = script
        self.logs = logs
        self.kind = kind
        self.plural = {"tfjob": tfjob_manifest.PLURAL, "jobset": jobset_manifest.PLURAL}[kind]
        self.refuse = status or {}  # (resource, verb) -> HTTP status
        self.calls: list[tuple[str, str, str]] = []
        self.jobs: dict[str, dict] = {}
        self.deleted: list[str] = []
        self.polls = 0
        self.phases: list[tuple[str, int | None]] = []
        self.suspended = False
        self.admissions = 0
        self.pod_index: dict[str, int] = {}
        self.failing_polls: set[int] = set()  # reads of the job answered with a 500
        self.api_gone_after: int | None = None  # from this read of the job on: all 503
        self.pending_status: dict = {}  # merged into a Pending replica's status
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                server.handle(self, "GET")

            def do_POST(self):  # noqa: N802
                server.handle(self, "POST")

            def do_DELETE(self):  # noqa: N802
                server.handle(self, "DELETE")

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def client(self) -> kubernetes.client.ApiClient:
        configuration = kubernetes.client.Configuration()
        configuration.host = self.url
        return kubernetes.client.ApiClient(configuration)

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlparse(request.path)
        query = urllib.parse.parse_qs(url.query)
        length = int(request.headers.get("Content-Length") or 0)
        body = json.loads(request.rfile.read(length)) if length else None
        gone = self.api_gone_after is not None and self.polls >= self.api_gone_after
        if match := _JOBS.match(url.path):
            return self.handle_job(request, method, match, body, gone)
        match = _PODS.match(url.path)
        assert match, url.path
        if match.group(3):
            self.calls.append(("", "pods/log", "get"))
            return _send_text(request, self.logs.get(self.pod_index[match.group(2)], ""))
        if match.group(2):
            self.calls.append(("", "pods", "get"))
            if ("pods", "get") in self.refuse:
                return _send(request, self.refuse[("pods", "get")], {"kind": "Status"})
            assert match.group(2) == POD_NAME
            return _send(request, 200, self.step)
        self.calls.append(("", "pods", "list"))
        if gone:
            return _send(request, 503, {"kind": "Status", "reason": "ServiceUnavailable"})
        name = query["labelSelector"][0].split("=", 1)[1]
        return _send(request, 200, {"kind": "PodList", "items": self.replica_pods(name)})

    def handle_job(self, request, method: str, match, body, gone: bool) -> None:
        verb = {"POST": "create", "GET": "get", "DELETE": "delete"}[method]
        group = match.group(1).split("/")[0]
        assert match.group(3) == self.plural, match.group(3)
        self.calls.append((group, self.plural, verb))
        if gone:  # the job's deletion too: its owner, the step's pod, deletes it
            return _send(request, 503, {"kind": "Status", "reason": "ServiceUnavailable"})
        if (self.plural, verb) in self.refuse:
            return _send(request, self.refuse[(self.plural, verb)], {"kind": "Status"})
        if verb == "create":
            self.jobs[body["metadata"]["name"]] = body
            # Kueue's webhook: a job that names a queue waits for its admission.
            self.suspended = kueue.QUEUE_LABEL in (body["metadata"].get("labels") or {})
            return _send(request, 201, body)
        name = match.group(4)
        if verb == "delete":
            self.deleted.append(name)
            return _send(request, 200, {"kind": "Status", "status": "Success"})
        self.polls += 1
        if self.api_gone_after is not None and self.polls >= self.api_gone_after:
            return _send(request, 503, {"kind": "Status", "reason": "ServiceUnavailable"})
        if self.polls in self.failing_polls:
            return _send(request, 500, {"kind": "Status", "reason": "InternalError"})
        phases, condition, *suspend = self.script(self.polls)
        if suspend and suspend[0] is not None:
            if self.suspended and not suspend[0]:
                self.admissions += 1
            self.suspended = suspend[0]
        self.phases = phases
        return _send(request, 200, self.job_as_served(name, condition))

    def job_as_served(self, name: str, condition: str | None) -> dict:
        job = json.loads(json.dumps(self.jobs[name]))
        kind = job["kind"]
        if self.kind == "tfjob":
            job["spec"]["runPolicy"]["suspend"] = self.suspended
        else:
            job["spec"]["suspend"] = self.suspended
        status: dict = {}
        if condition and condition.startswith("terminalState="):
            status["terminalState"] = condition.split("=", 1)[1]
        elif condition:
            status["conditions"] = [
                {"type": condition, "status": "True", "message": f"{kind} {name} is {condition}"}
            ]
        job["status"] = status
        return job

    def replica_pods(self, name: str) -> list[dict]:
        pods = []
        for index, (phase, code) in enumerate(self.phases):
            metadata = self.pod_metadata(name, index)
            if self.suspended and phase == "Running":
                metadata["deletionTimestamp"] = "2026-01-01T01:00:00Z"
            self.pod_index[metadata["name"]] = index
            pods.append(
                {
                    "metadata": metadata,
                    "spec": {"containers": [{"name": tfjob_manifest.CONTAINER, "image": IMAGE}]},
                    "status": {
                        "phase": phase,
                        "containerStatuses": [_container_status(phase, code)],
                        **(self.pending_status if phase == "Pending" else {}),
                    },
                }
            )
        return pods

    def pod_metadata(self, name: str, index: int) -> dict:
        """A replica pod's as the kind's controller names and labels it; each admission
        makes new pods."""
        run = self.admissions
        metadata = {
            "namespace": NAMESPACE,
            "uid": f"{name}-{run}-{index}",
            "creationTimestamp": f"2026-01-01T00:{run:02d}:00Z",
        }
        if self.kind == "tfjob":
            # The operator names a recreated replica's pod as before.
            metadata["name"] = f"{name}-worker-{index}"
            metadata["labels"] = {
                tfjob_manifest.JOB_NAME_LABEL: name,
                tfjob_manifest.REPLICA_TYPE_LABEL: "worker",
                tfjob_manifest.REPLICA_INDEX_LABEL: str(index),
            }
            return metadata
        metadata["name"] = f"{name}-worker-0-{index}-{run:05d}"
        metadata["labels"] = {
            jobset_manifest.JOBSET_NAME_LABEL: name,
            jobset_manifest.REPLICATED_JOB_LABEL: jobset_manifest.REPLICATED_JOB,
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        metadata["annotations"] = {jobset_manifest.COMPLETION_INDEX_ANNOTATION: str(index)}
        return metadata


def _container_status(phase: str, code: int | None) -> dict:
    state = (
        {"terminated": {"exitCode": code, "reason": "OOMKilled" if code == 137 else "Error"}}
        if code is not None
        else {"running": {}}
    )
    return {
        "name": tfjob_manifest.CONTAINER,
        "ready": phase == "Running",
        "restartCount": 0,
        "image": IMAGE,
        "imageID": "",
        "state": state,
    }


def _send(request, code: int, body: dict) -> None:
    data = json.dumps(body).encode()
    request.send_response(code)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


def _send_text(request, text: str) -> None:
    data = text.encode()
    request.send_response(200)
    request.send_header("Content-Type", "text/plain")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


class LogicalClock:
    """The launcher's clock (kubernetes_jobs.time), moved on only by its own waits: each
    poll's sleep adds the poll interval, and takes no time. A bound the launcher counts
    in seconds (the start timeout, the API's outage, the queued reports) is then a
    number of polls, and what it says in seconds ("queued for 0 s") is the same however
    slow the machine: on a busy one, the real clock ran past a 0.3 s start timeout
    before the first poll had answered."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def logical_clock(monkeypatch) -> LogicalClock:
    """Gives the launcher a LogicalClock for the rest of the test."""
    clock = LogicalClock()
    monkeypatch.setattr(kubernetes_jobs, "time", clock)
    return clock


@pytest.fixture(autouse=True)
def launcher_clock(monkeypatch) -> LogicalClock:
    """Autouse in every module that imports it: the launcher's seconds are its polls'
    (LogicalClock), not the machine's, so what a test reads in seconds does not depend on
    the machine's speed."""
    return logical_clock(monkeypatch)


def run_launcher(
    server: FakeApiServer,
    tmp_path,
    workers_count: int = 2,
    start_timeout_s: float = 60.0,
    api_outage_s: float = 60.0,
) -> str:
    """Runs the launcher of `server`'s kind of job against it; returns the job's folder."""
    folder = str(tmp_path / "model_run" / ".workers-job")
    launcher = kubernetes_jobs.KubernetesJobs(
        server.kind,
        server.client,
        poll_seconds=0.02,
        start_timeout_s=start_timeout_s,
        api_outage_s=api_outage_s,
    )
    launcher.run(
        {"the": "job"},
        workers_count,
        folder,
        str(tmp_path / "model_run" / "workers"),
        ["s3://b/train"],
    )
    return folder


def served_step(tmp_path) -> dict:
    return as_served(step_pod(mount_path=str(tmp_path)))


# --- the Role ------------------------------------------------------------------------


def role_rules() -> list[dict]:
    with open(os.path.join(K8S_DIR, "rbac.yaml")) as f:
        (role,) = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "Role"]
    return role["rules"]


def assert_calls_are_granted(calls) -> None:
    granted = {
        (group, resource, verb)
        for rule in role_rules()
        if "resourceNames" not in rule
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert set(calls) <= granted, set(calls) - granted
